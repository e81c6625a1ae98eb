// Vertical fusion (docs/loop-ir.md, "Fusion"): a pointwise kernel's value is
// computed inside the kernels that read it instead of being stored and
// loaded again.
//
// Requires: a LoopProgram from lower_graph (each kernel's loads address
// buffers of their own shape or reshapes of them). Guarantees: the same
// values for every buffer the run still needs. A pointwise producer with
// one store is inlined into all its consumer kernels (pointwise ones, and
// reductions, where it becomes the reduction's prologue) when
//   - no extern node, view run eagerly or graph output needs its tensor;
//   - every consumer reads it at coordinates of its own shape (not through
//     a reshape of its memory);
//   - no step between it and its last consumer writes in place what it
//     reads (moving the read past the write would change what it sees);
//   - the fusion score (bytes of memory traffic saved) is positive and the
//     consumer's expression stays small.
// The consumer then covers the producer's graph nodes; loads equal after
// substitution become one.
#pragma once
#include <cstdint>

#include "compiler/lower/loop_ir.h"

namespace kiln::compiler::schedule {

// Bytes of memory traffic that inlining `producer` into its `consumers`
// kernels saves: the store and the consumers' loads of its value, minus the
// reads of its inputs that each extra consumer repeats. Sizes at the
// capture shapes (the symbolic dim at its example size).
int64_t inline_score(const lower::LoopProgram& p, const lower::Kernel& producer, int consumers);

void fuse_vertical(lower::LoopProgram& p);

}  // namespace kiln::compiler::schedule
