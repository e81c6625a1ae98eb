// Layouts kept across a convolution and its max-pool: the first slice of the
// layout pass (issue 9). oneDNN's float32 convolutions compute in the blocked
// layout nChw16c, so every call reorders its NCHW operands into it and its
// output back; a max-pool between two convolutions then reads the NCHW copy,
// and in the backward the pool's gradient is reordered again for each of the
// convolution's two backward kernels.
//
// Requires: a graph the verifier accepts; runs after the ahead-of-time split
// (the rewritten ops have no derivative) and after fuse_conv_activation.
// Guarantees: the float32 CPU output of a conv2d whose channels are a multiple
// of 16 and whose only readers are max_pool2d ops (not a graph output, its
// storage never written in place) becomes an nChw16c value, shape
// [N, C/16, H, W, 16] (ops/blocked_layout.h): the conv2d gets
// out_layout="nChw16c" and each pool input_layout="nChw16c". Likewise the
// output of a max_pool2d_backward read only as grad_out by
// conv2d_backward_input/_weight: grad_input_layout on the pool, grad_out_layout
// on the convolutions. Results are the plain graph's bit for bit (the same
// oneDNN primitives, reorders are copies, the pool kernels compare in the
// same order). KILN_DISABLE_PASSES=blocked_layouts turns it off.
#pragma once
#include "compiler/graph/graph.h"

namespace kiln::compiler {

// The number of values made nChw16c.
int keep_blocked_layouts(Graph& g);

}  // namespace kiln::compiler
