// A ReLU or GELU after a batch norm becomes the batch norm's epilogue, and
// its backward becomes batch_norm_backward's prologue; a residual add and
// ReLU after a batch norm become its epilogue too.
//
// Requires: a graph the verifier accepts; runs after fold_batch_norm (an eval
// batch norm folded into its convolution is gone) and before blocked_layouts
// (the fused nodes keep their layout group).
// Guarantees: a batch_norm whose float32 CPU output y is read by exactly one
// relu or erf gelu (and, for gelu, by gelu_backward nodes whose gradient
// goes to this norm's batch_norm_backward alone) takes the attribute
// activation="relu" | "gelu" and writes act(y) instead of y; the activation
// node goes, and y is never written to memory. Each batch_norm_backward of
// that norm (same input, weight and saved statistics) whose grad_out is the
// activation's backward (gelu_backward(g, y), or relu_backward(g, relu(y)))
// read by nothing else takes the activation too, with g as grad_out and the
// norm's bias as a sixth input: it recomputes y from x to apply act'(y)
// run by run (ops/norm.cpp), so act's backward is no pass of its own. y not
// a graph output, neither value written in place. A batch_norm whose y is
// read only by an add of a same-shape float32 operand r, whose sum only a
// relu reads (a residual block's tail), becomes batch_norm(..., r) with
// activation="relu": relu(y + r) in one pass; the relu's backward reads its
// output, so that stays as it is. That node goes where the add was (r exists
// there); of two batch norms into one add (a downsampling block) the first
// takes it. These forms have no derivative: the pass runs on graphs about to
// execute (execution_passes), after the ahead-of-time split.
// Results equal the unfused graph's up to float32 rounding (y recomputed
// from the saved statistics in the backward).
#pragma once
#include "compiler/graph/graph.h"

namespace kiln::compiler {

// The number of batch norms that took an activation.
int fuse_norm_activations(Graph& g);

}  // namespace kiln::compiler
