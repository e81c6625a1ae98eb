// Fills first (docs/loop-ir.md, "Fusion"): the extern steps that make a
// small tensor from nothing but attributes and scalar inputs (full(): the
// optimizer's learning rate, momentum and decay factors as 0-d tensors, so
// that changing them needs no recompile) move to the start of the program.
// They sat between the kernels that read them, where they kept the
// horizontal fusion from joining a kernel with the one before it (a joined
// kernel runs where the earlier one ran, before the fill).
//
// Requires: a LoopProgram. Guarantees: the same values: a fill reads no
// buffer and no state (random fills, which advance the generator, stay
// where they are), and the other steps keep their order.
// KILN_DISABLE_PASSES=hoist_fills turns it off (the cpp backend skips it).
#pragma once
#include "compiler/lower/loop_ir.h"

namespace kiln::compiler::schedule {

// The number of steps moved.
int hoist_fills(lower::LoopProgram& p);

}  // namespace kiln::compiler::schedule
