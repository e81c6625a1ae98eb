// Merging adjacent loops that walk memory as one (docs/loop-ir.md,
// "Simplification"), as Inductor's loop-body simplification does.
//
// Requires: a kernel whose loads and stores are affine in its loop
// variables. Guarantees: the same elements read and written in the same
// order. Two adjacent output loops (or two adjacent reduced loops) a, b with
// a outside b merge into one loop of extent A*B when every load and store
// addresses them as a*(B*c) + b*c for one c per access (c may be 0): the
// contiguous dims of f32[8, 16, 4, 4] read at [i0, i1, i2, i3] with a
// per-channel operand [i1] become loops over i0, i1 and one of 16. Longer
// innermost loops vectorize better and cost less loop overhead.
#pragma once
#include "compiler/lower/loop_ir.h"

namespace kiln::compiler::lower {

void merge_loops(Kernel& k);
void merge_loops(LoopProgram& p);

}  // namespace kiln::compiler::lower
