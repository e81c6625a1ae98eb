// Pointwise ops: elementwise arithmetic, math functions, comparisons, where
// and cast over broadcast inputs, with PyTorch's type promotion.
//
// Kernels convert inputs to the compute dtype first (16-bit floats compute in
// float32), then float32 rows whose inputs are contiguous or broadcast
// scalars run the vectorized rows of ops/cpu/pointwise_f32.h (AVX-512 or
// AVX2, chosen at run time); everything else runs a scalar loop per dtype.
// Derivatives are written with the public ops and reduce broadcast
// gradients with sum_to.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <type_traits>

#include "core/cpu_features.h"
#include "kiln/ops.h"
#include "ops/cpu/copy.h"
#include "ops/cpu/pointwise_f32.h"
#include "ops/cpu/pointwise_util.h"
#include "ops/families.h"
#include "ops/op_def.h"
#include "ops/scalar_math.h"

namespace kiln {
namespace {

using cpu::BinaryF32;
using cpu::CompareF32;
using cpu::UnaryF32;
using cpu::wrap_number;

// Transcendental rows cost ~10x an add: split them across threads sooner.
constexpr int64_t kMathGrain = cpu::kParallelGrain / 8;

// ---------------------------------------------------------------------------
// Shape and dtype rules
// ---------------------------------------------------------------------------

void check_defined(TensorSpan in, const char* op) {
  for (size_t i = 0; i < in.size(); ++i)
    KILN_CHECK(in[i].defined(), op, ": input ", i, " is an undefined Tensor; pass a tensor (or a number)");
}

Shape broadcast_all(TensorSpan in, const char* op) {
  Shape s = in[0].shape();
  for (size_t i = 1; i < in.size(); ++i) s = broadcast_shapes(s, in[i].shape(), op);
  return s;
}

// add, sub, mul, div, pow, maximum, minimum
template <OpId Id>
std::vector<TensorMeta> arith_infer(TensorSpan in, const Attrs&) {
  const char* op = op_name(Id);
  check_defined(in, op);
  Device dev = common_device(in, op);
  Shape shape = broadcast_all(in, op);
  DType dt = result_type(in);
  if constexpr (Id == OpId::sub) {
    KILN_CHECK(dt != DType::Bool, "sub: subtracting bool tensors (", describe(in),
               ") is not supported; use logical_not / where for masks, or cast to an integer dtype first");
  }
  if constexpr (Id == OpId::div) {
    if (!is_floating(dt)) dt = DType::Float32;  // true division
  }
  return {{shape, dt, dev}};
}

// exp, log, sqrt, rsqrt, sigmoid, tanh: integers and bool give float32.
template <OpId Id>
std::vector<TensorMeta> float_unary_infer(TensorSpan in, const Attrs&) {
  check_defined(in, op_name(Id));
  DType dt = is_floating(in[0].dtype()) ? in[0].dtype() : DType::Float32;
  return {{in[0].shape(), dt, in[0].device()}};
}

// neg, abs, sign, relu: same dtype as the input.
template <OpId Id>
std::vector<TensorMeta> same_unary_infer(TensorSpan in, const Attrs&) {
  const char* op = op_name(Id);
  check_defined(in, op);
  if constexpr (Id == OpId::neg) {
    KILN_CHECK(in[0].dtype() != DType::Bool,
               "neg: negating a bool tensor is not supported; to invert a mask use logical_not()");
  }
  if constexpr (Id == OpId::abs || Id == OpId::relu) {
    KILN_CHECK(in[0].dtype() != DType::Bool, op, ": bool tensors are not supported (got ", describe(in),
               "); cast to an integer or float dtype first");
  }
  return {{in[0].shape(), in[0].dtype(), in[0].device()}};
}

std::vector<TensorMeta> gelu_infer(TensorSpan in, const Attrs& a) {
  check_defined(in, "gelu");
  KILN_CHECK(is_floating(in[0].dtype()), "gelu: needs a floating-point input, got ", describe(in),
             "; cast it with .to(DType::Float32)");
  const std::string& approx = a.s("approximate");
  KILN_CHECK(approx == "none" || approx == "tanh", "gelu: approximate must be \"none\" or \"tanh\", got \"", approx,
             "\"");
  return {{in[0].shape(), in[0].dtype(), in[0].device()}};
}

// An activation's backward op (grad, x or result): a floating-point gradient
// of the broadcast shape in the promoted dtype.
TensorMeta activation_grad_meta(TensorSpan in, const char* op) {
  check_defined(in, op);
  Device dev = common_device(in, op);
  DType dt = result_type(in);
  KILN_CHECK(is_floating(dt), op, ": needs floating-point inputs, got ", describe(in));
  return {broadcast_all(in, op), dt, dev};
}
std::vector<TensorMeta> gelu_backward_infer(TensorSpan in, const Attrs& a) {
  const std::string& approx = a.s("approximate");
  KILN_CHECK(approx == "none" || approx == "tanh", "gelu_backward: approximate must be \"none\" or \"tanh\", got \"",
             approx, "\"");
  return {activation_grad_meta(in, "gelu_backward")};
}
std::vector<TensorMeta> relu_backward_infer(TensorSpan in, const Attrs&) {
  return {activation_grad_meta(in, "relu_backward")};
}

DType clamp_dtype(TensorSpan in, const Attrs& a) {
  Tensors parts{in[0]};
  if (a.has("min")) parts.push_back(wrap_number(a.f("min")));
  if (a.has("max")) parts.push_back(wrap_number(a.f("max")));
  return result_type(parts);
}
std::vector<TensorMeta> clamp_infer(TensorSpan in, const Attrs& a) {
  check_defined(in, "clamp");
  KILN_CHECK(a.has("min") || a.has("max"), "clamp: give at least one of min and max");
  KILN_CHECK(in[0].dtype() != DType::Bool, "clamp: bool tensors are not supported; cast to an integer dtype first");
  return {{in[0].shape(), clamp_dtype(in, a), in[0].device()}};
}

std::vector<TensorMeta> where_infer(TensorSpan in, const Attrs&) {
  check_defined(in, "where");
  KILN_CHECK(in[0].dtype() == DType::Bool, "where: the condition must be a bool tensor, got ", describe(in),
             "; make one with a comparison (e.g. gt(x, 0)) or .to(DType::Bool)");
  Device dev = common_device(in, "where");
  return {{broadcast_all(in, "where"), result_type(in.subspan(1)), dev}};
}

std::vector<TensorMeta> compare_infer(TensorSpan in, const Attrs&) {
  check_defined(in, "comparison");
  Device dev = common_device(in, "comparison");
  return {{broadcast_all(in, "comparison"), DType::Bool, dev}};
}

std::vector<TensorMeta> logical_not_infer(TensorSpan in, const Attrs&) {
  check_defined(in, "logical_not");
  return {{in[0].shape(), DType::Bool, in[0].device()}};
}

std::vector<TensorMeta> cast_infer(TensorSpan in, const Attrs& a) {
  check_defined(in, "cast");
  return {{in[0].shape(), a.dtype("dtype"), in[0].device()}};
}

// ---------------------------------------------------------------------------
// Scalar functors (every dtype; float32 rows that cannot vectorize use them too)
// ---------------------------------------------------------------------------

// The formulas are in ops/scalar_math.h (shared with CUDA and the code
// generators); these functors pick one per op for the loops.
struct AddF { template <typename T> T operator()(T a, T b) const { return scalar::add(a, b); } };
struct SubF { template <typename T> T operator()(T a, T b) const { return scalar::sub(a, b); } };
struct MulF { template <typename T> T operator()(T a, T b) const { return scalar::mul(a, b); } };
struct DivF { template <typename T> T operator()(T a, T b) const { return scalar::div(a, b); } };
struct PowF { template <typename T> T operator()(T a, T b) const { return scalar::pow(a, b); } };
struct MaximumF { template <typename T> T operator()(T a, T b) const { return scalar::maximum(a, b); } };
struct MinimumF { template <typename T> T operator()(T a, T b) const { return scalar::minimum(a, b); } };

using scalar::kGeluKappa;
using scalar::kInvSqrt2Pi;
using scalar::kSqrt2OverPi;

// The scalar form of each UnaryF32 op, for any compute dtype.
template <UnaryF32 Op>
struct UnaryF {
  double p0 = 0, p1 = 0;  // clamp bounds
  template <typename T>
  T operator()(T x) const {
    if constexpr (Op == UnaryF32::Neg) return scalar::neg(x);
    else if constexpr (Op == UnaryF32::Exp) return scalar::exp(x);
    else if constexpr (Op == UnaryF32::Log) return scalar::log(x);
    else if constexpr (Op == UnaryF32::Sqrt) return scalar::sqrt(x);
    else if constexpr (Op == UnaryF32::Rsqrt) return scalar::rsqrt(x);
    else if constexpr (Op == UnaryF32::Abs) return scalar::abs(x);
    else if constexpr (Op == UnaryF32::Sign) return scalar::sign(x);
    else if constexpr (Op == UnaryF32::Relu) return scalar::relu(x);
    else if constexpr (Op == UnaryF32::GeluErf) return scalar::gelu(x, false);
    else if constexpr (Op == UnaryF32::GeluTanh) return scalar::gelu(x, true);
    else if constexpr (Op == UnaryF32::Sigmoid) return scalar::sigmoid(x);
    else if constexpr (Op == UnaryF32::Tanh) return scalar::tanh(x);
    else if constexpr (Op == UnaryF32::Erf) return scalar::erf(x);
    else return scalar::clamp(x, static_cast<T>(p0), static_cast<T>(p1));
  }
};

template <CompareF32 Op>
struct CompareF {
  template <typename T>
  bool operator()(T a, T b) const {
    if constexpr (Op == CompareF32::Eq) return scalar::eq(a, b);
    else if constexpr (Op == CompareF32::Ne) return scalar::ne(a, b);
    else if constexpr (Op == CompareF32::Lt) return scalar::lt(a, b);
    else if constexpr (Op == CompareF32::Le) return scalar::le(a, b);
    else if constexpr (Op == CompareF32::Gt) return scalar::gt(a, b);
    else return scalar::ge(a, b);
  }
};

template <BinaryF32 Op>
struct BinaryOpF;
template <> struct BinaryOpF<BinaryF32::Add> : AddF {};
template <> struct BinaryOpF<BinaryF32::Sub> : SubF {};
template <> struct BinaryOpF<BinaryF32::Mul> : MulF {};
template <> struct BinaryOpF<BinaryF32::Div> : DivF {};
template <> struct BinaryOpF<BinaryF32::Pow> : PowF {};
template <> struct BinaryOpF<BinaryF32::Maximum> : MaximumF {};
template <> struct BinaryOpF<BinaryF32::Minimum> : MinimumF {};
template <> struct BinaryOpF<BinaryF32::GeluBackwardErf> {
  template <typename T> T operator()(T g, T x) const { return scalar::gelu_backward(g, x, false); }
};
template <> struct BinaryOpF<BinaryF32::GeluBackwardTanh> {
  template <typename T> T operator()(T g, T x) const { return scalar::gelu_backward(g, x, true); }
};
template <> struct BinaryOpF<BinaryF32::ReluBackward> {
  template <typename T> T operator()(T g, T y) const { return scalar::relu_backward(g, y); }
};

// Which compute dtypes an op has a scalar loop for.
enum class Dtypes { All, FloatOnly };

template <Dtypes D, typename F>
decltype(auto) visit_for(DType t, F&& f) {
  if constexpr (D == Dtypes::FloatOnly) return cpu::visit_float_dtype(t, std::forward<F>(f));
  else return cpu::visit_compute_dtype(t, std::forward<F>(f));
}

// ---------------------------------------------------------------------------
// Kernels
// ---------------------------------------------------------------------------

// Runs `body(y)` into `out` directly when `out` has the compute dtype, else
// into a temporary that is then converted into `out` (16-bit float outputs).
template <typename Body>
void with_compute_output(Tensor& out, DType cd, Body body) {
  if (out.dtype() == cd) {
    body(out);
    return;
  }
  Tensor y = Tensor::empty(out.shape(), cd, out.device());
  body(y);
  cpu::copy_cast(y, out);
}

// bfloat16 rows through the float32 row kernels a chunk at a time, in
// buffers on the stack: autocast's bfloat16 activations read and write 2
// bytes per element, with no float32 copy of the tensor around the kernel.
// `row(ins, out, m)` runs the float32 kernel on m contiguous floats; `ins`
// are the inputs' chunks (a broadcast input is its one value repeated).
// Elements per stack buffer of a row gathered or converted for the vector
// row kernels (bfloat16 rows here, strided float32 rows below).
constexpr int64_t kRowChunk = 256;
template <int NIn, typename Row>
void bf16_rows(Tensor& out, const std::array<const Tensor*, NIn>& ins, int64_t grain, Row row) {
  cpu::for_each_row_tiled<NIn + 1>(
      out, ins,
      [&](char* const* p, const int64_t* s, int64_t n) {
        alignas(64) float in_buf[NIn][kRowChunk];
        alignas(64) float out_buf[kRowChunk];
        const float* in_ptr[NIn];
        for (int64_t i = 0; i < n; i += kRowChunk) {
          const int64_t m = std::min(kRowChunk, n - i);
          for (int k = 0; k < NIn; ++k) {
            const char* src = p[k + 1] + i * s[k + 1];
            if (s[k + 1] == 2) {
              cpu::bf16_to_f32(reinterpret_cast<const uint16_t*>(src), in_buf[k], m);
            } else {
              for (int64_t j = 0; j < m; ++j) in_buf[k][j] = *reinterpret_cast<const BFloat16*>(src + j * s[k + 1]);
            }
            in_ptr[k] = in_buf[k];
          }
          row(in_ptr, out_buf, m);
          if (s[0] == 2) {
            cpu::f32_to_bf16(out_buf, reinterpret_cast<uint16_t*>(p[0] + i * 2), m);
          } else {
            for (int64_t j = 0; j < m; ++j) *reinterpret_cast<BFloat16*>(p[0] + (i + j) * s[0]) = BFloat16(out_buf[j]);
          }
        }
      },
      grain);
}

template <UnaryF32 Op, Dtypes D>
void run_unary(const Tensor& x_in, Tensor& out, double p0 = 0, double p1 = 0) {
  DType cd = cpu::compute_dtype(out.dtype());
  if (out.dtype() == DType::BFloat16 && x_in.dtype() == DType::BFloat16 && x_in.device().is_cpu()) {
    const cpu::F32Kernels& k = cpu::f32_kernels();
    const float fp0 = static_cast<float>(p0), fp1 = static_cast<float>(p1);
    bf16_rows<1>(out, {&x_in}, kMathGrain, [&](const float* const* in, float* y, int64_t m) {
      k.unary(Op, in[0], 1, y, m, fp0, fp1);
    });
    return;
  }
  Tensor x = cpu::converted(x_in, cd);
  UnaryF<Op> f{p0, p1};
  constexpr bool cheap = Op == UnaryF32::Neg || Op == UnaryF32::Abs || Op == UnaryF32::Relu ||
                         Op == UnaryF32::Sign || Op == UnaryF32::Clamp || Op == UnaryF32::Sqrt;
  const int64_t grain = cheap ? cpu::kParallelGrain : kMathGrain;
  with_compute_output(out, cd, [&](const Tensor& y) {
    if (cd == DType::Float32) {
      const cpu::F32Kernels& k = cpu::f32_kernels();
      const float fp0 = static_cast<float>(p0), fp1 = static_cast<float>(p1);
      cpu::for_each_row_tiled<2>(
          y, {&x},
          [&](char* const* p, const int64_t* s, int64_t n) {
            if (cpu::f32_row_ok(s, 2)) {
              k.unary(Op, reinterpret_cast<const float*>(p[1]), s[1] / 4, reinterpret_cast<float*>(p[0]), n, fp0, fp1);
              return;
            }
            // Strided: gathered into contiguous chunks, so every float32
            // value goes through the same vector math (bit for bit).
            float xs[kRowChunk], ys[kRowChunk];
            for (int64_t i0 = 0; i0 < n; i0 += kRowChunk) {
              int64_t m = std::min(kRowChunk, n - i0);
              for (int64_t i = 0; i < m; ++i) xs[i] = *reinterpret_cast<const float*>(p[1] + (i0 + i) * s[1]);
              k.unary(Op, xs, 1, ys, m, fp0, fp1);
              for (int64_t i = 0; i < m; ++i) *reinterpret_cast<float*>(p[0] + (i0 + i) * s[0]) = ys[i];
            }
          },
          grain);
      return;
    }
    visit_for<D>(cd, [&]<typename T>() { cpu::loop1<T, T>(y, x, f, grain); });
  });
}

template <BinaryF32 Op, Dtypes D>
void run_binary(const Tensor& a_in, const Tensor& b_in, Tensor& out) {
  DType cd = cpu::compute_dtype(out.dtype());
  if (out.dtype() == DType::BFloat16 && a_in.dtype() == DType::BFloat16 && b_in.dtype() == DType::BFloat16 &&
      out.device().is_cpu()) {
    const cpu::F32Kernels& k = cpu::f32_kernels();
    bf16_rows<2>(out, {&a_in, &b_in}, kMathGrain, [&](const float* const* in, float* y, int64_t m) {
      k.binary(Op, in[0], 1, in[1], 1, y, m);
    });
    return;
  }
  Tensor a = cpu::converted(a_in, cd), b = cpu::converted(b_in, cd);
  BinaryOpF<Op> f;
  constexpr bool cheap = Op == BinaryF32::Add || Op == BinaryF32::Sub || Op == BinaryF32::Mul ||
                         Op == BinaryF32::Div || Op == BinaryF32::Maximum || Op == BinaryF32::Minimum ||
                         Op == BinaryF32::ReluBackward;
  const int64_t grain = cheap ? cpu::kParallelGrain : kMathGrain;
  with_compute_output(out, cd, [&](const Tensor& y) {
    if (cd == DType::Float32) {
      const cpu::F32Kernels& k = cpu::f32_kernels();
      cpu::for_each_row_tiled<3>(
          y, {&a, &b},
          [&](char* const* p, const int64_t* s, int64_t n) {
            if (cpu::f32_row_ok(s, 3)) {
              k.binary(Op, reinterpret_cast<const float*>(p[1]), s[1] / 4, reinterpret_cast<const float*>(p[2]),
                       s[2] / 4, reinterpret_cast<float*>(p[0]), n);
              return;
            }
            // Strided: gathered into contiguous chunks (see run_unary).
            float as[kRowChunk], bs[kRowChunk], ys[kRowChunk];
            for (int64_t i0 = 0; i0 < n; i0 += kRowChunk) {
              int64_t m = std::min(kRowChunk, n - i0);
              for (int64_t i = 0; i < m; ++i) {
                as[i] = *reinterpret_cast<const float*>(p[1] + (i0 + i) * s[1]);
                bs[i] = *reinterpret_cast<const float*>(p[2] + (i0 + i) * s[2]);
              }
              k.binary(Op, as, 1, bs, 1, ys, m);
              for (int64_t i = 0; i < m; ++i) *reinterpret_cast<float*>(p[0] + (i0 + i) * s[0]) = ys[i];
            }
          },
          grain);
      return;
    }
    visit_for<D>(cd, [&]<typename T>() { cpu::loop2<T, T, T>(y, a, b, f, grain); });
  });
}

template <BinaryF32 Op, Dtypes D>
void binary_kernel(TensorSpan in, std::span<Tensor> out, const Attrs&) {
  run_binary<Op, D>(in[0], in[1], out[0]);
}
template <UnaryF32 Op, Dtypes D>
void unary_kernel(TensorSpan in, std::span<Tensor> out, const Attrs&) {
  run_unary<Op, D>(in[0], out[0]);
}

void gelu_kernel(TensorSpan in, std::span<Tensor> out, const Attrs& a) {
  if (a.s("approximate") == "tanh") run_unary<UnaryF32::GeluTanh, Dtypes::FloatOnly>(in[0], out[0]);
  else run_unary<UnaryF32::GeluErf, Dtypes::FloatOnly>(in[0], out[0]);
}
void erf_kernel(TensorSpan in, std::span<Tensor> out, const Attrs&) {
  run_unary<UnaryF32::Erf, Dtypes::FloatOnly>(in[0], out[0]);
}
void gelu_backward_kernel(TensorSpan in, std::span<Tensor> out, const Attrs& a) {
  if (a.s("approximate") == "tanh")
    run_binary<BinaryF32::GeluBackwardTanh, Dtypes::FloatOnly>(in[0], in[1], out[0]);
  else
    run_binary<BinaryF32::GeluBackwardErf, Dtypes::FloatOnly>(in[0], in[1], out[0]);
}

void clamp_kernel(TensorSpan in, std::span<Tensor> out, const Attrs& a) {
  DType cd = cpu::compute_dtype(out[0].dtype());
  double lo, hi;
  if (is_floating(cd)) {
    lo = a.has("min") ? a.f("min") : -std::numeric_limits<double>::infinity();
    hi = a.has("max") ? a.f("max") : std::numeric_limits<double>::infinity();
  } else {
    // Integer bounds: clamp the bound itself to the dtype's range first.
    double tmin = 0, tmax = 0;
    cpu::visit_compute_dtype(cd, [&]<typename T>() {
      tmin = static_cast<double>(std::numeric_limits<T>::lowest());
      tmax = static_cast<double>(std::numeric_limits<T>::max());
    });
    lo = a.has("min") ? std::clamp(a.f("min"), tmin, tmax) : tmin;
    hi = a.has("max") ? std::clamp(a.f("max"), tmin, tmax) : tmax;
  }
  run_unary<UnaryF32::Clamp, Dtypes::All>(in[0], out[0], lo, hi);
}

template <CompareF32 Op>
void compare_kernel(TensorSpan in, std::span<Tensor> out, const Attrs&) {
  DType cd = cpu::compute_dtype(result_type(in));
  Tensor a = cpu::converted(in[0], cd), b = cpu::converted(in[1], cd);
  const Tensor& y = out[0];
  CompareF<Op> f;
  if (cd == DType::Float32) {
    const cpu::F32Kernels& k = cpu::f32_kernels();
    cpu::for_each_row_tiled<3>(y, {&a, &b}, [&](char* const* p, const int64_t* s, int64_t n) {
      bool fast = s[0] == 1 && (s[1] == 4 || s[1] == 0) && (s[2] == 4 || s[2] == 0);
      if (fast) {
        k.compare(Op, reinterpret_cast<const float*>(p[1]), s[1] / 4, reinterpret_cast<const float*>(p[2]), s[2] / 4,
                  reinterpret_cast<bool*>(p[0]), n);
      } else {
        for (int64_t i = 0; i < n; ++i)
          *reinterpret_cast<bool*>(p[0] + i * s[0]) =
              f(*reinterpret_cast<const float*>(p[1] + i * s[1]), *reinterpret_cast<const float*>(p[2] + i * s[2]));
      }
    });
    return;
  }
  cpu::visit_compute_dtype(cd, [&]<typename T>() { cpu::loop2<bool, T, T>(y, a, b, f); });
}

void where_kernel(TensorSpan in, std::span<Tensor> out, const Attrs&) {
  DType cd = cpu::compute_dtype(out[0].dtype());
  const Tensor& c = in[0];
  Tensor a = cpu::converted(in[1], cd), b = cpu::converted(in[2], cd);
  with_compute_output(out[0], cd, [&](const Tensor& y) {
    if (cd == DType::Float32) {
      const cpu::F32Kernels& k = cpu::f32_kernels();
      cpu::for_each_row_tiled<4>(y, {&c, &a, &b}, [&](char* const* p, const int64_t* s, int64_t n) {
        bool fast = s[0] == 4 && (s[1] == 1 || s[1] == 0) && (s[2] == 4 || s[2] == 0) && (s[3] == 4 || s[3] == 0);
        if (fast) {
          k.where(reinterpret_cast<const bool*>(p[1]), s[1], reinterpret_cast<const float*>(p[2]), s[2] / 4,
                  reinterpret_cast<const float*>(p[3]), s[3] / 4, reinterpret_cast<float*>(p[0]), n);
        } else {
          for (int64_t i = 0; i < n; ++i)
            *reinterpret_cast<float*>(p[0] + i * s[0]) =
                scalar::where(*reinterpret_cast<const bool*>(p[1] + i * s[1]),
                              *reinterpret_cast<const float*>(p[2] + i * s[2]),
                              *reinterpret_cast<const float*>(p[3] + i * s[3]));
        }
      });
      return;
    }
    cpu::visit_compute_dtype(cd, [&]<typename T>() {
      cpu::loop3<T, bool, T, T>(y, c, a, b, [](bool cond, T u, T v) { return scalar::where(cond, u, v); });
    });
  });
}

void logical_not_kernel(TensorSpan in, std::span<Tensor> out, const Attrs&) {
  DType cd = cpu::compute_dtype(in[0].dtype());
  Tensor x = cpu::converted(in[0], cd);
  cpu::visit_compute_dtype(cd, [&]<typename T>() { cpu::loop1<bool, T>(out[0], x, [](T v) { return scalar::logical_not(v); }); });
}

void cast_kernel(TensorSpan in, std::span<Tensor> out, const Attrs&) { cpu::copy_cast(in[0], out[0]); }

// ---------------------------------------------------------------------------
// Derivatives
// ---------------------------------------------------------------------------

// A gradient of the broadcast shape, summed back to an input's shape.
Tensor reduce_to(const Tensor& g, const TensorMeta& m) { return g.shape() == m.shape ? g : sum_to(g, m.shape); }
Tensor zero_number() { return wrap_number(0.0); }

Tensors add_back(const BackwardCtx& c, TensorSpan g) {
  Tensors r(2);
  if (c.needs_grad[0]) r[0] = reduce_to(g[0], c.input_metas[0]);
  if (c.needs_grad[1]) r[1] = reduce_to(g[0], c.input_metas[1]);
  return r;
}
Tensors sub_back(const BackwardCtx& c, TensorSpan g) {
  Tensors r(2);
  if (c.needs_grad[0]) r[0] = reduce_to(g[0], c.input_metas[0]);
  if (c.needs_grad[1]) r[1] = reduce_to(neg(g[0]), c.input_metas[1]);
  return r;
}
Tensors mul_back(const BackwardCtx& c, TensorSpan g) {
  Tensors r(2);
  if (c.needs_grad[0]) r[0] = reduce_to(mul(g[0], c.inputs[1]), c.input_metas[0]);
  if (c.needs_grad[1]) r[1] = reduce_to(mul(g[0], c.inputs[0]), c.input_metas[1]);
  return r;
}
Tensors div_back(const BackwardCtx& c, TensorSpan g) {
  const Tensor &a = c.inputs[0], &b = c.inputs[1];
  Tensors r(2);
  if (c.needs_grad[0]) r[0] = reduce_to(div(g[0], b), c.input_metas[0]);
  if (c.needs_grad[1]) r[1] = reduce_to(div(mul(neg(g[0]), a), mul(b, b)), c.input_metas[1]);
  return r;
}
Tensors pow_back(const BackwardCtx& c, TensorSpan g) {
  const Tensor &a = c.inputs[0], &b = c.inputs[1], &out = c.outputs[0];
  Tensors r(2);
  if (c.needs_grad[0]) {
    // b * a^(b-1), and 0 where b == 0 (so 0^0 has derivative 0, not nan).
    Tensor bm1 = b.impl()->wrapped_number ? wrap_number(b.item() - 1.0) : sub(b, 1.0);
    Tensor d = where(eq(b, 0.0), zero_number(), mul(b, pow(a, bm1)));
    r[0] = reduce_to(mul(g[0], d), c.input_metas[0]);
  }
  if (c.needs_grad[1]) {
    // a^b log a, and 0 where a == 0 and b >= 0.
    Tensor d = mul(out, log(a));
    d = where(eq(a, 0.0), where(ge(b, 0.0), zero_number(), d), d);
    r[1] = reduce_to(mul(g[0], d), c.input_metas[1]);
  }
  return r;
}
// PyTorch splits the gradient equally between tied inputs.
template <bool IsMax>
Tensors maxmin_back(const BackwardCtx& c, TensorSpan g) {
  const Tensor &a = c.inputs[0], &b = c.inputs[1];
  Tensor half = mul(g[0], 0.5);
  Tensor tie = eq(a, b);
  Tensors r(2);
  if (c.needs_grad[0]) {
    Tensor loses = IsMax ? lt(a, b) : gt(a, b);
    r[0] = reduce_to(where(loses, zero_number(), where(tie, half, g[0])), c.input_metas[0]);
  }
  if (c.needs_grad[1]) {
    Tensor loses = IsMax ? gt(a, b) : lt(a, b);
    r[1] = reduce_to(where(loses, zero_number(), where(tie, half, g[0])), c.input_metas[1]);
  }
  return r;
}
Tensors neg_back(const BackwardCtx&, TensorSpan g) { return {neg(g[0])}; }
Tensors exp_back(const BackwardCtx& c, TensorSpan g) { return {mul(g[0], c.outputs[0])}; }
Tensors log_back(const BackwardCtx& c, TensorSpan g) { return {div(g[0], c.inputs[0])}; }
Tensors sqrt_back(const BackwardCtx& c, TensorSpan g) { return {div(g[0], mul(c.outputs[0], 2.0))}; }
Tensors rsqrt_back(const BackwardCtx& c, TensorSpan g) {
  return {mul(mul(g[0], pow(c.outputs[0], 3.0)), -0.5)};
}
Tensors abs_back(const BackwardCtx& c, TensorSpan g) { return {mul(g[0], sign(c.inputs[0]))}; }
Tensors no_grad_back(const BackwardCtx& c, TensorSpan) { return Tensors(c.input_metas.size()); }
Tensors relu_back(const BackwardCtx& c, TensorSpan g) { return {relu_backward(g[0], c.outputs[0])}; }
Tensors gelu_back(const BackwardCtx& c, TensorSpan g) {
  return {gelu_backward(g[0], c.inputs[0], c.attrs.s("approximate"))};
}
// Second derivative of gelu, for double backward through gelu_backward.
Tensor gelu_second_derivative(const Tensor& x, bool tanh_approx) {
  Tensor x2 = mul(x, x);
  if (!tanh_approx) {
    // phi(x) (2 - x^2), phi the standard normal density
    Tensor phi = mul(exp(mul(x2, -0.5)), kInvSqrt2Pi);
    return mul(phi, 2.0 - x2);
  }
  // u = b (x + k x^3), t = tanh u: f'' = (1 - t^2) (u' + x/2 (u'' - 2 t u'^2))
  Tensor u = mul(add(x, mul(mul(x2, x), kGeluKappa)), kSqrt2OverPi);
  Tensor t = tanh(u);
  Tensor du = mul(add(mul(x2, 3.0 * kGeluKappa), 1.0), kSqrt2OverPi);
  Tensor ddu = mul(x, 6.0 * kGeluKappa * kSqrt2OverPi);
  Tensor inner = add(du, mul(mul(x, 0.5), sub(ddu, mul(mul(t, 2.0), mul(du, du)))));
  return mul(1.0 - mul(t, t), inner);
}
Tensors gelu_backward_back(const BackwardCtx& c, TensorSpan g) {
  const std::string& approx = c.attrs.s("approximate");
  const Tensor &grad = c.inputs[0], &x = c.inputs[1];
  Tensors r(2);
  if (c.needs_grad[0]) r[0] = reduce_to(gelu_backward(g[0], x, approx), c.input_metas[0]);
  if (c.needs_grad[1])
    r[1] = reduce_to(mul(mul(g[0], grad), gelu_second_derivative(x, approx == "tanh")), c.input_metas[1]);
  return r;
}
// relu_backward is linear in grad and piecewise constant in result: no
// gradient flows to result (as through where(gt(result, 0), ...)).
Tensors relu_backward_back(const BackwardCtx& c, TensorSpan g) {
  Tensors r(2);
  if (c.needs_grad[0]) r[0] = reduce_to(relu_backward(g[0], c.inputs[1]), c.input_metas[0]);
  return r;
}
Tensors erf_back(const BackwardCtx& c, TensorSpan g) {
  constexpr double k2OverSqrtPi = 1.12837916709551257390;
  const Tensor& x = c.inputs[0];
  return {mul(g[0], mul(exp(neg(mul(x, x))), k2OverSqrtPi))};
}
Tensors sigmoid_back(const BackwardCtx& c, TensorSpan g) {
  const Tensor& y = c.outputs[0];
  return {mul(g[0], mul(y, 1.0 - y))};
}
Tensors tanh_back(const BackwardCtx& c, TensorSpan g) {
  const Tensor& y = c.outputs[0];
  return {mul(g[0], 1.0 - mul(y, y))};
}
Tensors clamp_back(const BackwardCtx& c, TensorSpan g) {
  // The gradient passes where min <= x <= max (so NaN inputs get none).
  const Tensor& x = c.inputs[0];
  Tensor r = g[0];
  if (c.attrs.has("max")) r = where(le(x, c.attrs.f("max")), r, zero_number());
  if (c.attrs.has("min")) r = where(ge(x, c.attrs.f("min")), r, zero_number());
  return {r};
}
Tensors where_back(const BackwardCtx& c, TensorSpan g) {
  const Tensor& cond = c.inputs[0];
  Tensors r(3);
  if (c.needs_grad[1]) r[1] = reduce_to(where(cond, g[0], zero_number()), c.input_metas[1]);
  if (c.needs_grad[2]) r[2] = reduce_to(where(cond, zero_number(), g[0]), c.input_metas[2]);
  return r;
}
Tensors cast_back(const BackwardCtx& c, TensorSpan g) {
  if (!is_floating(c.input_metas[0].dtype)) return {Tensor()};
  return {cast(g[0], c.input_metas[0].dtype)};
}

// ---------------------------------------------------------------------------
// Registration
// ---------------------------------------------------------------------------

}  // namespace

void register_pointwise_ops() {
  check_cpu_supported();
  using enum Dtypes;
  define_op(kernel_op(OpId::add, arith_infer<OpId::add>, binary_kernel<BinaryF32::Add, All>, add_back, kSaveNone));
  define_op(kernel_op(OpId::sub, arith_infer<OpId::sub>, binary_kernel<BinaryF32::Sub, All>, sub_back, kSaveNone));
  define_op(
      kernel_op(OpId::mul, arith_infer<OpId::mul>, binary_kernel<BinaryF32::Mul, All>, mul_back, kSaveInputs));
  define_op(kernel_op(OpId::div, arith_infer<OpId::div>, binary_kernel<BinaryF32::Div, FloatOnly>, div_back,
                      kSaveInputs));
  define_op(kernel_op(OpId::pow, arith_infer<OpId::pow>, binary_kernel<BinaryF32::Pow, All>, pow_back, kSaveBoth));
  define_op(kernel_op(OpId::maximum, arith_infer<OpId::maximum>, binary_kernel<BinaryF32::Maximum, All>,
                      maxmin_back<true>, kSaveInputs));
  define_op(kernel_op(OpId::minimum, arith_infer<OpId::minimum>, binary_kernel<BinaryF32::Minimum, All>,
                      maxmin_back<false>, kSaveInputs));
  define_op(kernel_op(OpId::neg, same_unary_infer<OpId::neg>, unary_kernel<UnaryF32::Neg, All>, neg_back,
                      kSaveNone));
  define_op(kernel_op(OpId::exp, float_unary_infer<OpId::exp>, unary_kernel<UnaryF32::Exp, FloatOnly>, exp_back,
                      kSaveOutputs));
  define_op(kernel_op(OpId::log, float_unary_infer<OpId::log>, unary_kernel<UnaryF32::Log, FloatOnly>, log_back,
                      kSaveInputs));
  define_op(kernel_op(OpId::sqrt, float_unary_infer<OpId::sqrt>, unary_kernel<UnaryF32::Sqrt, FloatOnly>,
                      sqrt_back, kSaveOutputs));
  define_op(kernel_op(OpId::rsqrt, float_unary_infer<OpId::rsqrt>, unary_kernel<UnaryF32::Rsqrt, FloatOnly>,
                      rsqrt_back, kSaveOutputs));
  define_op(kernel_op(OpId::abs, same_unary_infer<OpId::abs>, unary_kernel<UnaryF32::Abs, All>, abs_back,
                      kSaveInputs));
  define_op(kernel_op(OpId::sign, same_unary_infer<OpId::sign>, unary_kernel<UnaryF32::Sign, All>, no_grad_back,
                      kSaveNone));
  define_op(kernel_op(OpId::relu, same_unary_infer<OpId::relu>, unary_kernel<UnaryF32::Relu, All>, relu_back,
                      kSaveOutputs));
  define_op(kernel_op(OpId::gelu, gelu_infer, gelu_kernel, gelu_back, kSaveInputs));
  define_op(kernel_op(OpId::gelu_backward, gelu_backward_infer, gelu_backward_kernel, gelu_backward_back,
                      kSaveInputs));
  define_op(kernel_op(OpId::sigmoid, float_unary_infer<OpId::sigmoid>, unary_kernel<UnaryF32::Sigmoid, FloatOnly>,
                      sigmoid_back, kSaveOutputs));
  define_op(kernel_op(OpId::tanh, float_unary_infer<OpId::tanh>, unary_kernel<UnaryF32::Tanh, FloatOnly>,
                      tanh_back, kSaveOutputs));
  define_op(kernel_op(OpId::clamp, clamp_infer, clamp_kernel, clamp_back, kSaveInputs));
  define_op(kernel_op(OpId::where, where_infer, where_kernel, where_back, kSaveInputs));
  define_op(kernel_op(OpId::eq, compare_infer, compare_kernel<CompareF32::Eq>, nullptr, kSaveNone));
  define_op(kernel_op(OpId::ne, compare_infer, compare_kernel<CompareF32::Ne>, nullptr, kSaveNone));
  define_op(kernel_op(OpId::lt, compare_infer, compare_kernel<CompareF32::Lt>, nullptr, kSaveNone));
  define_op(kernel_op(OpId::le, compare_infer, compare_kernel<CompareF32::Le>, nullptr, kSaveNone));
  define_op(kernel_op(OpId::gt, compare_infer, compare_kernel<CompareF32::Gt>, nullptr, kSaveNone));
  define_op(kernel_op(OpId::ge, compare_infer, compare_kernel<CompareF32::Ge>, nullptr, kSaveNone));
  define_op(kernel_op(OpId::logical_not, logical_not_infer, logical_not_kernel, nullptr, kSaveNone));
  define_op(kernel_op(OpId::cast, cast_infer, cast_kernel, cast_back, kSaveNone));
  define_op(kernel_op(OpId::erf, float_unary_infer<OpId::erf>, erf_kernel, erf_back, kSaveInputs));
  OpDef relu_bwd = kernel_op(OpId::relu_backward, relu_backward_infer,
                             binary_kernel<BinaryF32::ReluBackward, FloatOnly>, relu_backward_back, kSaveInputs);
  relu_bwd.unsaved_inputs = 0b1;  // its derivative reads only result
  define_op(relu_bwd);
}

// ---- public functions ----
Tensor add(const Tensor& a, const Tensor& b) { return dispatch1(OpId::add, {a, b}); }
Tensor sub(const Tensor& a, const Tensor& b) { return dispatch1(OpId::sub, {a, b}); }
Tensor mul(const Tensor& a, const Tensor& b) { return dispatch1(OpId::mul, {a, b}); }
Tensor div(const Tensor& a, const Tensor& b) { return dispatch1(OpId::div, {a, b}); }
Tensor pow(const Tensor& a, const Tensor& b) { return dispatch1(OpId::pow, {a, b}); }
Tensor pow(const Tensor& a, double exponent) { return dispatch1(OpId::pow, {a, wrap_number(exponent)}); }
Tensor maximum(const Tensor& a, const Tensor& b) { return dispatch1(OpId::maximum, {a, b}); }
Tensor minimum(const Tensor& a, const Tensor& b) { return dispatch1(OpId::minimum, {a, b}); }
Tensor neg(const Tensor& x) { return dispatch1(OpId::neg, {x}); }
Tensor exp(const Tensor& x) { return dispatch1(OpId::exp, {x}); }
Tensor log(const Tensor& x) { return dispatch1(OpId::log, {x}); }
Tensor sqrt(const Tensor& x) { return dispatch1(OpId::sqrt, {x}); }
Tensor rsqrt(const Tensor& x) { return dispatch1(OpId::rsqrt, {x}); }
Tensor abs(const Tensor& x) { return dispatch1(OpId::abs, {x}); }
Tensor sign(const Tensor& x) { return dispatch1(OpId::sign, {x}); }
Tensor relu(const Tensor& x) { return dispatch1(OpId::relu, {x}); }
Tensor gelu(const Tensor& x, const std::string& approximate) {
  return dispatch1(OpId::gelu, {x}, Attrs().set("approximate", approximate));
}
Tensor gelu_backward(const Tensor& grad, const Tensor& x, const std::string& approximate) {
  return dispatch1(OpId::gelu_backward, {grad, x}, Attrs().set("approximate", approximate));
}
Tensor relu_backward(const Tensor& grad, const Tensor& result) {
  return dispatch1(OpId::relu_backward, {grad, result});
}
Tensor sigmoid(const Tensor& x) { return dispatch1(OpId::sigmoid, {x}); }
Tensor tanh(const Tensor& x) { return dispatch1(OpId::tanh, {x}); }
Tensor erf(const Tensor& x) { return dispatch1(OpId::erf, {x}); }
Tensor clamp(const Tensor& x, std::optional<double> min, std::optional<double> max) {
  Attrs a;
  if (min) a.set("min", *min);
  if (max) a.set("max", *max);
  return dispatch1(OpId::clamp, {x}, a);
}
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) { return dispatch1(OpId::where, {cond, a, b}); }
Tensor eq(const Tensor& a, const Tensor& b) { return dispatch1(OpId::eq, {a, b}); }
Tensor ne(const Tensor& a, const Tensor& b) { return dispatch1(OpId::ne, {a, b}); }
Tensor lt(const Tensor& a, const Tensor& b) { return dispatch1(OpId::lt, {a, b}); }
Tensor le(const Tensor& a, const Tensor& b) { return dispatch1(OpId::le, {a, b}); }
Tensor gt(const Tensor& a, const Tensor& b) { return dispatch1(OpId::gt, {a, b}); }
Tensor ge(const Tensor& a, const Tensor& b) { return dispatch1(OpId::ge, {a, b}); }
Tensor logical_not(const Tensor& x) { return dispatch1(OpId::logical_not, {x}); }
Tensor cast(const Tensor& x, DType dtype) { return dispatch1(OpId::cast, {x}, Attrs().set("dtype", dtype)); }

Tensor add(const Tensor& a, double b) { return add(a, wrap_number(b)); }
Tensor sub(const Tensor& a, double b) { return sub(a, wrap_number(b)); }
Tensor mul(const Tensor& a, double b) { return mul(a, wrap_number(b)); }
Tensor div(const Tensor& a, double b) { return div(a, wrap_number(b)); }
Tensor eq(const Tensor& a, double b) { return eq(a, wrap_number(b)); }
Tensor ne(const Tensor& a, double b) { return ne(a, wrap_number(b)); }
Tensor lt(const Tensor& a, double b) { return lt(a, wrap_number(b)); }
Tensor le(const Tensor& a, double b) { return le(a, wrap_number(b)); }
Tensor gt(const Tensor& a, double b) { return gt(a, wrap_number(b)); }
Tensor ge(const Tensor& a, double b) { return ge(a, wrap_number(b)); }

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator+(const Tensor& a, double b) { return add(a, b); }
Tensor operator-(const Tensor& a, double b) { return sub(a, b); }
Tensor operator*(const Tensor& a, double b) { return mul(a, b); }
Tensor operator/(const Tensor& a, double b) { return div(a, b); }
Tensor operator+(double a, const Tensor& b) { return add(wrap_number(a), b); }
Tensor operator-(double a, const Tensor& b) { return sub(wrap_number(a), b); }
Tensor operator*(double a, const Tensor& b) { return mul(wrap_number(a), b); }
Tensor operator/(double a, const Tensor& b) { return div(wrap_number(a), b); }
Tensor operator-(const Tensor& x) { return neg(x); }

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol) {
  KILN_CHECK(a.defined() && b.defined(), "allclose: got an undefined Tensor");
  Shape shape = broadcast_shapes(a.shape(), b.shape(), "allclose");
  Tensor x = Tensor::empty(shape, DType::Float64), y = Tensor::empty(shape, DType::Float64);
  cpu::copy_cast(a.to(Device::cpu()), x);
  cpu::copy_cast(b.to(Device::cpu()), y);
  const double* px = x.data<double>();
  const double* py = y.data<double>();
  for (int64_t i = 0; i < x.numel(); ++i) {
    double u = px[i], v = py[i];
    if (u == v) continue;  // equal values, including infinities of one sign
    if (!(std::abs(u - v) <= atol + rtol * std::abs(v))) return false;  // NaN fails here
  }
  return true;
}

}  // namespace kiln
