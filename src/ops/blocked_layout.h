// oneDNN's blocked activation layout nChw16c as a kiln tensor, for the
// compiler's layout pass (src/compiler/passes/blocked_layouts.h).
//
// oneDNN's float32 convolutions on AVX-512 compute in nChw16c: channels in
// blocks of 16, the 16 channels of one pixel side by side. An NCHW tensor of
// N, C, H, W (C a multiple of 16) in that layout is exactly a contiguous
// [N, C/16, H, W, 16] tensor, element (n, c, h, w) at [n, c / 16, h, w, c % 16].
// The ops that read or write it say so with an attribute (its value "nChw16c")
// and keep their NCHW meaning otherwise:
//   conv2d                  in_layout          its input
//                           out_layout         its output
//   conv2d_backward_input   grad_out_layout    its grad_out
//                           grad_input_layout  its output
//   conv2d_backward_weight  grad_out_layout    its grad_out
//                           input_layout       its input
//   max_pool2d              input_layout       its input
//                           output_layout      its output and indices (needs input_layout)
//   max_pool2d_backward     grad_input_layout  its output
//                           grad_output_layout its grad_out and indices (needs grad_input_layout)
//   batch_norm              layout             its input and output (and a fused residual, input 5)
//   batch_norm_backward     layout             its grad_out, input and output
// (a pool's indices stay positions h * W + w in the input plane). Channels
// not a multiple of 16 take oneDNN's padded form [N, ceil(C/16), H, W, 16]
// (padded_blocked_shape) between conv2d's out_layout and in_layout and
// max_pool2d's input_layout with its attribute channels = C (an NCHW output
// of C channels); the padding lanes are zero. The
// convolutions and pools give the plain op's results bit for bit; batch norm
// sums its statistics lane by lane (equal within float rounding). Pointwise
// ops need no attribute: on operands of one shape they mean the same in any
// layout. So the values between convolutions need no reorder into the
// blocked layout and back around each call. Float32 on the CPU only;
// compiled graphs only (the ops have no derivative in this form).
#pragma once
#include <string>

#include "core/attrs.h"
#include "kiln/error.h"
#include "kiln/shape.h"
#include "kiln/tensor.h"

namespace kiln {

inline constexpr const char* kNChw16c = "nChw16c";
inline constexpr int64_t kChannelBlock = 16;

// Whether attribute `name` of `op` asks for nChw16c (absent: plain NCHW).
inline bool wants_blocked(const Attrs& a, const char* name, const char* op) {
  if (!a.has(name)) return false;
  const std::string& v = a.s(name);
  KILN_CHECK(v == kNChw16c, op, ": ", name, "=\"", v, "\" is not a layout kiln knows; the only one is \"", kNChw16c,
             "\" (or leave the attribute out for NCHW)");
  return true;
}

// The number of 16-channel blocks holding c channels.
inline int64_t channel_blocks(int64_t c) { return (c + kChannelBlock - 1) / kChannelBlock; }

// [N, ceil(C/16), H, W, 16] for the NCHW shape `s`, oneDNN's padded form of
// nChw16c when C is not a multiple of 16: the last block's lanes from C % 16
// on are padding, zero in a value the compiler keeps in this form (the
// convolutions' outputs are written so), and the ops that read such a value
// take its real channel count from elsewhere (the weight, an attribute).
inline Shape padded_blocked_shape(const Shape& s, const char* op) {
  KILN_CHECK(s.size() == 4, op, ": the nChw16c layout needs a 4-D NCHW shape, got ", shape_str(s));
  return {s[0], channel_blocks(s[1]), s[2], s[3], kChannelBlock};
}

// [N, C/16, H, W, 16] for the NCHW shape `s`; C must be a multiple of 16.
inline Shape blocked_shape(const Shape& s, const char* op) {
  KILN_CHECK(s.size() == 4 && s[1] % kChannelBlock == 0, op, ": the nChw16c layout needs a 4-D NCHW shape with ",
             "channels a multiple of 16, got ", shape_str(s));
  return {s[0], s[1] / kChannelBlock, s[2], s[3], kChannelBlock};
}

// The layout is float32 on the CPU (oneDNN's float32 blocking).
inline void check_blocked_dtype(const Tensor& t, const Device& dev, const char* op) {
  KILN_CHECK(t.dtype() == DType::Float32 && dev == Device::cpu(), op, ": the nChw16c layout is for float32 tensors ",
             "on the CPU, got ", dtype_name(t.dtype()), " on ", dev.str());
}

// Called by the derivatives of the ops above: their nChw16c forms are the
// compiler's, made after its backward graph, so they have none.
inline void check_no_blocked_derivative(const Attrs& a, const char* name, const char* op) {
  KILN_CHECK(!a.has(name), op, " with ", name, "=nChw16c has no derivative: it is a compiled graph's form of the op, "
             "made after the graph's backward; differentiate the plain op");
}

// The nChw16c copy of an NCHW tensor x (C a multiple of 16): a contiguous
// [N, C/16, H, W, 16] tensor (tests, benchmarks, and what a caller of the
// ops' blocked forms hands them).
inline Tensor to_blocked(const Tensor& x) {
  const Shape s = blocked_shape(x.shape(), "to_blocked");
  return x.view({s[0], s[1], kChannelBlock, s[2], s[3]}).permute({0, 1, 3, 4, 2}).contiguous();
}

// The NCHW shape of a [N, C/16, H, W, 16] blocked shape.
inline Shape nchw_of_blocked(const Shape& b, const char* op) {
  KILN_CHECK(b.size() == 5 && b[4] == kChannelBlock, op, ": an nChw16c operand is [N, C/16, H, W, 16], got ",
             shape_str(b));
  return {b[0], b[1] * kChannelBlock, b[2], b[3]};
}

// The NCHW shape of a padded [N, ceil(C/16), H, W, 16] shape holding `channels` channels.
inline Shape nchw_of_blocked(const Shape& b, int64_t channels, const char* op) {
  KILN_CHECK(b.size() == 5 && b[4] == kChannelBlock && b[1] == channel_blocks(channels), op,
             ": an nChw16c operand of ", channels, " channels is [N, ", channel_blocks(channels), ", H, W, 16], got ",
             shape_str(b));
  return {b[0], channels, b[2], b[3]};
}

}  // namespace kiln
