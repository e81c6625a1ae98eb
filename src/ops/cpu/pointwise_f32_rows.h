// The bodies of the float32 pointwise rows (see pointwise_f32.h), written
// once over a small vector abstraction and compiled per instruction set:
// included only by pointwise_f32.cpp (AVX2) and pointwise_f32_avx512.cpp.
//
// Everything here has internal linkage (anonymous namespace inside a
// per-ISA namespace) and uses only vec_math.h: an inline function shared with
// other translation units could be emitted with AVX-512 instructions and
// picked by the linker for the AVX2 path. The op math is scalar_math.h's
// formulas on vec_math.h's vectors, the very code the C++ backend generates
// for the same ops (tests/compiler/test_vector_math.cpp checks every bit).
#pragma once
#include <cstdint>

#include "ops/cpu/pointwise_f32.h"
#include "ops/scalar_math.h"

#if defined(__AVX512F__)
#define KILN_F32_ISA avx512
#define KILN_F32_ISA_NAME "avx512"
#else
#define KILN_F32_ISA avx2
#define KILN_F32_ISA_NAME "avx2"
#endif

namespace kiln::cpu::KILN_F32_ISA {
namespace {

// The vector math generated code runs too (bit for bit the same results).
#include "ops/cpu/vec_math.h"

constexpr int64_t W = kLanes;

// The formulas of ops/scalar_math.h instantiated on whole vectors: each node
// of a formula is one call of vec_math.h, in the formula's order, exactly as
// the C++ renderer writes the formula's expression tree. So an op's eager
// result and its fused, generated recomputation agree in every bit.
struct Mask {
  vi m;
};
struct Vec {
  vf v;
  Vec() = default;
  explicit Vec(double c) : v(set1(static_cast<float>(c))) {}
  static Vec of(vf x) {
    Vec r;
    r.v = x;
    return r;
  }
};
inline Vec operator+(Vec a, Vec b) { return Vec::of(add(a.v, b.v)); }
inline Vec operator-(Vec a, Vec b) { return Vec::of(sub(a.v, b.v)); }
inline Vec operator*(Vec a, Vec b) { return Vec::of(mul(a.v, b.v)); }
inline Vec operator/(Vec a, Vec b) { return Vec::of(div(a.v, b.v)); }
inline Vec operator-(Vec a) { return Vec::of(neg(a.v)); }
inline Mask operator<(Vec a, Vec b) { return {lt(a.v, b.v)}; }
inline Mask operator<=(Vec a, Vec b) { return {le(a.v, b.v)}; }
inline Mask operator>(Vec a, Vec b) { return {gt(a.v, b.v)}; }
inline Mask operator>=(Vec a, Vec b) { return {ge(a.v, b.v)}; }
inline Mask operator==(Vec a, Vec b) { return {eq(a.v, b.v)}; }
inline Mask operator!=(Vec a, Vec b) { return {ne(a.v, b.v)}; }
// Comparisons as numbers (sign's (0 < x) - (x < 0)).
inline Vec operator-(Mask a, Mask b) { return Vec::of(sub(mask_to_float(a.m), mask_to_float(b.m))); }
inline Vec exp(Vec a) { return Vec::of(exp(a.v)); }
inline Vec log(Vec a) { return Vec::of(log(a.v)); }
inline Vec sqrt(Vec a) { return Vec::of(sqrt(a.v)); }
inline Vec tanh(Vec a) { return Vec::of(tanh(a.v)); }
inline Vec erf(Vec a) { return Vec::of(erf(a.v)); }
inline Vec pow(Vec a, Vec b) { return Vec::of(pow(a.v, b.v)); }
inline Mask isnan(Vec a) { return {isnan(a.v)}; }
inline Vec select(Mask c, Vec a, Vec b) { return Vec::of(select(c.m, a.v, b.v)); }

}  // namespace
}  // namespace kiln::cpu::KILN_F32_ISA

namespace kiln::scalar {
template <>
struct is_floating<kiln::cpu::KILN_F32_ISA::Vec> : std::true_type {};
}  // namespace kiln::scalar

namespace kiln::cpu::KILN_F32_ISA {
namespace {

// Input k of a row: contiguous (Contig) or one value broadcast (stride 0);
// n active lanes.
template <bool Contig>
inline vf ld(const float* p, int64_t i, int64_t n) {
  if constexpr (Contig) return load(p + i, n);
  else return set1(*p);
}

// y[i] = f(a[i]); two vectors per step to hide latency of the math calls.
template <bool CA, class F>
inline void map1(const float* a, float* y, int64_t n, F f) {
  int64_t i = 0;
  for (; i + 2 * W <= n; i += 2 * W) {
    vf r0 = f(ld<CA>(a, i, W)), r1 = f(ld<CA>(a, i + W, W));
    store(y + i, W, r0);
    store(y + i + W, W, r1);
  }
  for (; i < n; i += W) {
    int64_t m = n - i < W ? n - i : W;
    store(y + i, m, f(ld<CA>(a, i, m)));
  }
}

template <bool CA, bool CB, class F>
inline void map2(const float* a, const float* b, float* y, int64_t n, F f) {
  int64_t i = 0;
  for (; i + 2 * W <= n; i += 2 * W) {
    vf r0 = f(ld<CA>(a, i, W), ld<CB>(b, i, W)), r1 = f(ld<CA>(a, i + W, W), ld<CB>(b, i + W, W));
    store(y + i, W, r0);
    store(y + i + W, W, r1);
  }
  for (; i < n; i += W) {
    int64_t m = n - i < W ? n - i : W;
    store(y + i, m, f(ld<CA>(a, i, m), ld<CB>(b, i, m)));
  }
}

template <bool CA, bool CB, bool CC, class F>
inline void map3(const float* a, const float* b, const float* c, float* y, int64_t n, F f) {
  for (int64_t i = 0; i < n; i += W) {
    int64_t m = n - i < W ? n - i : W;
    store(y + i, m, f(ld<CA>(a, i, m), ld<CB>(b, i, m), ld<CC>(c, i, m)));
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

// A formula of scalar_math.h as a function of vectors.
template <class F>
inline auto on_vectors(F f) {
  return [f](auto... v) { return f(Vec::of(v)...).v; };
}

void unary(UnaryF32 op, const float* x, int64_t sx, float* y, int64_t n, float p0, float p1) {
  auto row = [&](auto f) { unary_row(x, sx, y, n, on_vectors(f)); };
  switch (op) {
    case UnaryF32::Neg: return row([](Vec v) { return scalar::neg(v); });
    case UnaryF32::Exp: return row([](Vec v) { return exp(v); });
    case UnaryF32::Log: return row([](Vec v) { return log(v); });
    case UnaryF32::Sqrt: return row([](Vec v) { return sqrt(v); });
    case UnaryF32::Rsqrt: return row([](Vec v) { return scalar::rsqrt(v); });
    case UnaryF32::Abs: return row([](Vec v) { return scalar::abs(v); });
    case UnaryF32::Sign: return row([](Vec v) { return scalar::sign(v); });
    case UnaryF32::Relu: return row([](Vec v) { return scalar::relu(v); });
    case UnaryF32::GeluErf: return row([](Vec v) { return scalar::gelu(v, false); });
    case UnaryF32::GeluTanh: return row([](Vec v) { return scalar::gelu(v, true); });
    case UnaryF32::Sigmoid: return row([](Vec v) { return scalar::sigmoid(v); });
    case UnaryF32::Tanh: return row([](Vec v) { return tanh(v); });
    case UnaryF32::Erf: return row([](Vec v) { return erf(v); });
    case UnaryF32::Clamp: {
      Vec lo(p0), hi(p1);
      return row([lo, hi](Vec v) { return scalar::clamp(v, lo, hi); });
    }
  }
}

// pow with one exponent for the whole row: only the lanes' branch of pow().
void pow_scalar_exponent(const float* a, int64_t sa, float e, float* y, int64_t n) {
  if (e == 2.0f) return unary_row(a, sa, y, n, [](vf v) { return v * v; });
  if (e == 3.0f) return unary_row(a, sa, y, n, [](vf v) { return v * v * v; });
  if (e == 0.5f) return unary_row(a, sa, y, n, [](vf v) { return pow_half(v); });
  if (e == -0.5f) return unary_row(a, sa, y, n, [](vf v) { return pow_minus_half(v); });
  if (e == -1.0f) return unary_row(a, sa, y, n, [](vf v) { return set1(1.0f) / v; });
  if (e == -2.0f) return unary_row(a, sa, y, n, [](vf v) { return set1(1.0f) / (v * v); });
  vf ev = set1(e);
  unary_row(a, sa, y, n, [ev](vf v) { return sleef_pow(v, ev); });
}

void binary(BinaryF32 op, const float* a, int64_t sa, const float* b, int64_t sb, float* y, int64_t n) {
  auto row = [&](auto f) { binary_row(a, sa, b, sb, y, n, on_vectors(f)); };
  switch (op) {
    case BinaryF32::Add: return row([](Vec u, Vec v) { return scalar::add(u, v); });
    case BinaryF32::Sub: return row([](Vec u, Vec v) { return scalar::sub(u, v); });
    case BinaryF32::Mul: return row([](Vec u, Vec v) { return scalar::mul(u, v); });
    case BinaryF32::Div: return row([](Vec u, Vec v) { return scalar::div(u, v); });
    case BinaryF32::Pow:
      if (sb == 0) return pow_scalar_exponent(a, sa, *b, y, n);
      return row([](Vec u, Vec v) { return pow(u, v); });
    case BinaryF32::Maximum: return row([](Vec u, Vec v) { return scalar::maximum(u, v); });
    case BinaryF32::Minimum: return row([](Vec u, Vec v) { return scalar::minimum(u, v); });
    case BinaryF32::GeluBackwardErf: return row([](Vec g, Vec v) { return scalar::gelu_backward(g, v, false); });
    case BinaryF32::GeluBackwardTanh: return row([](Vec g, Vec v) { return scalar::gelu_backward(g, v, true); });
    case BinaryF32::ReluBackward: return row([](Vec g, Vec y) { return scalar::relu_backward(g, y); });
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
  for (int64_t i = 0; i < n; i += W) {
    int64_t m = n - i < W ? n - i : W;
    store(y + i, m, select(float_to_mask(load_bools(c + i, m)), ld<CA>(a, i, m), ld<CB>(b, i, m)));
  }
}
void where(const bool* c, int64_t sc, const float* a, int64_t sa, const float* b, int64_t sb, float* y, int64_t n) {
  if (sc == 0) {  // one condition for the row: a copy of one side
    bool take_a = *c;
    return unary_row(take_a ? a : b, take_a ? sa : sb, y, n, [](vf v) { return v; });
  }
  if (sa != 0 && sb != 0) where_loop<true, true>(c, a, b, y, n);
  else if (sa != 0) where_loop<true, false>(c, a, b, y, n);
  else if (sb != 0) where_loop<false, true>(c, a, b, y, n);
  else where_loop<false, false>(c, a, b, y, n);
}

// ---- in-place rows (self is contiguous, read and written) ----
void fill(float* self, float value, int64_t n) {
  vf v = set1(value);
  for (int64_t i = 0; i < n; i += W) store(self + i, n - i < W ? n - i : W, v);
}
void add_(float* self, const float* x, int64_t sx, float alpha, int64_t n) {
  vf al = set1(alpha);
  if (alpha == 1.0f) {
    if (sx != 0) map2<true, true>(self, x, self, n, [](vf s, vf v) { return s + v; });
    else map2<true, false>(self, x, self, n, [](vf s, vf v) { return s + v; });
    return;
  }
  if (sx != 0) map2<true, true>(self, x, self, n, [al](vf s, vf v) { return fma(al, v, s); });
  else map2<true, false>(self, x, self, n, [al](vf s, vf v) { return fma(al, v, s); });
}
void mul_(float* self, const float* x, int64_t sx, int64_t n) {
  if (sx != 0) map2<true, true>(self, x, self, n, [](vf s, vf v) { return s * v; });
  else map2<true, false>(self, x, self, n, [](vf s, vf v) { return s * v; });
}
template <class F>
inline void ternary_update(float* self, const float* a, int64_t sa, const float* b, int64_t sb, int64_t n, F f) {
  if (sa != 0 && sb != 0) map3<true, true, true>(self, a, b, self, n, f);
  else if (sa != 0) map3<true, true, false>(self, a, b, self, n, f);
  else if (sb != 0) map3<true, false, true>(self, a, b, self, n, f);
  else map3<true, false, false>(self, a, b, self, n, f);
}
void addcmul_(float* self, const float* a, int64_t sa, const float* b, int64_t sb, float value, int64_t n) {
  vf val = set1(value);
  ternary_update(self, a, sa, b, sb, n, [val](vf s, vf u, vf v) { return fma(val * u, v, s); });
}
void addcdiv_(float* self, const float* a, int64_t sa, const float* b, int64_t sb, float value, int64_t n) {
  vf val = set1(value);
  ternary_update(self, a, sa, b, sb, n, [val](vf s, vf u, vf v) { return s + (val * u) / v; });
}
void lerp_(float* self, const float* end, int64_t se, float weight, int64_t n) {
  // |w| < 0.5: self + w (end - self); else end + (w - 1) (end - self): exact at both ends.
  bool low = (weight < 0.0f ? -weight : weight) < 0.5f;
  vf coeff = set1(low ? weight : weight - 1.0f);
  auto f = [coeff, low](vf s, vf e) { return fma(coeff, e - s, low ? s : e); };
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
