// Eval batch norm folded into the convolution before it.
//
// Requires: a graph the verifier accepts.
// Guarantees: each batch_norm in eval mode (training false, running
// statistics given, eps an attribute) whose input is the float32 or bfloat16 output of a
// conv2d read by nothing else (not a graph output, its storage never written
// in place), and whose statistics outputs nobody reads, is replaced by one
// conv2d with scaled weights and a shifted bias:
//   s  = weight * rsqrt(running_var + eps)        (weight absent: 1)
//   w' = conv_weight * s.view(O, 1, 1, 1)
//   b' = (conv_bias - running_mean) * s + bias    (either absent: 0)
// The folding ops read graph inputs (parameters and buffers), so they run on
// every call: a parameter changed between calls is folded anew, never stale.
// Their cost is a pass over the weights; what goes is a read and a write of
// every activation the batch norm touched. Results equal the unfolded graph's
// up to float32 rounding (the products associate differently).
// A bfloat16 convolution (autocast) gets its weight and bias folded in
// float32 and cast to bfloat16 once: the unfolded norm ran on plain bfloat16
// activations, outside the float32 graph's fused layouts (ResNet-18's bf16
// eval forward on the AMD EPYC VM, whose last eight convolutions chose
// bfloat16: 0.94-0.97x of compiled float32 unfolded). Its results differ
// from the unfolded graph's by bfloat16 rounding of the folded weights.
#pragma once
#include "compiler/graph/graph.h"

namespace kiln::compiler {

// The number of batch norms folded.
int fold_batch_norms(Graph& g);

}  // namespace kiln::compiler
