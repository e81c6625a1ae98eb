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

// A scalar attribute (fill value, alpha) as element type T: nonzero is true,
// 16-bit floats round through float32.
template <typename T>
T from_double(double v) {
  if constexpr (std::is_same_v<T, bool>) return v != 0.0;
  else if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) return T(static_cast<float>(v));
  else return static_cast<T>(v);
}
}  // namespace kiln::cpu
