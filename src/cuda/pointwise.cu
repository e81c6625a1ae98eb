// kiln's pointwise ops on CUDA: one functor per op (the scalar math of
// ops/scalar_math.h, which the CPU's scalar loops use too) run by the shared
// elementwise loop of loop.cuh, for each compute dtype the op allows.
#include <cmath>

#include "cuda/loop.cuh"
#include "ops/scalar_math.h"

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

// The formulas are in ops/scalar_math.h (compiled __host__ __device__ here),
// shared with the CPU's scalar loops and the code generators.
template <PointwiseOp Op>
struct Binary {
  double p0 = 0;
  template <typename T>
  __device__ T operator()(T a, T b) const {
    if constexpr (Op == PointwiseOp::Add) return scalar::add(a, b);
    else if constexpr (Op == PointwiseOp::Sub) return scalar::sub(a, b);
    else if constexpr (Op == PointwiseOp::Mul) return scalar::mul(a, b);
    else if constexpr (Op == PointwiseOp::Div) return scalar::div(a, b);
    else if constexpr (Op == PointwiseOp::AddScaled) return scalar::add_update(a, b, static_cast<T>(p0));
    else if constexpr (Op == PointwiseOp::Pow) return scalar::pow(a, b);
    else if constexpr (Op == PointwiseOp::Maximum) return scalar::maximum(a, b);
    else if constexpr (Op == PointwiseOp::Minimum) return scalar::minimum(a, b);
    else if constexpr (Op == PointwiseOp::Lerp) return scalar::lerp_update(a, b, static_cast<T>(p0));
    else if constexpr (Op == PointwiseOp::GeluBackwardErf) return scalar::gelu_backward(a, b, false);
    else if constexpr (Op == PointwiseOp::ReluBackward) return scalar::relu_backward(a, b);
    else return scalar::gelu_backward(a, b, true);
  }
};

template <PointwiseOp Op>
struct Unary {
  double p0 = 0, p1 = 0;
  template <typename T>
  __device__ T operator()(T x) const {
    if constexpr (Op == PointwiseOp::Neg) return scalar::neg(x);
    else if constexpr (Op == PointwiseOp::Exp) return scalar::exp(x);
    else if constexpr (Op == PointwiseOp::Log) return scalar::log(x);
    else if constexpr (Op == PointwiseOp::Sqrt) return scalar::sqrt(x);
    else if constexpr (Op == PointwiseOp::Rsqrt) return scalar::rsqrt(x);
    else if constexpr (Op == PointwiseOp::Sigmoid) return scalar::sigmoid(x);
    else if constexpr (Op == PointwiseOp::Tanh) return scalar::tanh(x);
    else if constexpr (Op == PointwiseOp::Erf) return scalar::erf(x);
    else if constexpr (Op == PointwiseOp::GeluErf) return scalar::gelu(x, false);
    else if constexpr (Op == PointwiseOp::GeluTanh) return scalar::gelu(x, true);
    else if constexpr (Op == PointwiseOp::Abs) return scalar::abs(x);
    else if constexpr (Op == PointwiseOp::Sign) return scalar::sign(x);
    else if constexpr (Op == PointwiseOp::Relu) return scalar::relu(x);
    else return scalar::clamp(x, static_cast<T>(p0), static_cast<T>(p1));
  }
};

// Optimizer updates: self + value * a * b, self + value * a / b.
template <PointwiseOp Op>
struct Ternary {
  double p0 = 0;
  template <typename T>
  __device__ T operator()(T s, T a, T b) const {
    if constexpr (Op == PointwiseOp::AddCMul) return scalar::addcmul_update(s, a, b, static_cast<T>(p0));
    else return scalar::addcdiv_update(s, a, b, static_cast<T>(p0));
  }
};

template <PointwiseOp Op>
struct Compare {
  template <typename T>
  __device__ bool operator()(T a, T b) const {
    if constexpr (Op == PointwiseOp::Eq) return scalar::eq(a, b);
    else if constexpr (Op == PointwiseOp::Ne) return scalar::ne(a, b);
    else if constexpr (Op == PointwiseOp::Lt) return scalar::lt(a, b);
    else if constexpr (Op == PointwiseOp::Le) return scalar::le(a, b);
    else if constexpr (Op == PointwiseOp::Gt) return scalar::gt(a, b);
    else return scalar::ge(a, b);
  }
};

struct LogicalNotF {
  template <typename T>
  __device__ bool operator()(T x) const {
    return scalar::logical_not(x);
  }
};
struct WhereF {
  template <typename T>
  __device__ T operator()(bool c, T a, T b) const {
    return scalar::where(c, a, b);
  }
};

// Compute dtypes: every one, every one but bool, floating point only.
// float16 and bfloat16 are storage types whose math is float (loop.cuh):
// every operand in the 16-bit dtype, the functor on float.
enum class Types { All, NoBool, Float };

template <Types D, typename F>
void visit_compute(Scalar s, F&& f) {
  switch (s) {
    case Scalar::Float32: f.template operator()<float>(); return;
    case Scalar::Float64: f.template operator()<double>(); return;
    case Scalar::Float16: f.template operator()<__half>(); return;
    case Scalar::BFloat16: f.template operator()<__nv_bfloat16>(); return;
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
    case ReluBackward: return binary<ReluBackward, Float>(c);
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
    case Erf: return unary<Erf, Float>(c);
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
