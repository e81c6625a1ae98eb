// Strided copy with dtype conversion: the one kernel behind copy, cast,
// contiguous, clone and copy_ on CPU.
#pragma once
#include <cstdint>
#include <type_traits>

#include "kiln/tensor.h"

namespace kiln::cpu {
// dst[i] = convert(src[i]) for every element; src broadcasts to dst's shape.
void copy_cast(const Tensor& src, const Tensor& dst);

// float32 <-> bfloat16 (as raw bits) over contiguous buffers, one thread:
// BFloat16(float)'s rounding, written so the compiler vectorizes it.
void f32_to_bf16(const float* s, uint16_t* d, int64_t n);
void bf16_to_f32(const uint16_t* s, float* d, int64_t n);

// A contiguous tensor of `shape` and floating `dtype` holding values in
// [-0.5, 0.5) from a fixed sequence: operands for timing a kernel before its
// first call (per-layer precision choices). Not kiln's generator, so timing
// never moves the user's random stream; never uninitialized memory, whose
// NaNs or denormals could take slow paths.
Tensor synthetic_operand(const Shape& shape, DType dtype);

// A scalar attribute (fill value, alpha) as element type T: nonzero is true,
// 16-bit floats round through float32.
template <typename T>
T from_double(double v) {
  if constexpr (std::is_same_v<T, bool>) return v != 0.0;
  else if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) return T(static_cast<float>(v));
  else return static_cast<T>(v);
}
}  // namespace kiln::cpu
