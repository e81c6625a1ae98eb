// kiln's vector math: the one implementation of float32 pointwise math that
// the eager kernels (src/ops/cpu/pointwise_f32_rows.h) and the generated C++
// (src/compiler/codegen/cpp/render_cpp.cpp, which pastes this file's text at
// the top of every generated translation unit) both run, so a value computed
// eagerly and the same value recomputed inside a fused kernel have the same
// bits (max-pool's backward compares them).
//
// Rules that keep the two alike:
// - no #include: the includer opens the namespace (eager: one per ISA, with
//   internal linkage; generated code: `kv`), and the generated file stays
//   cheap to compile (<immintrin.h> alone costs ~0.3 s of cc1plus);
// - GCC vector extensions for + - * /, compares and bit ops (IEEE, exactly
//   rounded), builtins for fma and sqrt, Sleef's vector functions for exp,
//   log and pow, kiln's own polynomials for erf and tanh;
// - both sides compile with -ffp-contract=off, so a * b + c is never fused
//   in one place and not in the other;
// - every op is a function of its lanes only: the tail of a row is the same
//   math on a partly filled vector.
// The ISA is the includer's (__AVX512F__: 16 lanes, else AVX2 + FMA: 8).
#ifndef KILN_VEC_MATH_H
#define KILN_VEC_MATH_H

#if defined(__AVX512F__)
#define KILN_VEC_LANES 16
#else
#define KILN_VEC_LANES 8
#endif

typedef float vf __attribute__((vector_size(4 * KILN_VEC_LANES)));  // float lanes
typedef int vi __attribute__((vector_size(4 * KILN_VEC_LANES)));    // masks: -1 true, 0 false
constexpr long kLanes = KILN_VEC_LANES;

extern "C" {
#if defined(__AVX512F__)
vf Sleef_expf16_u10avx512f(vf);
vf Sleef_logf16_u10avx512f(vf);
vf Sleef_powf16_u10avx512f(vf, vf);
#else
vf Sleef_expf8_u10avx2(vf);
vf Sleef_logf8_u10avx2(vf);
vf Sleef_powf8_u10avx2(vf, vf);
#endif
}

// ---- lanes ----
// x on every lane. x - (+0) is x for every x (-0 - +0 is -0; vf{} + x would
// turn -0 into +0), and GCC makes it one broadcast; a loop over the lanes
// stayed a loop of scalar broadcasts inside a generated convolution's
// unrolled body (7.7 ms instead of 1.0 ms for the tutorial's first layer).
static inline vf set1(float x) { return x - vf{}; }
static inline vf add(vf a, vf b) { return a + b; }
static inline vf sub(vf a, vf b) { return a - b; }
static inline vf mul(vf a, vf b) { return a * b; }
static inline vf div(vf a, vf b) { return a / b; }
// The sign bit flipped, as a bit operation: GCC folds a plain -a into the
// operation before it (-(1 / x) into -1 / x), and a NaN then keeps its sign
// in a fused kernel but not in eager's separate neg.
static inline vf neg(vf a) {
  vi bits;
  __builtin_memcpy(&bits, &a, sizeof bits);
  bits ^= (vi{} + static_cast<int>(0x80000000u));
  vf r;
  __builtin_memcpy(&r, &bits, sizeof r);
  return r;
}
static inline vf fma(vf a, vf b, vf c) {  // a * b + c, rounded once
#if defined(__AVX512F__)
  return __builtin_ia32_vfmaddps512_mask(a, b, c, static_cast<unsigned short>(-1), 4);
#else
  return __builtin_ia32_vfmaddps256(a, b, c);
#endif
}
static inline vf sqrt(vf a) {
#if defined(__AVX512F__) && defined(__clang__)
  return __builtin_ia32_sqrtps512(a, 4);
#elif defined(__AVX512F__)
  return __builtin_ia32_sqrtps512_mask(a, a, static_cast<unsigned short>(-1), 4);
#else
  return __builtin_ia32_sqrtps256(a);
#endif
}
static inline vi lt(vf a, vf b) { return a < b; }
static inline vi le(vf a, vf b) { return a <= b; }
static inline vi gt(vf a, vf b) { return a > b; }
static inline vi ge(vf a, vf b) { return a >= b; }
static inline vi eq(vf a, vf b) { return a == b; }
static inline vi ne(vf a, vf b) { return a != b; }
static inline vi isnan(vf a) { return a != a; }
static inline vf select(vi c, vf a, vf b) { return (vf)(((vi)a & c) | ((vi)b & ~c)); }
// A mask as the number 1 or 0, and a number as a mask (nonzero: true).
static inline vf mask_to_float(vi c) { return (vf)(c & (vi)set1(1.0f)); }
static inline vi float_to_mask(vf a) { return a != set1(0.0f); }
static inline vf abs(vf a) { return (vf)((vi)a & (vi{} + 0x7fffffff)); }
static inline vf copysign_of(vf magnitude, vf sign) {
  return (vf)((vi)magnitude ^ ((vi)sign & (vi{} + static_cast<int>(0x80000000u))));
}
// a < b ? a : b (b when either is NaN).
static inline vf min_second_on_nan(vf a, vf b) { return select(lt(a, b), a, b); }

// ---- transcendentals ----
#if defined(__AVX512F__)
static inline vf exp(vf a) { return Sleef_expf16_u10avx512f(a); }
static inline vf log(vf a) { return Sleef_logf16_u10avx512f(a); }
static inline vf sleef_pow(vf a, vf b) { return Sleef_powf16_u10avx512f(a, b); }
#else
static inline vf exp(vf a) { return Sleef_expf8_u10avx2(a); }
static inline vf log(vf a) { return Sleef_logf8_u10avx2(a); }
static inline vf sleef_pow(vf a, vf b) { return Sleef_powf8_u10avx2(a, b); }
#endif

// x^0.5 and x^-0.5 as sqrt, except at -inf where pow gives +inf and +0.
static inline vf pow_half(vf a) { return select(eq(a, set1(-__builtin_inff())), set1(__builtin_inff()), sqrt(a)); }
static inline vf pow_minus_half(vf a) {
  return select(eq(a, set1(-__builtin_inff())), set1(0.0f), set1(1.0f) / sqrt(a));
}
// pow with PyTorch's exact special exponents (2, 3, 0.5, -0.5, -1, -2), per
// lane, so a broadcast exponent and a tensor of exponents agree.
static inline vf pow(vf a, vf b) {
  vf one = set1(1.0f);
  vf r = sleef_pow(a, b);
  r = select(eq(b, set1(2.0f)), a * a, r);
  r = select(eq(b, set1(3.0f)), a * a * a, r);
  r = select(eq(b, set1(0.5f)), pow_half(a), r);
  r = select(eq(b, set1(-0.5f)), pow_minus_half(a), r);
  r = select(eq(b, set1(-1.0f)), one / a, r);
  r = select(eq(b, set1(-2.0f)), one / (a * a), r);
  return r;
}

// erf as PyTorch's vectorized CPU kernels compute it (Abramowitz & Stegun
// 7.1.26, |error| < 1.5e-7): about 5x faster than Sleef's erff.
static inline vf erf(vf x) {
  vf ax = abs(x);
  vf t = set1(1.0f) / fma(set1(0.3275911f), ax, set1(1.0f));
  vf r = fma(set1(1.061405429f), t, set1(-1.453152027f));
  r = fma(r, t, set1(1.421413741f));
  r = fma(r, t, set1(-0.284496736f));
  r = fma(r, t, set1(0.254829592f));
  vf e = exp(-(x * x));
  vf y = fma(-(e * t), r, set1(1.0f));  // 1 - r t exp(-x^2) >= 0
  return copysign_of(y, x);
}

// tanh, ~3x faster than Sleef's tanhf with relative error < 3e-7:
// |x| < 0.625: Eigen's rational approximation (odd degree 13 / even degree 6);
// else 1 - 2 / (exp(2|x|) + 1) with x's sign, which saturates to exactly +-1
// like a correctly rounded tanh (gelu's 1 + tanh relies on that).
static inline vf tanh(vf x) {
  vf ax = abs(x);
  vf x2 = x * x;
  vf p = fma(set1(-2.76076847742355e-16f), x2, set1(2.00018790482477e-13f));
  p = fma(p, x2, set1(-8.60467152213735e-11f));
  p = fma(p, x2, set1(5.12229709037114e-08f));
  p = fma(p, x2, set1(1.48572235717979e-05f));
  p = fma(p, x2, set1(6.37261928875436e-04f));
  p = fma(p, x2, set1(4.89352455891786e-03f));
  p = p * x;
  vf q = fma(set1(1.19825839466702e-06f), x2, set1(1.18534705686654e-04f));
  q = fma(q, x2, set1(2.26843463243900e-03f));
  q = fma(q, x2, set1(4.89352518554385e-03f));
  vf small = p / q;
  vf e = exp(min_second_on_nan(set1(20.0f), ax) * set1(2.0f));  // NaN stays NaN
  vf big = copysign_of(set1(1.0f) - set1(2.0f) / (e + set1(1.0f)), x);
  // NaN: the comparison is false and big is NaN.
  return select(lt(ax, set1(0.625f)), small, big);
}

// bfloat16 buffers (autocast's activations): 2 bytes, the top half of a
// float32. Loads widen exactly; every value stored, and every bfloat16
// result a fused kernel keeps in a register, is rounded to the nearest
// bfloat16 (ties to even, any NaN to the quiet NaN 0x7fc0), as the eager
// kernels round (cpu::f32_to_bf16), so fused and eager bfloat16 agree bit
// for bit.
struct bf16_t {
  unsigned short bits;
};
typedef unsigned int vu __attribute__((vector_size(4 * KILN_VEC_LANES)));
typedef unsigned short vh __attribute__((vector_size(2 * KILN_VEC_LANES)));
static inline vu bf16_bits(vf v) {  // the rounded bfloat16 of each lane, in the low 16 bits
  vu u;
  __builtin_memcpy(&u, &v, sizeof u);
  vu rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  vu nan = (vu)((u & 0x7fffffffu) > 0x7f800000u);  // all ones where NaN
  return (rounded & ~nan) | (0x7fc0u & nan);
}
static inline vf round_bf16(vf v) {
  vu u = bf16_bits(v) << 16;
  vf r;
  __builtin_memcpy(&r, &u, sizeof r);
  return r;
}
static inline vf load(const bf16_t* p, long n) {
  vh h = {};
  if (n == kLanes) __builtin_memcpy(&h, p, sizeof h);  // a whole vector: one load, not a memcpy call
  else __builtin_memcpy(&h, p, static_cast<unsigned long>(n) * 2);
  vu u = __builtin_convertvector(h, vu) << 16;
  vf v;
  __builtin_memcpy(&v, &u, sizeof v);
  return v;
}
static inline void store(bf16_t* p, long n, vf v) {
  vh h = __builtin_convertvector(bf16_bits(v), vh);
  if (n == kLanes) __builtin_memcpy(p, &h, sizeof h);
  else __builtin_memcpy(p, &h, static_cast<unsigned long>(n) * 2);
}
// One element as a float, and a float stored as an element (numbers
// convert as numbers; a bool is 1 or 0).
template <class T>
static inline float to_float(T x) {
  return static_cast<float>(x);
}
static inline float to_float(bf16_t x) {
  unsigned int u = static_cast<unsigned int>(x.bits) << 16;
  float f;
  __builtin_memcpy(&f, &u, sizeof f);
  return f;
}
template <class T>
static inline void put(T* p, float x) {
  *p = static_cast<T>(x);
}
static inline void put(bf16_t* p, float x) { p->bits = static_cast<unsigned short>(bf16_bits(set1(x))[0]); }

// ---- memory: n active lanes (n < kLanes at a row's tail; the rest read 0) ----
static inline vf load(const float* p, long n) {
  vf v = {};
  if (n == kLanes) __builtin_memcpy(&v, p, sizeof v);
  else __builtin_memcpy(&v, p, static_cast<unsigned long>(n) * sizeof(float));
  return v;
}
static inline void store(float* p, long n, vf v) {
  if (n == kLanes) __builtin_memcpy(p, &v, sizeof v);
  else __builtin_memcpy(p, &v, static_cast<unsigned long>(n) * sizeof(float));
}
// Element l at p[l * stride] (stride 0: one value for every lane), converted
// to float as a number (a bool is 1 or 0).
template <class T>
static inline vf load_strided(const T* p, long stride, long n) {
  if (stride == 0) return set1(to_float(*p));
  float t[kLanes] = {};
  for (long l = 0; l < n; ++l) t[l] = to_float(p[l * stride]);
  vf v;
  __builtin_memcpy(&v, t, sizeof v);
  return v;
}
template <class T>
static inline void store_strided(T* p, long stride, long n, vf v) {
  float t[kLanes];
  __builtin_memcpy(t, &v, sizeof v);
  for (long l = 0; l < n; ++l) put(p + l * stride, t[l]);
}
// first, first + step, ... as numbers.
static inline vf iota(long first, long step) {
  float t[kLanes];
  for (long l = 0; l < kLanes; ++l) t[l] = static_cast<float>(first + l * step);
  vf v;
  __builtin_memcpy(&v, t, sizeof v);
  return v;
}
// Lanes [0, n) active.
static inline vi first_lanes(long n) {
  vi l;
  for (int k = 0; k < kLanes; ++k) l[k] = k;
  return l < (vi{} + static_cast<int>(n));
}
static inline float lane(vf v, int l) { return v[l]; }
// Bools (bytes 0/1) as numbers 1 or 0, and numbers stored as bools.
typedef unsigned char vb __attribute__((vector_size(KILN_VEC_LANES)));
static inline vf load_bools(const bool* p, long n) {
  vb b = {};
  __builtin_memcpy(&b, p, static_cast<unsigned long>(n));
  return mask_to_float(__builtin_convertvector(b, vi) != 0);
}
static inline void store_bools(bool* p, long n, vf v) {
  vb b = __builtin_convertvector(float_to_mask(v) & 1, vb);
  __builtin_memcpy(p, &b, static_cast<unsigned long>(n));
}

#endif  // KILN_VEC_MATH_H
