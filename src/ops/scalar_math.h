// The scalar math of every pointwise op, written once (DESIGN.md: "a
// pointwise op's math is written once as a scalar expression").
//
// Each formula is a template over the value type and is used three ways:
//   - the CPU scalar loops (src/ops/pointwise.cpp, src/ops/inplace.cpp) with
//     T = float, double, the integer types and bool;
//   - the CUDA kernels (src/cuda/pointwise.cu), the same templates compiled
//     __host__ __device__;
//   - T = ScalarExpr (src/ops/scalar_expr.h): instantiating a formula with the
//     expression type builds the op's expression tree, which the code
//     generators render (pointwise_expr).
// So the formulas are branch-free: data-dependent choices go through
// select(cond, a, b), never `if` or `?:` on values; elementary functions
// (exp, log, sqrt, tanh, erf, pow, isnan) are called unqualified so that the
// expression type's overloads are found by argument-dependent lookup.
// Constants are written T(c), so float math stays in float.
//
// The vectorized float32 rows (src/ops/cpu/pointwise_f32_rows.h) are
// hand-written intrinsics of these same formulas.
#pragma once
#include <cmath>
#include <type_traits>

#include "ops/int_pow.h"  // int_pow and KILN_HOST_DEVICE

namespace kiln::scalar {

// Value types that compute like floating point numbers (the expression type
// opts in with a specialization in scalar_expr.h).
template <typename T>
struct is_floating : std::is_floating_point<T> {};
template <typename T>
constexpr bool kFloating = is_floating<T>::value;

// ---- elementary functions on float and double, host and device ----
#if defined(__CUDA_ARCH__)
#define KILN_SCALAR_FN1(name)                                              \
  KILN_HOST_DEVICE inline float name(float x) { return ::name##f(x); }   \
  KILN_HOST_DEVICE inline double name(double x) { return ::name(x); }
#define KILN_SCALAR_FN2(name)                                                       \
  KILN_HOST_DEVICE inline float name(float a, float b) { return ::name##f(a, b); }  \
  KILN_HOST_DEVICE inline double name(double a, double b) { return ::name(a, b); }
#else
#define KILN_SCALAR_FN1(name)                                            \
  KILN_HOST_DEVICE inline float name(float x) { return std::name(x); }  \
  KILN_HOST_DEVICE inline double name(double x) { return std::name(x); }
#define KILN_SCALAR_FN2(name)                                                         \
  KILN_HOST_DEVICE inline float name(float a, float b) { return std::name(a, b); }    \
  KILN_HOST_DEVICE inline double name(double a, double b) { return std::name(a, b); }
#endif
KILN_SCALAR_FN1(exp)
KILN_SCALAR_FN1(log)
KILN_SCALAR_FN1(sqrt)
KILN_SCALAR_FN1(tanh)
KILN_SCALAR_FN1(erf)
KILN_SCALAR_FN2(pow)
#undef KILN_SCALAR_FN1
#undef KILN_SCALAR_FN2

template <typename T, std::enable_if_t<std::is_arithmetic_v<T>, int> = 0>
KILN_HOST_DEVICE inline bool isnan(T x) {
  if constexpr (std::is_floating_point_v<T>) return x != x;
  else return false;
}

// cond ? a : b, as a node of the expression type.
template <typename T, std::enable_if_t<std::is_arithmetic_v<T>, int> = 0>
KILN_HOST_DEVICE inline T select(bool cond, T a, T b) {
  return cond ? a : b;
}

// Integers: power by squaring (wrap-around, as PyTorch).
template <typename T, std::enable_if_t<std::is_integral_v<T>, int> = 0>
KILN_HOST_DEVICE inline T pow(T a, T b) {
  return int_pow(a, b);
}

// ---- arithmetic (static_cast: small integer types promote to int) ----
template <typename T> KILN_HOST_DEVICE inline T add(T a, T b) { return static_cast<T>(a + b); }
template <typename T> KILN_HOST_DEVICE inline T sub(T a, T b) { return static_cast<T>(a - b); }
template <typename T> KILN_HOST_DEVICE inline T mul(T a, T b) { return static_cast<T>(a * b); }
template <typename T> KILN_HOST_DEVICE inline T div(T a, T b) { return a / b; }
// NaN wins (either operand), as PyTorch's maximum/minimum.
template <typename T>
KILN_HOST_DEVICE inline T maximum(T a, T b) {
  T m = select(a < b, b, a);
  if constexpr (kFloating<T>) m = select(isnan(a), a, select(isnan(b), b, m));
  return m;
}
template <typename T>
KILN_HOST_DEVICE inline T minimum(T a, T b) {
  T m = select(b < a, b, a);
  if constexpr (kFloating<T>) m = select(isnan(a), a, select(isnan(b), b, m));
  return m;
}

// ---- unary ----
template <typename T> KILN_HOST_DEVICE inline T neg(T x) { return static_cast<T>(-x); }
template <typename T> KILN_HOST_DEVICE inline T rsqrt(T x) { return T(1) / sqrt(x); }
template <typename T>
KILN_HOST_DEVICE inline T abs(T x) {
  if constexpr (std::is_unsigned_v<T>) return x;
  else return select(x < T(0), static_cast<T>(-x), x);
}
template <typename T>
KILN_HOST_DEVICE inline T sign(T x) {
  if constexpr (std::is_same_v<T, bool>) return x;
  else if constexpr (std::is_unsigned_v<T>) return static_cast<T>(T(0) < x);
  else return static_cast<T>((T(0) < x) - (x < T(0)));
}
// NaN stays NaN (NaN < 0 is false).
template <typename T>
KILN_HOST_DEVICE inline T relu(T x) {
  if constexpr (std::is_unsigned_v<T>) return x;
  else return select(x < T(0), T(0), x);
}
// relu's derivative from its output y: g where y > 0, else +0 (NaN and -0.0
// outputs pass no gradient, as where(y > 0, g, 0)).
template <typename T>
KILN_HOST_DEVICE inline T relu_backward(T g, T y) {
  return select(y > T(0), g, T(0));
}
template <typename T> KILN_HOST_DEVICE inline T sigmoid(T x) { return T(1) / (T(1) + exp(-x)); }
// min(max(x, lo), hi); NaN stays NaN.
template <typename T>
KILN_HOST_DEVICE inline T clamp(T x, T lo, T hi) {
  T r = select(x < lo, lo, x);
  return select(hi < r, hi, r);
}

// ---- gelu: 0.5 x (1 + erf(x / sqrt 2)), or its tanh approximation ----
constexpr double kSqrt1_2 = 0.70710678118654752440;
constexpr double kSqrt2OverPi = 0.79788456080286535588;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;
constexpr double kGeluKappa = 0.044715;

template <typename T>
KILN_HOST_DEVICE inline T gelu(T x, bool tanh_approx) {
  if (tanh_approx) {
    T inner = T(kSqrt2OverPi) * (x + T(kGeluKappa) * x * x * x);
    return T(0.5) * x * (T(1) + tanh(inner));
  }
  return T(0.5) * x * (T(1) + erf(x * T(kSqrt1_2)));
}
template <typename T>
KILN_HOST_DEVICE inline T gelu_backward(T g, T x, bool tanh_approx) {
  if (tanh_approx) {
    T x2 = x * x;
    T inner = T(kSqrt2OverPi) * (x + T(kGeluKappa) * x2 * x);
    T t = tanh(inner);
    T left = T(0.5) * x, right = T(1) + t;
    T left_d = T(0.5) * right;
    T right_d = left * (T(1) - t * t) * T(kSqrt2OverPi) * (T(1) + T(3 * kGeluKappa) * x2);
    return g * (left_d + right_d);
  }
  T cdf = T(0.5) * (T(1) + erf(x * T(kSqrt1_2)));
  T pdf = T(kInvSqrt2Pi) * exp(T(-0.5) * x * x);
  return g * (cdf + x * pdf);
}

// ---- comparisons and selection (bool for numbers) ----
template <typename T> KILN_HOST_DEVICE inline auto eq(T a, T b) { return a == b; }
template <typename T> KILN_HOST_DEVICE inline auto ne(T a, T b) { return a != b; }
template <typename T> KILN_HOST_DEVICE inline auto lt(T a, T b) { return a < b; }
template <typename T> KILN_HOST_DEVICE inline auto le(T a, T b) { return a <= b; }
template <typename T> KILN_HOST_DEVICE inline auto gt(T a, T b) { return a > b; }
template <typename T> KILN_HOST_DEVICE inline auto ge(T a, T b) { return a >= b; }
template <typename T> KILN_HOST_DEVICE inline auto logical_not(T x) { return x == T(0); }
template <typename C, typename T> KILN_HOST_DEVICE inline T where(C cond, T a, T b) { return select(cond, a, b); }

// ---- in-place updates (self is the first operand) ----
template <typename T> KILN_HOST_DEVICE inline T add_update(T self, T other, T alpha) {
  return static_cast<T>(self + alpha * other);
}
template <typename T> KILN_HOST_DEVICE inline T mul_update(T self, T other) { return static_cast<T>(self * other); }
template <typename T> KILN_HOST_DEVICE inline T addcmul_update(T self, T a, T b, T value) {
  return static_cast<T>(self + value * a * b);
}
template <typename T> KILN_HOST_DEVICE inline T addcdiv_update(T self, T a, T b, T value) {
  return static_cast<T>(self + value * a / b);
}
// PyTorch's formula: exact at weight 0 and 1.
template <typename T>
KILN_HOST_DEVICE inline T lerp_update(T self, T end, T weight) {
  return select(abs(weight) < T(0.5), self + weight * (end - self), end - (end - self) * (T(1) - weight));
}

}  // namespace kiln::scalar
