// kiln's pointwise ops on CUDA: one functor per op (the same scalar math as
// the CPU's scalar loops in src/ops/pointwise.cpp) run by the shared
// elementwise loop of loop.cuh, for each compute dtype the op allows.
#include <cmath>

#include "cuda/loop.cuh"
#include "ops/int_pow.h"

namespace kiln::cuda {

int multiprocessor_count() {
  int dev = 0;
  cudaGetDevice(&dev);
  static int cached[64] = {};
  if (dev >= 0 && dev < 64 && cached[dev] == 0) {
    int n = 0;
    KILN_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev), "multiprocessor_count");
    cached[dev] = n > 0 ? n : 1;
  }
  return dev >= 0 && dev < 64 ? cached[dev] : 1;
}

namespace {

template <typename T>
constexpr bool kFloat = std::is_floating_point_v<T>;

__device__ inline float fexp(float x) { return expf(x); }
__device__ inline double fexp(double x) { return ::exp(x); }
__device__ inline float flog(float x) { return logf(x); }
__device__ inline double flog(double x) { return ::log(x); }
__device__ inline float fsqrt(float x) { return sqrtf(x); }
__device__ inline double fsqrt(double x) { return ::sqrt(x); }
__device__ inline float ftanh(float x) { return tanhf(x); }
__device__ inline double ftanh(double x) { return ::tanh(x); }
__device__ inline float ferf(float x) { return erff(x); }
__device__ inline double ferf(double x) { return ::erf(x); }
__device__ inline float fpow(float a, float b) { return powf(a, b); }
__device__ inline double fpow(double a, double b) { return ::pow(a, b); }

constexpr double kSqrt1_2 = 0.70710678118654752440;
constexpr double kSqrt2OverPi = 0.79788456080286535588;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;
constexpr double kGeluKappa = 0.044715;

template <typename T>
__device__ inline T gelu(T x, bool tanh_approx) {
  if (tanh_approx) return T(0.5) * x * (T(1) + ftanh(T(kSqrt2OverPi) * (x + T(kGeluKappa) * x * x * x)));
  return T(0.5) * x * (T(1) + ferf(x * T(kSqrt1_2)));
}
template <typename T>
__device__ inline T gelu_backward(T g, T x, bool tanh_approx) {
  if (tanh_approx) {
    T x2 = x * x;
    T t = ftanh(T(kSqrt2OverPi) * (x + T(kGeluKappa) * x2 * x));
    T left = T(0.5) * x, right = T(1) + t;
    T right_d = left * (T(1) - t * t) * T(kSqrt2OverPi) * (T(1) + T(3 * kGeluKappa) * x2);
    return g * (T(0.5) * right + right_d);
  }
  T cdf = T(0.5) * (T(1) + ferf(x * T(kSqrt1_2)));
  T pdf = T(kInvSqrt2Pi) * fexp(T(-0.5) * x * x);
  return g * (cdf + x * pdf);
}

template <PointwiseOp Op>
struct Binary {
  double p0 = 0;
  template <typename T>
  __device__ T operator()(T a, T b) const {
    if constexpr (Op == PointwiseOp::Add) return static_cast<T>(a + b);
    else if constexpr (Op == PointwiseOp::Sub) return static_cast<T>(a - b);
    else if constexpr (Op == PointwiseOp::Mul) return static_cast<T>(a * b);
    else if constexpr (Op == PointwiseOp::Div) return a / b;
    else if constexpr (Op == PointwiseOp::AddScaled) return static_cast<T>(a + static_cast<T>(p0) * b);
    else if constexpr (Op == PointwiseOp::Pow) {
      if constexpr (kFloat<T>) return fpow(a, b);
      else return int_pow(a, b);
    } else if constexpr (Op == PointwiseOp::Maximum || Op == PointwiseOp::Minimum) {
      if constexpr (kFloat<T>) {
        if (isnan(a)) return a;
        if (isnan(b)) return b;
      }
      if constexpr (Op == PointwiseOp::Maximum) return a < b ? b : a;
      else return b < a ? b : a;
    } else if constexpr (Op == PointwiseOp::Lerp) {
      const T w = static_cast<T>(p0);  // PyTorch's formula: exact at weight 0 and 1
      return (w < T(0.5) && w > T(-0.5)) ? a + w * (b - a) : b - (b - a) * (T(1) - w);
    } else if constexpr (Op == PointwiseOp::GeluBackwardErf) return gelu_backward(a, b, false);
    else return gelu_backward(a, b, true);
  }
};

template <PointwiseOp Op>
struct Unary {
  double p0 = 0, p1 = 0;
  template <typename T>
  __device__ T operator()(T x) const {
    if constexpr (Op == PointwiseOp::Neg) return static_cast<T>(-x);
    else if constexpr (Op == PointwiseOp::Exp) return fexp(x);
    else if constexpr (Op == PointwiseOp::Log) return flog(x);
    else if constexpr (Op == PointwiseOp::Sqrt) return fsqrt(x);
    else if constexpr (Op == PointwiseOp::Rsqrt) return T(1) / fsqrt(x);
    else if constexpr (Op == PointwiseOp::Sigmoid) return T(1) / (T(1) + fexp(-x));
    else if constexpr (Op == PointwiseOp::Tanh) return ftanh(x);
    else if constexpr (Op == PointwiseOp::GeluErf) return gelu(x, false);
    else if constexpr (Op == PointwiseOp::GeluTanh) return gelu(x, true);
    else if constexpr (Op == PointwiseOp::Abs) {
      if constexpr (std::is_unsigned_v<T>) return x;
      else return x < T(0) ? static_cast<T>(-x) : x;
    } else if constexpr (Op == PointwiseOp::Sign) {
      if constexpr (std::is_same_v<T, bool>) return x;
      else if constexpr (std::is_unsigned_v<T>) return static_cast<T>(x > T(0));
      else return static_cast<T>((T(0) < x) - (x < T(0)));
    } else if constexpr (Op == PointwiseOp::Relu) {
      if constexpr (std::is_unsigned_v<T>) return x;
      else return x < T(0) ? T(0) : x;  // NaN stays NaN
    } else {  // Clamp
      if constexpr (kFloat<T>) {
        if (isnan(x)) return x;
      }
      const T lo = static_cast<T>(p0), hi = static_cast<T>(p1);
      const T r = x < lo ? lo : x;
      return hi < r ? hi : r;
    }
  }
};

// Optimizer updates: self + value * a * b, self + value * a / b.
template <PointwiseOp Op>
struct Ternary {
  double p0 = 0;
  template <typename T>
  __device__ T operator()(T s, T a, T b) const {
    if constexpr (Op == PointwiseOp::AddCMul) return static_cast<T>(s + static_cast<T>(p0) * a * b);
    else return static_cast<T>(s + static_cast<T>(p0) * a / b);
  }
};

template <PointwiseOp Op>
struct Compare {
  template <typename T>
  __device__ bool operator()(T a, T b) const {
    if constexpr (Op == PointwiseOp::Eq) return a == b;
    else if constexpr (Op == PointwiseOp::Ne) return a != b;
    else if constexpr (Op == PointwiseOp::Lt) return a < b;
    else if constexpr (Op == PointwiseOp::Le) return a <= b;
    else if constexpr (Op == PointwiseOp::Gt) return a > b;
    else return a >= b;
  }
};

struct LogicalNotF {
  template <typename T>
  __device__ bool operator()(T x) const {
    return x == T(0);
  }
};
struct WhereF {
  template <typename T>
  __device__ T operator()(bool c, T a, T b) const {
    return c ? a : b;
  }
};

// Compute dtypes: every one, every one but bool, floating point only.
enum class Types { All, NoBool, Float };

template <Types D, typename F>
void visit_compute(Scalar s, F&& f) {
  switch (s) {
    case Scalar::Float32: f.template operator()<float>(); return;
    case Scalar::Float64: f.template operator()<double>(); return;
    default: break;
  }
  if constexpr (D != Types::Float) {
    switch (s) {
      case Scalar::UInt8: f.template operator()<uint8_t>(); return;
      case Scalar::Int32: f.template operator()<int32_t>(); return;
      case Scalar::Int64: f.template operator()<int64_t>(); return;
      default: break;
    }
  }
  if constexpr (D == Types::All) {
    if (s == Scalar::Bool) {
      f.template operator()<bool>();
      return;
    }
  }
  KILN_CUDA_CHECK(cudaErrorNotSupported, "pointwise kernel: no kernel for this dtype");
}

template <PointwiseOp Op, Types D>
void binary(const PointwiseCall& c) {
  visit_compute<D>(c.compute, [&]<typename T>() { run_loop<T, T, T>(c, Binary<Op>{c.p0}); });
}
template <PointwiseOp Op, Types D>
void unary(const PointwiseCall& c) {
  visit_compute<D>(c.compute, [&]<typename T>() { run_loop<T, T>(c, Unary<Op>{c.p0, c.p1}); });
}
template <PointwiseOp Op>
void compare(const PointwiseCall& c) {
  visit_compute<Types::All>(c.compute, [&]<typename T>() { run_loop<bool, T, T>(c, Compare<Op>{}); });
}

}  // namespace

void launch_pointwise(const PointwiseCall& c) {
  using enum PointwiseOp;
  using enum Types;
  switch (c.op) {
    case Add: return binary<Add, All>(c);
    case Sub: return binary<Sub, NoBool>(c);
    case Mul: return binary<Mul, All>(c);
    case Div: return binary<Div, Float>(c);
    case Pow: return binary<Pow, All>(c);
    case Maximum: return binary<Maximum, All>(c);
    case Minimum: return binary<Minimum, All>(c);
    case AddScaled: return binary<AddScaled, NoBool>(c);
    case GeluBackwardErf: return binary<GeluBackwardErf, Float>(c);
    case GeluBackwardTanh: return binary<GeluBackwardTanh, Float>(c);
    case Neg: return unary<Neg, NoBool>(c);
    case Exp: return unary<Exp, Float>(c);
    case Log: return unary<Log, Float>(c);
    case Sqrt: return unary<Sqrt, Float>(c);
    case Rsqrt: return unary<Rsqrt, Float>(c);
    case Abs: return unary<Abs, NoBool>(c);
    case Sign: return unary<Sign, All>(c);
    case Relu: return unary<Relu, NoBool>(c);
    case GeluErf: return unary<GeluErf, Float>(c);
    case GeluTanh: return unary<GeluTanh, Float>(c);
    case Sigmoid: return unary<Sigmoid, Float>(c);
    case Tanh: return unary<Tanh, Float>(c);
    case Clamp: return unary<Clamp, NoBool>(c);
    case Eq: return compare<Eq>(c);
    case Ne: return compare<Ne>(c);
    case Lt: return compare<Lt>(c);
    case Le: return compare<Le>(c);
    case Gt: return compare<Gt>(c);
    case Ge: return compare<Ge>(c);
    case LogicalNot:
      return visit_compute<All>(c.compute, [&]<typename T>() { run_loop<bool, T>(c, LogicalNotF{}); });
    case Where:
      return visit_compute<All>(c.compute, [&]<typename T>() { run_loop<T, bool, T, T>(c, WhereF{}); });
    case Lerp: return binary<Lerp, Float>(c);
    case AddCMul:
      return visit_compute<NoBool>(c.compute, [&]<typename T>() { run_loop<T, T, T, T>(c, Ternary<AddCMul>{c.p0}); });
    case AddCDiv:
      return visit_compute<Float>(c.compute, [&]<typename T>() { run_loop<T, T, T, T>(c, Ternary<AddCDiv>{c.p0}); });
    case Cast: return launch_cast(c);
  }
}

}  // namespace kiln::cuda
