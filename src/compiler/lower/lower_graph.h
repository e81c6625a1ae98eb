// Lowering a graph to the loop IR (docs/loop-ir.md, "Lowering").
//
// Requires: a graph that verifies. Guarantees: a LoopProgram whose steps
// compute every value the graph's outputs need, in graph order: one kernel
// per lowered node (fusion is compiler/schedule's job), an extern step per
// node that stays on the eager kernels, a view step per folded view (run
// eagerly only where a tensor of it is needed).
//
// What lowers (float32, with bool for comparisons and masks; on the CPU):
//   - pointwise ops with a scalar formula (ops/scalar_expr.h), inputs
//     broadcast; a one-element constant input becomes a literal;
//   - sum, mean, amax, amin over any dims, keepdim or not; var by Welford;
//   - views folded into indexing (view_access.h);
//   - conv2d of few output channels as a reduction (small_conv.h).
// Everything else is an extern node: other conv2d, matmul, pooling, batch_norm,
// softmax kernels, argmax, in-place ops, random and factory ops, other
// dtypes, attributes read from scalar inputs. An op that may not lower
// stays extern; it never lowers to a different answer.
#pragma once
#include "compiler/lower/loop_ir.h"

namespace kiln::compiler::lower {

enum class NodeLowering : uint8_t { None, Pointwise, Reduction, FoldedView, Extern };
const char* node_lowering_name(NodeLowering l);

// How each node of the graph is lowered (None: Input and Constant nodes).
std::vector<NodeLowering> classify_nodes(const Graph& g);

// The graph as loop kernels and extern steps (the graph must outlive it).
LoopProgram lower_graph(const Graph& g);

}  // namespace kiln::compiler::lower
