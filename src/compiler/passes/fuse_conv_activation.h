// A ReLU or GELU after a convolution becomes the convolution's post-op.
//
// Requires: a graph the verifier accepts; runs after fold_batch_norm (which
// leaves convolutions with an activation alone).
// Guarantees: each relu, and each gelu with approximate "none" (erf GELU),
// whose input is the float32 output of a conv2d read by nothing else (not a
// graph output, its storage never written in place) becomes that conv2d with
// the attribute activation="relu" | "gelu": oneDNN applies it as an eltwise
// post-op inside the convolution (ops/conv.cpp), so the pre-activation output
// is never written to memory and read back. Only where the post-op pays
// (conv2d_post_op_pays): oneDNN's Winograd kernels take ReLU but not GELU,
// and losing Winograd costs far more than the pass saved, so on AVX-512 a
// 3x3 stride-1 convolution's GELU stays its own kernel. In a training step the
// activation's backward reads the pre-activation output (gelu) or the
// activation's output (relu): the first keeps the convolution's output alive
// (two readers), so only patterns whose backward needs nothing extra fuse.
// Passes run after the ahead-of-time split, so no derivative of the fused
// node is ever taken. Results equal the unfused graph's up to oneDNN's
// post-op rounding (its GELU's erf differs from kiln's in the last bits).
#pragma once
#include "compiler/graph/graph.h"

namespace kiln::compiler {

// The number of activations fused.
int fuse_conv_activations(Graph& g);

}  // namespace kiln::compiler
