// No-op removal.
//
// Requires: a graph the verifier accepts.
// Guarantees: reads of a node that only reproduces a value read that value
// instead, and the node is removed:
//   - a view op (not as_strided) whose output has its input's shape, strides
//     and symbolic dims (view/expand to the same shape, the identity permute,
//     a full slice, a squeeze of no size-1 dim);
//   - cast to the input's dtype; copy of a contiguous value;
//   - x + 0, 0 + x, x - 0, x * 1, 1 * x, x / 1 with a constant 0 or 1 (any
//     shape), when the result has x's shape, dtype and device.
// It also collapses chains: view(view(x)) (or a view of a squeeze/unsqueeze)
// of a contiguous x becomes one view of x, permute(permute(x)) one permute;
// the inner node, if now unused, is left to dead-code elimination.
// Nothing observable changes: a non-view no-op is kept when its input or
// output storage is written in place somewhere in the graph, or when
// removing it would hand a graph input, a constant or another output back as
// an output (the caller expects a fresh tensor there).
// One exception in IEEE arithmetic: x + 0 turns -0.0 into +0.0; the pass
// returns x (-0.0), as PyTorch's compiler does.
#pragma once
#include "compiler/graph/graph.h"

namespace kiln::compiler {

void remove_noops(Graph& g);

}  // namespace kiln::compiler
