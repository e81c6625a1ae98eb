// Layouts kept across the convolutions (issue 9's layout pass). oneDNN's
// float32 convolutions compute in the blocked layout nChw16c, so every call
// reorders its NCHW operands into it and its output back. This pass makes
// the values between convolutions nChw16c where every op that touches them
// can read and write that layout, so a chain conv -> max-pool -> batch norm
// -> GELU -> conv (and its backward) never reorders between the layers.
//
// Requires: a graph the verifier accepts; runs after the ahead-of-time split
// (the rewritten ops have no derivative) and after fuse_conv_activation.
// Guarantees: a value becomes nChw16c, shape [N, C/16, H, W, 16]
// (ops/blocked_layout.h), when it is a contiguous 4-D CPU value with channels
// a multiple of 16 (no symbolic dim but the batch), not a graph input or
// output, its storage never written in place, and every port that produces
// or reads it takes the layout. A value of other channel counts becomes
// oneDNN's padded form [N, ceil(C/16), H, W, 16] (zero lanes after channel
// C) when, besides, each of its ports keeps the padding zero and reads it
// without a reorder: a static-shape float32 convolution's activation port
// (any of the three ops) where oneDNN's primitive computes in that layout as
// it is (conv_keeps_padded_blocked), max_pool2d's input (its output stays
// NCHW; the pass sets the pool's attribute channels to C),
// max_pool2d_backward's output from an NCHW grad_out, pointwise ops that
// keep zeros (relu, gelu, their backward, neg; add, sub, mul of blocked
// operands only) and channel sums; where the lanes exceed 1.5x the channels
// (6 in 16), only the ports that cost nothing per padding lane (the
// convolutions' and the forward pool's). A channel sum (sum over dims 0, 2, 3 of
// a 4-D value, a bias gradient) of a blocked value becomes the sum over the
// blocked dims 0, 2, 3 ([C/16, 16]) viewed as the channels, sliced to C
// where padded. The ports:
//   conv2d                   input (in_layout), output (out_layout)
//   conv2d_backward_input    grad_out (grad_out_layout), output (grad_input_layout)
//   conv2d_backward_weight   grad_out (grad_out_layout), input (input_layout)
//   max_pool2d               input (input_layout); output and indices together
//                            (output_layout, only with a blocked input)
//   max_pool2d_backward      output (grad_input_layout); grad_out and indices
//                            together (grad_output_layout, only with a blocked output)
//   batch_norm               input and output together (layout)
//   batch_norm_backward      grad_out, input and output together (layout)
//   pointwise ops            output and every operand of its shape together,
//                            when the others are single broadcast values
// (float32 for the named ops, int64 for the indices, any dtype for pointwise
// ops). Each op gets its attribute set to "nChw16c". Results equal the plain
// graph's: convolutions and pools bit for bit (the same oneDNN primitives,
// reorders are copies, the pools compare in the same order), batch norm's
// statistics summed lane by lane in another order (float rounding only).
// KILN_DISABLE_PASSES=blocked_layouts turns it off.
#pragma once
#include "compiler/graph/graph.h"

namespace kiln::compiler {

// The number of values made nChw16c.
int keep_blocked_layouts(Graph& g);

}  // namespace kiln::compiler
