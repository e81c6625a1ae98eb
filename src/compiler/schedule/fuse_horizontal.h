// Horizontal fusion (docs/loop-ir.md, "Fusion"): independent kernels over
// the same iteration space become one kernel, so inputs they share are read
// once and one parallel region (one OpenMP barrier) replaces several: the
// sums of a batch norm's backward over one input, a mean and a variance of
// the same tensor, pointwise ops on the same activation.
//
// Requires: a LoopProgram after vertical fusion (loop variables named by
// lowering, so equal spaces have equal loops). Guarantees: the same values
// for every buffer. A later kernel C joins an earlier kernel K when
//   - they have the same output loops and the same reduced loops;
//   - C reads nothing K or a step between them defines (every buffer C
//     reads exists when K runs) or writes in place;
//   - the joined kernel's expressions stay small.
// C's loads, accumulators and stores join K's (equal loads become one) and
// C's step goes.
#pragma once
#include "compiler/lower/loop_ir.h"

namespace kiln::compiler::schedule {

void fuse_horizontal(lower::LoopProgram& p);

}  // namespace kiln::compiler::schedule
