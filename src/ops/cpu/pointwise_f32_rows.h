// The bodies of the float32 pointwise rows (see pointwise_f32.h), written
// once over a small vector abstraction and compiled per instruction set:
// included only by pointwise_f32.cpp (AVX2) and pointwise_f32_avx512.cpp.
//
// Everything here has internal linkage (anonymous namespace inside a
// per-ISA namespace) and uses only intrinsics and Sleef: an inline function
// shared with other translation units could be emitted with AVX-512
// instructions and picked by the linker for the AVX2 path.
#pragma once
#include <immintrin.h>
#include <sleef.h>

#include <cstdint>

#include "ops/cpu/pointwise_f32.h"

#if defined(__AVX512F__)
#define KILN_F32_ISA avx512
#define KILN_F32_ISA_NAME "avx512"
#else
#define KILN_F32_ISA avx2
#define KILN_F32_ISA_NAME "avx2"
#endif

namespace kiln::cpu::KILN_F32_ISA {
namespace {

#if defined(__AVX512F__)
using V = __m512;     // 16 floats
using C = __mmask16;  // per-lane condition
using M = __mmask16;  // tail mask
constexpr int64_t W = 16;
inline V set1(float v) { return _mm512_set1_ps(v); }
inline V loadu(const float* p) { return _mm512_loadu_ps(p); }
inline void storeu(float* p, V v) { _mm512_storeu_ps(p, v); }
inline M tail_mask(int64_t r) { return static_cast<M>((1u << r) - 1u); }
inline V load_tail(const float* p, M m) { return _mm512_maskz_loadu_ps(m, p); }
inline void store_tail(float* p, M m, V v) { _mm512_mask_storeu_ps(p, m, v); }
inline V vadd(V a, V b) { return _mm512_add_ps(a, b); }
inline V vsub(V a, V b) { return _mm512_sub_ps(a, b); }
inline V vmul(V a, V b) { return _mm512_mul_ps(a, b); }
inline V vdiv(V a, V b) { return _mm512_div_ps(a, b); }
inline V vfma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }  // a * b + c
// max/min return the second operand when either is NaN.
inline V vmax(V a, V b) { return _mm512_max_ps(a, b); }
inline V vmin(V a, V b) { return _mm512_min_ps(a, b); }
inline V vsqrt(V a) { return _mm512_sqrt_ps(a); }
inline V vabs(V a) { return _mm512_abs_ps(a); }
inline V vneg(V a) { return _mm512_xor_ps(a, set1(-0.0f)); }
inline C vlt(V a, V b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
inline C vgt(V a, V b) { return _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ); }
inline C visnan(V a) { return _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q); }
inline V vselect(C c, V t, V f) { return _mm512_mask_blend_ps(c, f, t); }
inline V vexp(V a) { return Sleef_expf16_u10avx512f(a); }
inline V vlog(V a) { return Sleef_logf16_u10avx512f(a); }
inline V vand(V a, V b) { return _mm512_and_ps(a, b); }
inline V vxor(V a, V b) { return _mm512_xor_ps(a, b); }
// W bools (0/1 bytes) as a lane condition.
inline C bools_to_cond(const bool* c) {
  return _mm512_test_epi32_mask(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(c))),
                                _mm512_set1_epi32(0xff));
}
inline V vpow(V a, V b) { return Sleef_powf16_u10avx512f(a, b); }
#else
using V = __m256;   // 8 floats
using C = __m256;   // all-ones lanes where true
using M = __m256i;  // tail mask
constexpr int64_t W = 8;
inline V set1(float v) { return _mm256_set1_ps(v); }
inline V loadu(const float* p) { return _mm256_loadu_ps(p); }
inline void storeu(float* p, V v) { _mm256_storeu_ps(p, v); }
inline M tail_mask(int64_t r) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(r)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
inline V load_tail(const float* p, M m) { return _mm256_maskload_ps(p, m); }
inline void store_tail(float* p, M m, V v) { _mm256_maskstore_ps(p, m, v); }
inline V vadd(V a, V b) { return _mm256_add_ps(a, b); }
inline V vsub(V a, V b) { return _mm256_sub_ps(a, b); }
inline V vmul(V a, V b) { return _mm256_mul_ps(a, b); }
inline V vdiv(V a, V b) { return _mm256_div_ps(a, b); }
inline V vfma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
inline V vmax(V a, V b) { return _mm256_max_ps(a, b); }
inline V vmin(V a, V b) { return _mm256_min_ps(a, b); }
inline V vsqrt(V a) { return _mm256_sqrt_ps(a); }
inline V vabs(V a) { return _mm256_andnot_ps(set1(-0.0f), a); }
inline V vneg(V a) { return _mm256_xor_ps(a, set1(-0.0f)); }
inline C vlt(V a, V b) { return _mm256_cmp_ps(a, b, _CMP_LT_OQ); }
inline C vgt(V a, V b) { return _mm256_cmp_ps(a, b, _CMP_GT_OQ); }
inline C visnan(V a) { return _mm256_cmp_ps(a, a, _CMP_UNORD_Q); }
inline V vselect(C c, V t, V f) { return _mm256_blendv_ps(f, t, c); }
inline V vexp(V a) { return Sleef_expf8_u10avx2(a); }
inline V vlog(V a) { return Sleef_logf8_u10avx2(a); }
inline V vand(V a, V b) { return _mm256_and_ps(a, b); }
inline V vxor(V a, V b) { return _mm256_xor_ps(a, b); }
inline C bools_to_cond(const bool* c) {
  __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(c)));
  return _mm256_castsi256_ps(_mm256_cmpgt_epi32(v, _mm256_setzero_si256()));
}
inline V vpow(V a, V b) { return Sleef_powf8_u10avx2(a, b); }
#endif

// erf as PyTorch's vectorized CPU kernels compute it (Abramowitz & Stegun
// 7.1.26, |error| < 1.5e-7): about 5x faster than Sleef's erff, and the same
// numbers PyTorch's gelu gives.
inline V verf(V x) {
  V ax = vabs(x);
  V t = vdiv(set1(1.0f), vfma(set1(0.3275911f), ax, set1(1.0f)));
  V r = vfma(set1(1.061405429f), t, set1(-1.453152027f));
  r = vfma(r, t, set1(1.421413741f));
  r = vfma(r, t, set1(-0.284496736f));
  r = vfma(r, t, set1(0.254829592f));
  V e = vexp(vneg(vmul(x, x)));
  V y = vfma(vneg(vmul(e, t)), r, set1(1.0f));  // 1 - r t exp(-x^2) >= 0
  return vxor(y, vand(x, set1(-0.0f)));          // with the sign of x
}
// tanh, ~3x faster than Sleef's tanhf with relative error < 3e-7:
// |x| < 0.625: Eigen's rational approximation (odd degree 13 / even degree 6);
// else 1 - 2 / (exp(2|x|) + 1) with x's sign, which saturates to exactly +-1
// like a correctly rounded tanh (gelu's 1 + tanh relies on that).
inline V vtanh(V x) {
  V ax = vabs(x);
  V x2 = vmul(x, x);
  V p = vfma(set1(-2.76076847742355e-16f), x2, set1(2.00018790482477e-13f));
  p = vfma(p, x2, set1(-8.60467152213735e-11f));
  p = vfma(p, x2, set1(5.12229709037114e-08f));
  p = vfma(p, x2, set1(1.48572235717979e-05f));
  p = vfma(p, x2, set1(6.37261928875436e-04f));
  p = vfma(p, x2, set1(4.89352455891786e-03f));
  p = vmul(p, x);
  V q = vfma(set1(1.19825839466702e-06f), x2, set1(1.18534705686654e-04f));
  q = vfma(q, x2, set1(2.26843463243900e-03f));
  q = vfma(q, x2, set1(4.89352518554385e-03f));
  V small = vdiv(p, q);
  V e = vexp(vmul(vmin(set1(20.0f), ax), set1(2.0f)));  // NaN stays NaN
  V big = vsub(set1(1.0f), vdiv(set1(2.0f), vadd(e, set1(1.0f))));
  big = vxor(big, vand(x, set1(-0.0f)));
  // NaN: the comparison is false and big is NaN.
  return vselect(vlt(ax, set1(0.625f)), small, big);
}

// NaN-propagating max/min (PyTorch's maximum/minimum, clamp, relu).
inline V vmax_nan(V a, V b) { return vselect(visnan(a), a, vmax(a, b)); }
inline V vmin_nan(V a, V b) { return vselect(visnan(a), a, vmin(a, b)); }

// Input k of a row: contiguous (Contig) or one value broadcast (stride 0).
template <bool Contig>
inline V ld(const float* p, int64_t i) {
  if constexpr (Contig) return loadu(p + i);
  else return set1(*p);
}
template <bool Contig>
inline V ld_tail(const float* p, int64_t i, M m) {
  if constexpr (Contig) return load_tail(p + i, m);
  else return set1(*p);
}

// y[i] = f(a[i]); two vectors per step to hide latency of the math calls.
template <bool CA, class F>
inline void map1(const float* a, float* y, int64_t n, F f) {
  int64_t i = 0;
  for (; i + 2 * W <= n; i += 2 * W) {
    V r0 = f(ld<CA>(a, i)), r1 = f(ld<CA>(a, i + W));
    storeu(y + i, r0);
    storeu(y + i + W, r1);
  }
  for (; i + W <= n; i += W) storeu(y + i, f(ld<CA>(a, i)));
  if (i < n) {
    M m = tail_mask(n - i);
    store_tail(y + i, m, f(ld_tail<CA>(a, i, m)));
  }
}

template <bool CA, bool CB, class F>
inline void map2(const float* a, const float* b, float* y, int64_t n, F f) {
  int64_t i = 0;
  for (; i + 2 * W <= n; i += 2 * W) {
    V r0 = f(ld<CA>(a, i), ld<CB>(b, i)), r1 = f(ld<CA>(a, i + W), ld<CB>(b, i + W));
    storeu(y + i, r0);
    storeu(y + i + W, r1);
  }
  for (; i + W <= n; i += W) storeu(y + i, f(ld<CA>(a, i), ld<CB>(b, i)));
  if (i < n) {
    M m = tail_mask(n - i);
    store_tail(y + i, m, f(ld_tail<CA>(a, i, m), ld_tail<CB>(b, i, m)));
  }
}

template <bool CA, bool CB, bool CC, class F>
inline void map3(const float* a, const float* b, const float* c, float* y, int64_t n, F f) {
  int64_t i = 0;
  for (; i + W <= n; i += W) storeu(y + i, f(ld<CA>(a, i), ld<CB>(b, i), ld<CC>(c, i)));
  if (i < n) {
    M m = tail_mask(n - i);
    store_tail(y + i, m, f(ld_tail<CA>(a, i, m), ld_tail<CB>(b, i, m), ld_tail<CC>(c, i, m)));
  }
}

template <class F>
inline void unary_row(const float* x, int64_t sx, float* y, int64_t n, F f) {
  if (sx != 0) map1<true>(x, y, n, f);
  else map1<false>(x, y, n, f);
}
template <class F>
inline void binary_row(const float* a, int64_t sa, const float* b, int64_t sb, float* y, int64_t n, F f) {
  if (sa != 0 && sb != 0) map2<true, true>(a, b, y, n, f);
  else if (sa != 0) map2<true, false>(a, b, y, n, f);
  else if (sb != 0) map2<false, true>(a, b, y, n, f);
  else map2<false, false>(a, b, y, n, f);
}

// ---- the math, shared by forward and backward rows ----
constexpr float kSqrt1_2 = 0.70710678118654752440f;
constexpr float kSqrt2OverPi = 0.79788456080286535588f;  // sqrt(2 / pi)
constexpr float kInvSqrt2Pi = 0.39894228040143267794f;   // 1 / sqrt(2 pi)
constexpr float kGeluKappa = 0.044715f;

inline V gelu_erf(V x) {
  // 0.5 x (1 + erf(x / sqrt 2))
  V h = vmul(x, set1(0.5f));
  return vfma(h, verf(vmul(x, set1(kSqrt1_2))), h);
}
inline V gelu_tanh(V x) {
  // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
  V x3 = vmul(vmul(x, x), x);
  V inner = vmul(set1(kSqrt2OverPi), vfma(set1(kGeluKappa), x3, x));
  V h = vmul(x, set1(0.5f));
  return vfma(h, vtanh(inner), h);
}
inline V gelu_backward_erf(V g, V x) {
  // cdf(x) + x pdf(x)
  V cdf = vmul(set1(0.5f), vadd(set1(1.0f), verf(vmul(x, set1(kSqrt1_2)))));
  V pdf = vmul(set1(kInvSqrt2Pi), vexp(vmul(vmul(x, x), set1(-0.5f))));
  return vmul(g, vfma(x, pdf, cdf));
}
inline V gelu_backward_tanh(V g, V x) {
  V x2 = vmul(x, x);
  V inner = vmul(set1(kSqrt2OverPi), vfma(vmul(set1(kGeluKappa), x2), x, x));
  V t = vtanh(inner);
  V left = vmul(set1(0.5f), x);
  V right = vadd(set1(1.0f), t);
  V left_d = vmul(set1(0.5f), right);
  V tanh_d = vsub(set1(1.0f), vmul(t, t));
  V inner_d = vmul(set1(kSqrt2OverPi), vfma(set1(3.0f * kGeluKappa), x2, set1(1.0f)));
  V right_d = vmul(vmul(left, tanh_d), inner_d);
  return vmul(g, vadd(left_d, right_d));
}
inline V sigmoid(V x) { return vdiv(set1(1.0f), vadd(set1(1.0f), vexp(vneg(x)))); }
inline V sign(V x) {
  V zero = set1(0.0f);
  return vsub(vselect(vgt(x, zero), set1(1.0f), zero), vselect(vlt(x, zero), set1(1.0f), zero));
}

void unary(UnaryF32 op, const float* x, int64_t sx, float* y, int64_t n, float p0, float p1) {
  switch (op) {
    case UnaryF32::Neg: return unary_row(x, sx, y, n, [](V v) { return vneg(v); });
    case UnaryF32::Exp: return unary_row(x, sx, y, n, [](V v) { return vexp(v); });
    case UnaryF32::Log: return unary_row(x, sx, y, n, [](V v) { return vlog(v); });
    case UnaryF32::Sqrt: return unary_row(x, sx, y, n, [](V v) { return vsqrt(v); });
    case UnaryF32::Rsqrt: return unary_row(x, sx, y, n, [](V v) { return vdiv(set1(1.0f), vsqrt(v)); });
    case UnaryF32::Abs: return unary_row(x, sx, y, n, [](V v) { return vabs(v); });
    case UnaryF32::Sign: return unary_row(x, sx, y, n, [](V v) { return sign(v); });
    // max(0, v) returns v when v is NaN, as PyTorch's relu does.
    case UnaryF32::Relu: return unary_row(x, sx, y, n, [](V v) { return vmax(set1(0.0f), v); });
    case UnaryF32::GeluErf: return unary_row(x, sx, y, n, [](V v) { return gelu_erf(v); });
    case UnaryF32::GeluTanh: return unary_row(x, sx, y, n, [](V v) { return gelu_tanh(v); });
    case UnaryF32::Sigmoid: return unary_row(x, sx, y, n, [](V v) { return sigmoid(v); });
    case UnaryF32::Tanh: return unary_row(x, sx, y, n, [](V v) { return vtanh(v); });
    case UnaryF32::Clamp: {
      V lo = set1(p0), hi = set1(p1);
      // min(max(v, lo), hi), NaN v stays NaN (max/min return their second operand on NaN).
      return unary_row(x, sx, y, n, [lo, hi](V v) { return vmin(hi, vmax(lo, v)); });
    }
  }
}

// pow with one exponent for the whole row: PyTorch's special cases.
void pow_scalar_exponent(const float* a, int64_t sa, float e, float* y, int64_t n) {
  if (e == 2.0f) return unary_row(a, sa, y, n, [](V v) { return vmul(v, v); });
  if (e == 3.0f) return unary_row(a, sa, y, n, [](V v) { return vmul(vmul(v, v), v); });
  if (e == 0.5f) return unary_row(a, sa, y, n, [](V v) { return vsqrt(v); });
  if (e == -0.5f) return unary_row(a, sa, y, n, [](V v) { return vdiv(set1(1.0f), vsqrt(v)); });
  if (e == -1.0f) return unary_row(a, sa, y, n, [](V v) { return vdiv(set1(1.0f), v); });
  if (e == -2.0f) return unary_row(a, sa, y, n, [](V v) { return vdiv(set1(1.0f), vmul(v, v)); });
  V ev = set1(e);
  unary_row(a, sa, y, n, [ev](V v) { return vpow(v, ev); });
}

void binary(BinaryF32 op, const float* a, int64_t sa, const float* b, int64_t sb, float* y, int64_t n) {
  switch (op) {
    case BinaryF32::Add: return binary_row(a, sa, b, sb, y, n, [](V u, V v) { return vadd(u, v); });
    case BinaryF32::Sub: return binary_row(a, sa, b, sb, y, n, [](V u, V v) { return vsub(u, v); });
    case BinaryF32::Mul: return binary_row(a, sa, b, sb, y, n, [](V u, V v) { return vmul(u, v); });
    case BinaryF32::Div: return binary_row(a, sa, b, sb, y, n, [](V u, V v) { return vdiv(u, v); });
    case BinaryF32::Pow:
      if (sb == 0) return pow_scalar_exponent(a, sa, *b, y, n);
      return binary_row(a, sa, b, sb, y, n, [](V u, V v) { return vpow(u, v); });
    case BinaryF32::Maximum: return binary_row(a, sa, b, sb, y, n, [](V u, V v) { return vmax_nan(u, v); });
    case BinaryF32::Minimum: return binary_row(a, sa, b, sb, y, n, [](V u, V v) { return vmin_nan(u, v); });
    case BinaryF32::GeluBackwardErf:
      return binary_row(a, sa, b, sb, y, n, [](V g, V v) { return gelu_backward_erf(g, v); });
    case BinaryF32::GeluBackwardTanh:
      return binary_row(a, sa, b, sb, y, n, [](V g, V v) { return gelu_backward_tanh(g, v); });
  }
}

// Comparisons and where: plain loops over the stride cases, which the
// compiler vectorizes for this translation unit's instruction set.
template <int64_t SA, int64_t SB, class F>
inline void compare_loop(const float* __restrict a, const float* __restrict b, bool* __restrict y, int64_t n, F f) {
  for (int64_t i = 0; i < n; ++i) y[i] = f(a[i * SA], b[i * SB]);
}
template <class F>
inline void compare_row(const float* a, int64_t sa, const float* b, int64_t sb, bool* y, int64_t n, F f) {
  if (sa != 0 && sb != 0) compare_loop<1, 1>(a, b, y, n, f);
  else if (sa != 0) compare_loop<1, 0>(a, b, y, n, f);
  else if (sb != 0) compare_loop<0, 1>(a, b, y, n, f);
  else compare_loop<0, 0>(a, b, y, n, f);
}
void compare(CompareF32 op, const float* a, int64_t sa, const float* b, int64_t sb, bool* y, int64_t n) {
  switch (op) {
    case CompareF32::Eq: return compare_row(a, sa, b, sb, y, n, [](float u, float v) { return u == v; });
    case CompareF32::Ne: return compare_row(a, sa, b, sb, y, n, [](float u, float v) { return u != v; });
    case CompareF32::Lt: return compare_row(a, sa, b, sb, y, n, [](float u, float v) { return u < v; });
    case CompareF32::Le: return compare_row(a, sa, b, sb, y, n, [](float u, float v) { return u <= v; });
    case CompareF32::Gt: return compare_row(a, sa, b, sb, y, n, [](float u, float v) { return u > v; });
    case CompareF32::Ge: return compare_row(a, sa, b, sb, y, n, [](float u, float v) { return u >= v; });
  }
}

// where: the condition bytes become a lane mask, so the select has no
// branch (random masks would mispredict on every other element).
template <bool CA, bool CB>
inline void where_loop(const bool* c, const float* a, const float* b, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + W <= n; i += W) storeu(y + i, vselect(bools_to_cond(c + i), ld<CA>(a, i), ld<CB>(b, i)));
  if (i < n) {
    bool tail[W] = {};
    for (int64_t k = 0; k < n - i; ++k) tail[k] = c[i + k];
    M m = tail_mask(n - i);
    store_tail(y + i, m, vselect(bools_to_cond(tail), ld_tail<CA>(a, i, m), ld_tail<CB>(b, i, m)));
  }
}
void where(const bool* c, int64_t sc, const float* a, int64_t sa, const float* b, int64_t sb, float* y, int64_t n) {
  if (sc == 0) {  // one condition for the row: a copy of one side
    bool take_a = *c;
    return unary_row(take_a ? a : b, take_a ? sa : sb, y, n, [](V v) { return v; });
  }
  if (sa != 0 && sb != 0) where_loop<true, true>(c, a, b, y, n);
  else if (sa != 0) where_loop<true, false>(c, a, b, y, n);
  else if (sb != 0) where_loop<false, true>(c, a, b, y, n);
  else where_loop<false, false>(c, a, b, y, n);
}

// ---- in-place rows (self is contiguous, read and written) ----
void fill(float* self, float value, int64_t n) {
  V v = set1(value);
  int64_t i = 0;
  for (; i + W <= n; i += W) storeu(self + i, v);
  if (i < n) store_tail(self + i, tail_mask(n - i), v);
}
void add_(float* self, const float* x, int64_t sx, float alpha, int64_t n) {
  V al = set1(alpha);
  if (alpha == 1.0f) {
    if (sx != 0) map2<true, true>(self, x, self, n, [](V s, V v) { return vadd(s, v); });
    else map2<true, false>(self, x, self, n, [](V s, V v) { return vadd(s, v); });
    return;
  }
  if (sx != 0) map2<true, true>(self, x, self, n, [al](V s, V v) { return vfma(al, v, s); });
  else map2<true, false>(self, x, self, n, [al](V s, V v) { return vfma(al, v, s); });
}
void mul_(float* self, const float* x, int64_t sx, int64_t n) {
  if (sx != 0) map2<true, true>(self, x, self, n, [](V s, V v) { return vmul(s, v); });
  else map2<true, false>(self, x, self, n, [](V s, V v) { return vmul(s, v); });
}
template <class F>
inline void ternary_update(float* self, const float* a, int64_t sa, const float* b, int64_t sb, int64_t n, F f) {
  if (sa != 0 && sb != 0) map3<true, true, true>(self, a, b, self, n, f);
  else if (sa != 0) map3<true, true, false>(self, a, b, self, n, f);
  else if (sb != 0) map3<true, false, true>(self, a, b, self, n, f);
  else map3<true, false, false>(self, a, b, self, n, f);
}
void addcmul_(float* self, const float* a, int64_t sa, const float* b, int64_t sb, float value, int64_t n) {
  V val = set1(value);
  ternary_update(self, a, sa, b, sb, n, [val](V s, V u, V v) { return vfma(vmul(val, u), v, s); });
}
void addcdiv_(float* self, const float* a, int64_t sa, const float* b, int64_t sb, float value, int64_t n) {
  V val = set1(value);
  ternary_update(self, a, sa, b, sb, n, [val](V s, V u, V v) { return vadd(s, vdiv(vmul(val, u), v)); });
}
void lerp_(float* self, const float* end, int64_t se, float weight, int64_t n) {
  // |w| < 0.5: self + w (end - self); else end + (w - 1) (end - self): exact at both ends.
  bool low = (weight < 0.0f ? -weight : weight) < 0.5f;
  V coeff = set1(low ? weight : weight - 1.0f);
  auto f = [coeff, low](V s, V e) { return vfma(coeff, vsub(e, s), low ? s : e); };
  if (se != 0) map2<true, true>(self, end, self, n, f);
  else map2<true, false>(self, end, self, n, f);
}

constexpr F32Kernels kTable = {
    .isa = KILN_F32_ISA_NAME,
    .unary = unary,
    .binary = binary,
    .compare = compare,
    .where = where,
    .fill = fill,
    .add_ = add_,
    .mul_ = mul_,
    .addcmul_ = addcmul_,
    .addcdiv_ = addcdiv_,
    .lerp_ = lerp_,
};

}  // namespace
}  // namespace kiln::cpu::KILN_F32_ISA
