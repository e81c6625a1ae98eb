// conv2d with a fused activation post-op: conv2d's optional `activation`
// attribute (src/ops/conv.cpp). nn::fuse_modules is its one caller; the op
// stays conv2d in the ops table, so capture, the profiler and the compiler
// see one node.
#pragma once
#include <string>

#include "core/attrs.h"
#include "kiln/ops.h"
#include "ops/op_def.h"

namespace kiln {

// activation(conv2d(x, weight, bias)) as one oneDNN primitive (float32) with
// an eltwise post-op; activation "" (none), "relu" or "gelu" (erf).
Tensor conv2d_fused(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p,
                    const std::string& activation);

// Whether the post-op pays for a float32 convolution of these shapes on this
// CPU: false where oneDNN has a Winograd kernel for the plain convolution but
// not with the post-op (GELU's erf on AVX-512; measured 2-2.5x slower on 3x3
// layers, far above the activation pass saved). conv2d with the attribute
// then computes the activation after the convolution, so it is correct either
// way; the compiler asks first and keeps the activation as its own kernel,
// where it may fuse with its neighbours. False for shapes conv2d rejects.
bool conv2d_post_op_pays(const Shape& x, const Shape& weight, bool bias, const Conv2dParams& p,
                         const std::string& activation);

// The same for conv2d with a residual input (act(conv + residual), oneDNN's
// sum post-op then `activation`, "" for none): false where the post-ops would
// cost the Winograd kernel (GELU), and for shapes conv2d rejects. The
// compiler's fuse_conv_residual asks before it fuses a residual add.
bool conv2d_residual_post_op_pays(const Shape& x, const Shape& weight, bool bias, const Conv2dParams& p,
                                  const std::string& activation);

// Whether a float32 conv2d, conv2d_backward_input or conv2d_backward_weight
// node (in0, in1 its first two inputs' NCHW shapes, `attrs` its attributes,
// no layout attributes yet) computes with its activations in padded nChw16c
// as they are: src the input side (conv2d's input, conv2d_backward_input's
// output, conv2d_backward_weight's input), dst the output side (conv2d's
// output, the backward ops' grad_out), each true where oneDNN's primitive
// reads or writes that layout with no reorder. Outputs' padding lanes come
// out zero: oneDNN's direct kernels write zeros there, and the Winograd and
// backward-data kernels compute them from the weights' zero padding (its
// reorders zero-pad), so they are zero while the operands are finite
// (measured with NaN-filled output buffers, oneDNN 2.6, direct and
// Winograd, forward and backward data). The layout pass keeps a value of channels not a multiple of
// 16 padded only between ports that take it so. False for algorithm="tuned"
// (its choice is made at the first call) and for shapes the ops reject.
struct PaddedBlockedSides {
  bool src = false, dst = false;
};
PaddedBlockedSides conv_keeps_padded_blocked(OpId op, const Shape& in0, const Shape& in1, bool bias,
                                             const Attrs& attrs);

// How one conv2d, conv2d_backward_input or conv2d_backward_weight call runs
// on this CPU as things stand (kiln explain): `in0`, `in1` its first two
// inputs' shapes, `attrs` its attributes. A per-layer choice not made yet (a
// bfloat16 or algorithm="tuned" layer before its first call) says so.
struct ConvRun {
  std::string precision;  // "float32", "bfloat16", "float32 (bfloat16 measured slower)", ...
  std::string algorithm;  // "auto", "direct", "tuned: direct", "tuned: auto", "tuned: not measured yet"
  std::string impl;       // oneDNN's implementation ("jit_wino_4x3:avx512_core"), or why there is none
};
ConvRun describe_conv_run(OpId op, const Shape& in0, const Shape& in1, bool bias, DType dtype, const Attrs& attrs);

// Whether a bfloat16 conv2d, conv2d_backward_input or conv2d_backward_weight
// node (`in0`, `in1` its first two inputs' shapes) runs in float32 on this
// CPU as things stand: oneDNN has no bfloat16 kernel for it here, its first
// call measured float32 faster (or a recorded choice says so), or
// KILN_CONV_BF16=0. A layer not called yet is timed now, as its first call
// would time it, on synthetic operands of its shapes (the choice is then
// recorded, and its first call times nothing). The compiler's
// float32_regions pass asks it before the graph first runs.
bool conv_bf16_runs_float32(OpId op, const Shape& in0, const Shape& in1, bool bias, const Attrs& attrs);

// Whether a bfloat16 layer should compute in float32 where its operands are
// float32 values already (a compiled float32 region): it runs in float32
// anyway, or bfloat16 won its timing only by saving the casts of its
// operands and result, which inside such a region it would need instead.
// Decides an undecided layer as conv_bf16_runs_float32 does.
bool conv_bf16_loses_among_float32(OpId op, const Shape& in0, const Shape& in1, bool bias, const Attrs& attrs);

// Records a bfloat16 layer's precision choice as its first call would after
// timing both paths (tests: a choice that does not depend on this CPU's
// timings). A recorded choice is read before oneDNN is asked for a kernel:
// record bfloat16 only for a layer that has one here.
// `choice`: "bf16", "bf16-alone" (bfloat16 among bfloat16 neighbours only) or "float32".
void record_conv_bf16_choice(OpId op, const Shape& in0, const Shape& in1, bool bias, const Attrs& attrs,
                             const std::string& choice);

// Whether bfloat16 convolutions choose their precision by timing on this CPU
// (KILN_CONV_BF16=auto, the default, with AVX-512's bfloat16 kernels): only
// then does capture time a bf16 graph whole against its float32 version
// (compiler/capture/precision_trial.h); "1" and "0" are the user's choice.
bool conv_bf16_chosen_by_timing();

// The Conv2dParams a conv op's attributes spell (stride, padding, dilation, groups).
Conv2dParams conv2d_params(const Attrs& a);

}  // namespace kiln
