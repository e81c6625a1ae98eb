#include "ops/cpu/copy.h"

#include <cstdint>
#include <cstring>

#include "ops/cpu/loops.h"

namespace kiln::cpu {

namespace {
template <typename D, typename S>
inline D convert(S v) {
  if constexpr (std::is_same_v<D, bool>) return static_cast<float>(v) != 0.0f;
  else if constexpr (std::is_same_v<D, Half> || std::is_same_v<D, BFloat16>) return D(static_cast<float>(v));
  else if constexpr (std::is_same_v<S, Half> || std::is_same_v<S, BFloat16>) return static_cast<D>(static_cast<float>(v));
  else return static_cast<D>(v);
}
// float32 <-> bfloat16 over contiguous buffers, the conversions autocast
// makes around every op on the CPU: written on the bit patterns so the
// compiler vectorizes them (BFloat16's constructor, one element at a time
// with a branch for NaN, does not), and split across threads. The same
// rounding as BFloat16(float): to nearest even, NaN to the quiet NaN 0x7fc0.
}  // namespace

void f32_to_bf16(const float* s, uint16_t* d, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, s + i, 4);
    uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    d[i] = static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? 0x7fc0u : rounded);
  }
}
void bf16_to_f32(const uint16_t* s, float* d, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u = static_cast<uint32_t>(s[i]) << 16;
    std::memcpy(d + i, &u, 4);
  }
}

namespace {

// True when it converted: both contiguous, one shape, float32 <-> bfloat16.
bool copy_cast_bf16_contiguous(const Tensor& src, const Tensor& dst) {
  if (!src.is_contiguous() || !dst.is_contiguous() || src.shape() != dst.shape()) return false;
  const DType a = src.dtype(), b = dst.dtype();
  const int64_t n = dst.numel();
  if (a == DType::Float32 && b == DType::BFloat16) {
    const float* s = static_cast<const float*>(src.data_ptr());
    uint16_t* d = static_cast<uint16_t*>(dst.data_ptr());
    parallel_for(n, kParallelGrain, [&](int64_t lo, int64_t hi) { f32_to_bf16(s + lo, d + lo, hi - lo); });
    return true;
  }
  if (a == DType::BFloat16 && b == DType::Float32) {
    const uint16_t* s = static_cast<const uint16_t*>(src.data_ptr());
    float* d = static_cast<float*>(dst.data_ptr());
    parallel_for(n, kParallelGrain, [&](int64_t lo, int64_t hi) { bf16_to_f32(s + lo, d + lo, hi - lo); });
    return true;
  }
  return false;
}
}  // namespace

void copy_cast(const Tensor& src, const Tensor& dst) {
  if (dst.numel() == 0) return;
  if (copy_cast_bf16_contiguous(src, dst)) return;
  if (src.dtype() == dst.dtype() && src.is_contiguous() && dst.is_contiguous() && src.shape() == dst.shape()) {
    const char* s = static_cast<const char*>(src.data_ptr());
    char* d = static_cast<char*>(dst.data_ptr());
    int64_t bytes = static_cast<int64_t>(dst.nbytes());
    parallel_for(bytes, 1 << 20, [&](int64_t b, int64_t e) { std::memcpy(d + b, s + b, static_cast<size_t>(e - b)); });
    return;
  }
  visit_dtype(dst.dtype(), [&]<typename D>() {
    visit_dtype(src.dtype(), [&]<typename S>() {
      for_each_row<2>(dst, {&src}, [](char* const* p, const int64_t* st, int64_t n) {
        char* d = p[0];
        const char* s = p[1];
        if (st[0] == sizeof(D) && st[1] == sizeof(S)) {
          D* dd = reinterpret_cast<D*>(d);
          const S* ss = reinterpret_cast<const S*>(s);
          for (int64_t i = 0; i < n; ++i) dd[i] = convert<D, S>(ss[i]);
        } else {
          for (int64_t i = 0; i < n; ++i)
            *reinterpret_cast<D*>(d + i * st[0]) = convert<D, S>(*reinterpret_cast<const S*>(s + i * st[1]));
        }
      });
    });
  });
}

Tensor synthetic_operand(const Shape& shape, DType dtype) {
  Tensor f = Tensor::empty(shape, DType::Float32);
  float* p = f.data<float>();
  uint32_t x = 0x9e3779b9u;
  for (int64_t i = 0; i < f.numel(); ++i) {
    x = x * 1664525u + 1013904223u;  // Numerical Recipes' LCG: values, not randomness, are what timing needs
    p[i] = static_cast<float>(x >> 8) * (1.0f / 16777216.0f) - 0.5f;
  }
  if (dtype == DType::Float32) return f;
  Tensor out = Tensor::empty(shape, dtype);
  copy_cast(f, out);
  return out;
}

}  // namespace kiln::cpu
