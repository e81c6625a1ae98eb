// Vectorized float32 rows for the pointwise and in-place op families.
//
// A "row" is a run of n elements along the innermost dim (what for_each_row
// hands a kernel). The output is contiguous; each input is contiguous
// (stride 1, in elements) or a broadcast scalar (stride 0). The bodies live in
// pointwise_f32_rows.h (scalar_math.h's formulas on vec_math.h's vectors, the
// math generated code runs too) and are compiled twice: pointwise_f32.cpp (AVX2 + FMA,
// 8 floats) and pointwise_f32_avx512.cpp (16 floats); f32_kernels() picks one
// with cpu_has_avx512().
//
// This header is included by the AVX-512 translation unit, so it holds
// declarations only (no inline code that another TU could share).
#pragma once
#include <cstdint>

namespace kiln::cpu {

enum class UnaryF32 : uint8_t {
  Neg, Exp, Log, Sqrt, Rsqrt, Abs, Sign, Relu, GeluErf, GeluTanh, Sigmoid, Tanh, Erf,
  Clamp,  // p0 = lower bound, p1 = upper bound (+-inf when absent)
};
enum class BinaryF32 : uint8_t {
  Add, Sub, Mul, Div, Pow, Maximum, Minimum,
  GeluBackwardErf, GeluBackwardTanh,  // a = grad, b = x
  ReluBackward,                       // a = grad, b = relu's result
};
enum class CompareF32 : uint8_t { Eq, Ne, Lt, Le, Gt, Ge };

struct F32Kernels {
  const char* isa;
  // y[i] = op(x[i * sx])
  void (*unary)(UnaryF32 op, const float* x, int64_t sx, float* y, int64_t n, float p0, float p1);
  // y[i] = op(a[i * sa], b[i * sb])
  void (*binary)(BinaryF32 op, const float* a, int64_t sa, const float* b, int64_t sb, float* y, int64_t n);
  // y[i] = a[i * sa] <op> b[i * sb]
  void (*compare)(CompareF32 op, const float* a, int64_t sa, const float* b, int64_t sb, bool* y, int64_t n);
  // y[i] = c[i * sc] ? a[i * sa] : b[i * sb]
  void (*where)(const bool* c, int64_t sc, const float* a, int64_t sa, const float* b, int64_t sb, float* y,
                int64_t n);

  // In-place updates of a contiguous row of self (optimizers).
  void (*fill)(float* self, float value, int64_t n);
  // self += alpha * x
  void (*add_)(float* self, const float* x, int64_t sx, float alpha, int64_t n);
  // self *= x
  void (*mul_)(float* self, const float* x, int64_t sx, int64_t n);
  // self += value * a * b
  void (*addcmul_)(float* self, const float* a, int64_t sa, const float* b, int64_t sb, float value, int64_t n);
  // self += value * a / b
  void (*addcdiv_)(float* self, const float* a, int64_t sa, const float* b, int64_t sb, float value, int64_t n);
  // self = lerp(self, end, weight), PyTorch's two-sided formula
  void (*lerp_)(float* self, const float* end, int64_t se, float weight, int64_t n);
};

// The kernels for the instruction set in use now (cpu_isa()).
const F32Kernels& f32_kernels();
const F32Kernels& f32_kernels_avx2();
const F32Kernels& f32_kernels_avx512();  // call only when cpu_has_avx512()

}  // namespace kiln::cpu
