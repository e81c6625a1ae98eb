// A residual add (and the ReLU after it) becomes its convolution's epilogue:
// ResNet's block tails in eval graphs, once fold_batch_norm has folded each
// eval batch norm into its convolution (conv -> add(shortcut) -> relu).
//
// Requires: a graph the verifier accepts; runs after fold_batch_norm and
// fuse_conv_activation (a convolution that has an activation is left alone:
// its activation comes before the add) and before blocked_layouts (the
// residual joins the convolution's output layout group).
// Guarantees: a float32 CPU conv2d output y read only by one add (no alpha)
// of an operand r of y's exact type (shape, strides, dtype, device), with
// neither y, r nor the sum written in place and y not a graph output,
// becomes conv2d(x, w, b, r): act(conv + r) in one oneDNN primitive with a
// sum post-op (ops/conv.cpp). Where the sum's only reader is a relu, the relu
// joins as activation="relu" and its output is the fused node's. Only where
// the post-ops keep the convolution's algorithm (conv2d_residual_post_op_pays:
// Winograd takes sum then ReLU), and not for algorithm="tuned" convolutions
// (max-autotune times the plain form). The fused node goes where the add was
// (r exists there). At run time the convolution adds into r's own storage
// when the graph reads r for the last time there (the cpp backend hands such
// a value over), so the sum costs one read and write of r instead of the
// add's pass over three tensors. These forms have no derivative the compiler
// needs: the pass runs on graphs about to execute (execution_passes).
// Results equal the unfused graph's up to float32 rounding (oneDNN adds in
// its own order).
#pragma once
#include "compiler/graph/graph.h"

namespace kiln::compiler {

// The number of adds fused.
int fuse_conv_residuals(Graph& g);

}  // namespace kiln::compiler
