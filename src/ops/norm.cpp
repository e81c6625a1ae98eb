// Batch normalization over [N, C, *] (NCHW, or [N, C] for 1-D features).
//
// batch_norm outputs (y, save_mean, save_invstd). Training normalizes with
// the batch statistics over every dim but C and, when running stats are
// given, updates them in place (PyTorch's momentum rule, unbiased variance):
// the kernel writes them directly and bumps their version, as torch's
// native_batch_norm does; they are buffers, never tensors that need grad,
// and autograd does not save them (so the bump never trips backward).
// Eval normalizes with the running statistics; its save_mean/save_invstd are
// those statistics (mean, 1/sqrt(var + eps)), so batch_norm_backward has one
// signature for both modes (with training=false it treats them as constants).
//
// Kernels are parallel over channels, with unit-stride inner loops over the
// H*W run of each (n, c); per-row sums are SIMD reductions combined in
// double. float16/bfloat16 compute in float32.
//
// With layout="nChw16c" (the compiler's layout pass, ops/blocked_layout.h)
// x, y and, for batch_norm_backward, grad_out and grad_x are float32
// [N, C/16, H, W, 16] tensors: the kernels then work on a block of 16
// channels at once, lane by lane (each lane's sums in float per (n, c), then
// double, as the NCHW rows). Statistics and parameters stay [C].
//
// With activation="relu" | "gelu" (erf; the compiler's fuse_norm_activation
// pass, float32 on the CPU) batch_norm's first output is act(y), applied to
// each run of y while it is in cache, and batch_norm_backward takes the
// activation's grad_out and a sixth input, the bias: it recomputes y from x
// run by run, writes act'(y) * grad_out into grad_x's storage and goes on
// from there. So y is never written to memory, and act's backward costs no
// pass of its own. batch_norm's optional sixth input, a residual of x's shape
// (float32 CPU, ResNet's shortcut), is added to y before the activation:
// act(y + residual), the residual block's batch norm -> add -> ReLU in one
// pass (the ReLU's backward reads the result, so it needs no recompute).
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "kiln/ops.h"
#include "ops/blocked_layout.h"
#include "ops/cpu/copy.h"
#include "ops/cpu/loops.h"
#include "ops/cpu/pointwise_f32.h"
#include "ops/families.h"
#include "ops/fused_activation.h"
#include "ops/op_def.h"

namespace kiln {
namespace {

struct BnGeom {
  int64_t N, C, HW;
  bool blocked = false;  // nChw16c
  int64_t count() const { return N * HW; }
};

BnGeom bn_geometry(const Tensor& x, const Attrs& a, const char* op) {
  if (wants_blocked(a, "layout", op)) {
    check_blocked_dtype(x, x.device(), op);
    const Shape s = nchw_of_blocked(x.shape(), op);
    return {s[0], s[1], s[2] * s[3], true};
  }
  KILN_CHECK(x.dim() >= 2, op, ": input must be [N, C] or [N, C, H, W], got ", shape_str(x.shape()));
  BnGeom g{x.shape()[0], x.shape()[1], 1};
  for (int64_t d = 2; d < x.dim(); ++d) g.HW *= x.shape()[d];
  return g;
}

// The fused activation (ops/fused_activation.h), checked: float32 on the CPU.
FusedActivation norm_activation(const Attrs& a, const Tensor& x, const Device& dev, const char* op) {
  const FusedActivation act = fused_activation(a, op);
  KILN_CHECK(act == FusedActivation::None || (x.dtype() == DType::Float32 && dev == Device::cpu()), op,
             ": a fused activation is for float32 tensors on the CPU, got ", dtype_name(x.dtype()), " on ", dev.str(),
             "; apply the activation after");
  return act;
}

// z = act(y) in place over a run of n floats (the pointwise ops' kernels:
// the same bits as relu or gelu on y).
void activation_run(FusedActivation act, float* y, int64_t n) {
  if (act == FusedActivation::None) return;
  const cpu::UnaryF32 op = act == FusedActivation::Relu ? cpu::UnaryF32::Relu : cpu::UnaryF32::GeluErf;
  cpu::f32_kernels().unary(op, y, 1, y, n, 0, 0);
}

// y += r over a run of n floats (the residual, before the activation).
void add_run(float* y, const float* r, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] += r[i];
}

// The fused activation's backward over `rows` runs of x of `len` floats each:
// y = x * s + t again into `scratch` (NCHW rows: `lanes` 1, s[r] and t[r]
// for row r; an nChw16c run: one row, `lanes` 16, s[l] and t[l] per lane),
// then gy = act'(y) * gz over all of it in one call, as relu_backward and
// gelu_backward compute it (relu's from y instead of its output: y > 0
// exactly where it is).
void activation_grad_run(FusedActivation act, const float* gz, const float* x, float* gy, int64_t rows, int64_t len,
                         const float* s, const float* t, int64_t lanes, std::vector<float>& scratch) {
  scratch.resize(static_cast<size_t>(rows * len));
  float* y = scratch.data();
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * len;
    float* yr = y + r * len;
    if (lanes == 1) {
      const float sr = s[r], tr = t[r];
#pragma omp simd
      for (int64_t i = 0; i < len; ++i) yr[i] = xr[i] * sr + tr;
    } else {
      for (int64_t i = 0; i < len; i += kChannelBlock)
#pragma omp simd
        for (int64_t l = 0; l < kChannelBlock; ++l) yr[i + l] = xr[i + l] * s[l] + t[l];
    }
  }
  const cpu::BinaryF32 op =
      act == FusedActivation::Relu ? cpu::BinaryF32::ReluBackward : cpu::BinaryF32::GeluBackwardErf;
  cpu::f32_kernels().binary(op, gz, 1, y, 1, gy, rows * len);
}

// NCHW rows shorter than this take the activation per (n, chunk of channels)
// span instead of per row: a kernel call per 3x3 row costs more than the
// activation (airbench's last batch norm).
constexpr int64_t kMinActivationRow = 256;

void check_channel_vec(const Tensor& t, int64_t C, const char* op, const char* name) {
  if (!t.defined()) return;
  KILN_CHECK(t.dim() == 1 && t.shape()[0] == C, op, ": ", name, " must be [", C, "] (one per channel), got ",
             shape_str(t.shape()));
  KILN_CHECK(is_floating(t.dtype()), op, ": ", name, " must be floating point, got ", dtype_name(t.dtype()));
}

bool is_half(DType d) { return d == DType::Float16 || d == DType::BFloat16; }
// Statistics and parameter gradients of 16-bit inputs are float32, as PyTorch's.
DType stat_dtype(DType x) { return x == DType::Float64 ? DType::Float64 : DType::Float32; }

// A [C] tensor's values as doubles (`fill` everywhere when undefined).
std::vector<double> channel_values(const Tensor& t, int64_t C, double fill) {
  std::vector<double> v(C, fill);
  if (!t.defined()) return v;
  Tensor d = Tensor::empty({C}, DType::Float64);
  cpu::copy_cast(t, d);
  std::memcpy(v.data(), d.data<double>(), sizeof(double) * C);
  return v;
}

// Writes doubles into a [C] tensor of any float dtype and layout.
void store_channel_values(const Tensor& t, const std::vector<double>& v) {
  Tensor d = Tensor::empty({static_cast<int64_t>(v.size())}, DType::Float64);
  std::memcpy(d.data<double>(), v.data(), sizeof(double) * v.size());
  cpu::copy_cast(d, t);
}

// Contiguous input in the compute type (float for 16-bit floats).
Tensor compute_input(const Tensor& t) {
  if (!is_half(t.dtype())) return t.contiguous();
  Tensor out = Tensor::empty(t.shape(), DType::Float32);
  cpu::copy_cast(t, out);
  return out;
}

template <typename T>
double row_sum(const T* p, int64_t n) {
  T s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += p[i];
  return static_cast<double>(s);
}

template <typename T>
double row_sq_dev(const T* p, int64_t n, T mean) {
  T s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) {
    T d = p[i] - mean;
    s += d * d;
  }
  return static_cast<double>(s);
}

// Batch norm's output as y = x * scale + shift per channel: scale = invstd * w,
// shift = bias - mean * scale. One definition, so the fused backward's
// recomputed y is the forward's.
void affine_of(const std::vector<double>& mean, const std::vector<double>& invstd, const std::vector<double>& w,
               const std::vector<double>& bias, std::vector<double>& scale, std::vector<double>& shift) {
  scale.resize(mean.size());
  shift.resize(mean.size());
  for (size_t c = 0; c < mean.size(); ++c) {
    scale[c] = invstd[c] * w[c];
    shift[c] = bias[c] - mean[c] * scale[c];
  }
}

// Channels per parallel chunk: enough work per thread to pay for the fork.
int64_t channel_grain(const BnGeom& g) { return std::max<int64_t>(1, 65536 / std::max<int64_t>(1, g.count())); }

// ---------------------------------------------------------------------------
// batch_norm(x, weight?, bias?, running_mean?, running_var?)

std::vector<TensorMeta> bn_infer(TensorSpan in, const Attrs& a) {
  const Tensor& x = in[0];
  KILN_CHECK(x.defined() && is_floating(x.dtype()), "batch_norm: input must be a floating tensor, got ",
             describe(in.subspan(0, 1)));
  BnGeom g = bn_geometry(x, a, "batch_norm");
  check_channel_vec(in[1], g.C, "batch_norm", "weight");
  check_channel_vec(in[2], g.C, "batch_norm", "bias");
  check_channel_vec(in[3], g.C, "batch_norm", "running_mean");
  check_channel_vec(in[4], g.C, "batch_norm", "running_var");
  bool training = a.b("training");
  KILN_CHECK(in[3].defined() == in[4].defined(), "batch_norm: give both running_mean and running_var, or neither");
  if (training) {
    KILN_CHECK(g.count() > 1, "batch_norm: expected more than 1 value per channel when training, got input ",
               shape_str(x.shape()), "; use a larger batch or eval mode");
  } else {
    KILN_CHECK(in[3].defined(), "batch_norm: eval mode needs running_mean and running_var");
  }
  Device dev = common_device(in, "batch_norm");
  norm_activation(a, x, dev, "batch_norm");
  KILN_CHECK(in.size() <= 6, "batch_norm: takes at most 6 inputs (input, weight, bias, running_mean, running_var, ",
             "residual), got ", in.size());
  if (in.size() > 5 && in[5].defined()) {
    const Tensor& r = in[5];
    KILN_CHECK(r.shape() == x.shape() && r.dtype() == x.dtype(), "batch_norm: the residual must have the input's ",
               "shape and dtype, got ", describe(in.subspan(0, 1)), " and ", describe(in.subspan(5, 1)));
    KILN_CHECK(x.dtype() == DType::Float32 && dev == Device::cpu(), "batch_norm: a fused residual is for float32 ",
               "tensors on the CPU, got ", dtype_name(x.dtype()), " on ", dev.str(), "; add it after");
  }
  DType sd = stat_dtype(x.dtype());
  return {{x.shape(), x.dtype(), dev}, {{g.C}, sd, dev}, {{g.C}, sd, dev}};
}

// y = x * scale + shift per channel, then (float32 only) + residual and the
// activation, run by run.
template <typename T>
void bn_forward(const BnGeom& g, const T* x, T* y, const std::vector<double>& scale, const std::vector<double>& shift,
                FusedActivation act, const float* residual) {
  cpu::parallel_for(g.C, channel_grain(g), [&](int64_t b, int64_t e) {
    for (int64_t c = b; c < e; ++c) {
      T s = static_cast<T>(scale[c]), t = static_cast<T>(shift[c]);
      for (int64_t n = 0; n < g.N; ++n) {
        const T* xp = x + (n * g.C + c) * g.HW;
        T* yp = y + (n * g.C + c) * g.HW;
#pragma omp simd
        for (int64_t i = 0; i < g.HW; ++i) yp[i] = xp[i] * s + t;
        if constexpr (std::is_same_v<T, float>) {  // float32 only (bn_infer)
          if (residual) add_run(yp, residual + (n * g.C + c) * g.HW, g.HW);
          if (g.HW >= kMinActivationRow) activation_run(act, yp, g.HW);
        }
      }
    }
    if constexpr (std::is_same_v<T, float>)
      if (g.HW < kMinActivationRow)
        for (int64_t n = 0; n < g.N; ++n) activation_run(act, y + (n * g.C + b) * g.HW, (e - b) * g.HW);
  });
}

template <typename T>
void bn_batch_stats(const BnGeom& g, const T* x, std::vector<double>& mean, std::vector<double>& var) {
  cpu::parallel_for(g.C, channel_grain(g), [&](int64_t b, int64_t e) {
    for (int64_t c = b; c < e; ++c) {
      double s = 0;
      for (int64_t n = 0; n < g.N; ++n) s += row_sum(x + (n * g.C + c) * g.HW, g.HW);
      double m = s / static_cast<double>(g.count());
      double q = 0;
      for (int64_t n = 0; n < g.N; ++n) q += row_sq_dev(x + (n * g.C + c) * g.HW, g.HW, static_cast<T>(m));
      mean[c] = m;
      var[c] = q / static_cast<double>(g.count());  // biased: what normalization uses
    }
  });
}

// ---- nChw16c: a block of 16 channels per step, lane l = channel 16 * b + l ----
constexpr int64_t kL = kChannelBlock;
int64_t block_grain(const BnGeom& g) { return std::max<int64_t>(1, channel_grain(g) / kL); }
// The (n, block b) run of HW pixels of 16 lanes.
inline int64_t block_offset(const BnGeom& g, int64_t n, int64_t b) { return (n * (g.C / kL) + b) * g.HW * kL; }

void bn_batch_stats_blocked(const BnGeom& g, const float* x, std::vector<double>& mean, std::vector<double>& var) {
  cpu::parallel_for(g.C / kL, block_grain(g), [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      double s[kL] = {}, q[kL] = {};
      for (int64_t n = 0; n < g.N; ++n) {
        const float* p = x + block_offset(g, n, b);
        float acc[kL] = {};
        for (int64_t i = 0; i < g.HW; ++i)
#pragma omp simd
          for (int64_t l = 0; l < kL; ++l) acc[l] += p[i * kL + l];
        for (int64_t l = 0; l < kL; ++l) s[l] += acc[l];
      }
      float m[kL];
      for (int64_t l = 0; l < kL; ++l) m[l] = static_cast<float>(s[l] / static_cast<double>(g.count()));
      for (int64_t n = 0; n < g.N; ++n) {
        const float* p = x + block_offset(g, n, b);
        float acc[kL] = {};
        for (int64_t i = 0; i < g.HW; ++i)
#pragma omp simd
          for (int64_t l = 0; l < kL; ++l) {
            const float d = p[i * kL + l] - m[l];
            acc[l] += d * d;
          }
        for (int64_t l = 0; l < kL; ++l) q[l] += acc[l];
      }
      for (int64_t l = 0; l < kL; ++l) {
        mean[b * kL + l] = s[l] / static_cast<double>(g.count());
        var[b * kL + l] = q[l] / static_cast<double>(g.count());
      }
    }
  });
}

// Over the (n, b) run at offset o: y = a1 * x + a3 per lane, or, with go,
// y = a1 * go + a2 * x + a3 (go may be y itself).
void blocked_affine(const BnGeom& g, int64_t o, const float* go, const float* x, float* y, const float* a1,
                    const float* a2, const float* a3) {
  for (int64_t i = 0; i < g.HW; ++i) {
    const int64_t k = o + i * kL;
    if (go) {
#pragma omp simd
      for (int64_t l = 0; l < kL; ++l) y[k + l] = a1[l] * go[k + l] + a2[l] * x[k + l] + a3[l];
    } else {
#pragma omp simd
      for (int64_t l = 0; l < kL; ++l) y[k + l] = x[k + l] * a1[l] + a3[l];
    }
  }
}

// The per-lane float32 scale and shift of block b.
void block_lanes(const std::vector<double>& scale, const std::vector<double>& shift, int64_t b, float* s, float* t) {
  for (int64_t l = 0; l < kL; ++l) {
    s[l] = static_cast<float>(scale[b * kL + l]);
    t[l] = static_cast<float>(shift[b * kL + l]);
  }
}

void bn_forward_blocked(const BnGeom& g, const float* x, float* y, const std::vector<double>& scale,
                        const std::vector<double>& shift, FusedActivation act, const float* residual) {
  cpu::parallel_for(g.C / kL, block_grain(g), [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      float s[kL], t[kL];
      block_lanes(scale, shift, b, s, t);
      for (int64_t n = 0; n < g.N; ++n) {
        const int64_t o = block_offset(g, n, b);
        blocked_affine(g, o, nullptr, x, y, s, nullptr, t);
        if (residual) add_run(y + o, residual + o, g.HW * kL);
        activation_run(act, y + o, g.HW * kL);
      }
    }
  });
}

void bn_kernel(TensorSpan in, std::span<Tensor> out, const Attrs& a) {
  const Tensor& x_in = in[0];
  BnGeom g = bn_geometry(x_in, a, "batch_norm");
  bool training = a.b("training");
  double momentum = a.f("momentum"), eps = a.f("eps");
  Tensor x = compute_input(x_in);
  bool half = is_half(x_in.dtype());
  Tensor y = half ? Tensor::empty(x_in.shape(), DType::Float32) : out[0];
  std::vector<double> mean(g.C), var(g.C);
  if (training) {
    if (g.blocked) bn_batch_stats_blocked(g, x.data<float>(), mean, var);
    else if (x.dtype() == DType::Float64) bn_batch_stats<double>(g, x.data<double>(), mean, var);
    else bn_batch_stats<float>(g, x.data<float>(), mean, var);
    if (in[3].defined()) {
      std::vector<double> rm = channel_values(in[3], g.C, 0), rv = channel_values(in[4], g.C, 1);
      double unbias = static_cast<double>(g.count()) / static_cast<double>(g.count() - 1);
      for (int64_t c = 0; c < g.C; ++c) {
        rm[c] = (1 - momentum) * rm[c] + momentum * mean[c];
        rv[c] = (1 - momentum) * rv[c] + momentum * var[c] * unbias;
      }
      store_channel_values(in[3], rm);
      store_channel_values(in[4], rv);
      in[3].bump_version();
      in[4].bump_version();
    }
  } else {
    mean = channel_values(in[3], g.C, 0);
    var = channel_values(in[4], g.C, 1);
  }
  std::vector<double> w = channel_values(in[1], g.C, 1), bias = channel_values(in[2], g.C, 0);
  std::vector<double> invstd(g.C), scale, shift;
  for (int64_t c = 0; c < g.C; ++c) invstd[c] = 1.0 / std::sqrt(var[c] + eps);
  affine_of(mean, invstd, w, bias, scale, shift);
  const FusedActivation act = norm_activation(a, x_in, x_in.device(), "batch_norm");
  Tensor res = in.size() > 5 && in[5].defined() ? in[5].contiguous() : Tensor();
  const float* rp = res.defined() ? res.data<float>() : nullptr;
  if (g.blocked) bn_forward_blocked(g, x.data<float>(), y.data<float>(), scale, shift, act, rp);
  else if (x.dtype() == DType::Float64)
    bn_forward<double>(g, x.data<double>(), y.data<double>(), scale, shift, act, nullptr);
  else bn_forward<float>(g, x.data<float>(), y.data<float>(), scale, shift, act, rp);
  if (half) cpu::copy_cast(y, out[0]);
  store_channel_values(out[1], mean);
  store_channel_values(out[2], invstd);
}

// The compiler's forms of the ops (a layout, a fused activation) come after
// its backward graph: they have no derivative.
void check_no_compiled_form(const Attrs& a, const char* op) {
  check_no_blocked_derivative(a, "layout", op);
  KILN_CHECK(!a.has("activation"), op, " with a fused activation has no derivative: it is a compiled graph's form of ",
             "the op, made after the graph's backward; differentiate batch_norm and the activation");
}

Tensors bn_back(const BackwardCtx& c, TensorSpan g) {
  check_no_compiled_form(c.attrs, "batch_norm");
  KILN_CHECK(c.inputs.size() <= 5 || !c.inputs[5].defined(), "batch_norm with a fused residual has no derivative: ",
             "it is a compiled graph's form of the op, made after the graph's backward; differentiate batch_norm and ",
             "the add");
  const Tensor& x = c.inputs[0];
  const Tensor& w = c.inputs[1];
  auto [gx, gw, gb] = batch_norm_backward(g[0], x, w, c.outputs[1], c.outputs[2], c.attrs.b("training"),
                                          c.attrs.f("eps"));
  Tensors out(5);
  if (c.needs_grad[0]) out[0] = gx;
  if (c.needs_grad[1]) out[1] = gw;
  if (c.needs_grad[2]) out[2] = gb;
  return out;
}

// ---------------------------------------------------------------------------
// batch_norm_backward(grad_out, x, weight?, save_mean, save_invstd)
//   -> (grad_x, grad_weight, grad_bias)

std::vector<TensorMeta> bn_bwd_infer(TensorSpan in, const Attrs& a) {
  const Tensor& go = in[0];
  const Tensor& x = in[1];
  KILN_CHECK(go.defined() && x.defined() && go.shape() == x.shape(), "batch_norm_backward: grad_out and input must "
             "have the same shape, got ", describe(in.subspan(0, 2)));
  KILN_CHECK(is_floating(x.dtype()) && go.dtype() == x.dtype(), "batch_norm_backward: grad_out and input must be "
             "floating tensors of one dtype, got ", describe(in.subspan(0, 2)));
  BnGeom g = bn_geometry(x, a, "batch_norm_backward");
  check_channel_vec(in[2], g.C, "batch_norm_backward", "weight");
  KILN_CHECK(in[3].defined() && in[4].defined(), "batch_norm_backward: save_mean and save_invstd are required");
  check_channel_vec(in[3], g.C, "batch_norm_backward", "save_mean");
  check_channel_vec(in[4], g.C, "batch_norm_backward", "save_invstd");
  Device dev = common_device(in, "batch_norm_backward");
  if (norm_activation(a, x, dev, "batch_norm_backward") != FusedActivation::None) {
    if (in.size() > 5) check_channel_vec(in[5], g.C, "batch_norm_backward", "bias");
  } else {
    KILN_CHECK(in.size() == 5, "batch_norm_backward: takes 5 inputs (grad_out, input, weight, save_mean, ",
               "save_invstd), got ", in.size(), "; the sixth, bias, only with a fused activation");
  }
  DType pd = in[2].defined() ? in[2].dtype() : stat_dtype(x.dtype());
  return {{x.shape(), x.dtype(), dev}, {{g.C}, pd, dev}, {{g.C}, pd, dev}};
}

// One channel's grad_x = k1 * g + k2 * x + k3 from its sums (sum_g = sum of
// g, sum_gd = sum of g * (x - mean)); eval treats the statistics as constants.
struct GradXCoefficients {
  double k1, k2, k3;
};
GradXCoefficients grad_x_coefficients(bool training, double invstd, double w, double mean, double sum_g,
                                      double sum_gd, double count) {
  GradXCoefficients k{invstd * w, 0, 0};
  if (training) {
    k.k2 = -invstd * invstd * invstd * w * sum_gd / count;
    k.k3 = -k.k1 * sum_g / count - mean * k.k2;
  }
  return k;
}

// The inputs of both backward kernels. With a fused activation, `act_scale`
// and `act_shift` are the forward's y = x * scale + shift per channel, and the
// kernels first turn each run of go (the activation's grad_out) into y's
// gradient in gx's storage.
struct BnBackwardArgs {
  bool training = true;
  std::vector<double> mean, invstd, w;
  FusedActivation act = FusedActivation::None;
  std::vector<double> act_scale, act_shift;
};

template <typename T>
void bn_backward(const BnGeom& g, const BnBackwardArgs& args, const T* go, const T* x, T* gx, std::vector<double>& gw,
                 std::vector<double>& gb) {
  const double cnt = static_cast<double>(g.count());
  cpu::parallel_for(g.C, channel_grain(g), [&](int64_t b, int64_t e) {
    std::vector<float> scratch, s_act, t_act;
    const bool per_row = g.HW >= kMinActivationRow;
    if constexpr (std::is_same_v<T, float>)
      if (args.act != FusedActivation::None) {
        s_act.resize(e - b), t_act.resize(e - b);
        for (int64_t c = b; c < e; ++c) {
          s_act[c - b] = static_cast<float>(args.act_scale[c]);
          t_act[c - b] = static_cast<float>(args.act_shift[c]);
        }
        for (int64_t n = 0; !per_row && n < g.N; ++n) {  // short rows: the chunk's spans first
          const int64_t o = (n * g.C + b) * g.HW;
          activation_grad_run(args.act, go + o, x + o, gx + o, e - b, g.HW, s_act.data(), t_act.data(), 1, scratch);
        }
      }
    for (int64_t c = b; c < e; ++c) {
      T m = static_cast<T>(args.mean[c]);
      // Where this channel's y gradient is: go, or gx after the activation's backward.
      auto grad_y = [&](int64_t n) -> const T* {
        return args.act == FusedActivation::None ? go + (n * g.C + c) * g.HW : gx + (n * g.C + c) * g.HW;
      };
      double sum_g = 0, sum_gd = 0;
      for (int64_t n = 0; n < g.N; ++n) {
        const T* xp = x + (n * g.C + c) * g.HW;
        if constexpr (std::is_same_v<T, float>)
          if (args.act != FusedActivation::None && per_row) {
            const int64_t o = (n * g.C + c) * g.HW;
            activation_grad_run(args.act, go + o, xp, gx + o, 1, g.HW, &s_act[c - b], &t_act[c - b], 1, scratch);
          }
        const T* gp = grad_y(n);
        T s = 0, sd = 0;
#pragma omp simd reduction(+ : s, sd)
        for (int64_t i = 0; i < g.HW; ++i) {
          s += gp[i];
          sd += gp[i] * (xp[i] - m);
        }
        sum_g += s;
        sum_gd += sd;
      }
      gb[c] = sum_g;
      gw[c] = sum_gd * args.invstd[c];
      const GradXCoefficients k =
          grad_x_coefficients(args.training, args.invstd[c], args.w[c], args.mean[c], sum_g, sum_gd, cnt);
      T a1 = static_cast<T>(k.k1), a2 = static_cast<T>(k.k2), a3 = static_cast<T>(k.k3);
      for (int64_t n = 0; n < g.N; ++n) {
        const T* gp = grad_y(n);
        const T* xp = x + (n * g.C + c) * g.HW;
        T* op = gx + (n * g.C + c) * g.HW;
#pragma omp simd
        for (int64_t i = 0; i < g.HW; ++i) op[i] = a1 * gp[i] + a2 * xp[i] + a3;
      }
    }
  });
}

// bn_backward over nChw16c blocks (same formulas, lane by lane).
void bn_backward_blocked(const BnGeom& g, const BnBackwardArgs& args, const float* go, const float* x, float* gx,
                         std::vector<double>& gw, std::vector<double>& gb) {
  const double cnt = static_cast<double>(g.count());
  cpu::parallel_for(g.C / kL, block_grain(g), [&](int64_t b0, int64_t b1) {
    std::vector<float> scratch;
    for (int64_t b = b0; b < b1; ++b) {
      float m[kL], s_act[kL], t_act[kL];
      for (int64_t l = 0; l < kL; ++l) m[l] = static_cast<float>(args.mean[b * kL + l]);
      if (args.act != FusedActivation::None) block_lanes(args.act_scale, args.act_shift, b, s_act, t_act);
      const float* gy = args.act == FusedActivation::None ? go : gx;  // y's gradient, as in bn_backward
      double sum_g[kL] = {}, sum_gd[kL] = {};
      for (int64_t n = 0; n < g.N; ++n) {
        const int64_t o = block_offset(g, n, b);
        if (args.act != FusedActivation::None)
          activation_grad_run(args.act, go + o, x + o, gx + o, 1, g.HW * kL, s_act, t_act, kL, scratch);
        float s[kL] = {}, sd[kL] = {};
        for (int64_t i = 0; i < g.HW; ++i)
#pragma omp simd
          for (int64_t l = 0; l < kL; ++l) {
            const float gv = gy[o + i * kL + l];
            s[l] += gv;
            sd[l] += gv * (x[o + i * kL + l] - m[l]);
          }
        for (int64_t l = 0; l < kL; ++l) sum_g[l] += s[l], sum_gd[l] += sd[l];
      }
      float a1[kL], a2[kL], a3[kL];
      for (int64_t l = 0; l < kL; ++l) {
        const int64_t c = b * kL + l;
        gb[c] = sum_g[l];
        gw[c] = sum_gd[l] * args.invstd[c];
        const GradXCoefficients k =
            grad_x_coefficients(args.training, args.invstd[c], args.w[c], args.mean[c], sum_g[l], sum_gd[l], cnt);
        a1[l] = static_cast<float>(k.k1), a2[l] = static_cast<float>(k.k2), a3[l] = static_cast<float>(k.k3);
      }
      for (int64_t n = 0; n < g.N; ++n) blocked_affine(g, block_offset(g, n, b), gy, x, gx, a1, a2, a3);
    }
  });
}

void bn_bwd_kernel(TensorSpan in, std::span<Tensor> out, const Attrs& a) {
  BnGeom g = bn_geometry(in[1], a, "batch_norm_backward");
  Tensor go = compute_input(in[0]), x = compute_input(in[1]);
  bool half = is_half(in[1].dtype());
  Tensor gx = half ? Tensor::empty(x.shape(), DType::Float32) : out[0];
  BnBackwardArgs args;
  args.training = a.b("training");
  args.mean = channel_values(in[3], g.C, 0);
  args.invstd = channel_values(in[4], g.C, 1);
  args.w = channel_values(in[2], g.C, 1);
  args.act = norm_activation(a, in[1], in[1].device(), "batch_norm_backward");
  if (args.act != FusedActivation::None) {
    // y = x * scale + shift as batch_norm computed it (from the saved statistics).
    const std::vector<double> bias = channel_values(in.size() > 5 ? in[5] : Tensor(), g.C, 0);
    affine_of(args.mean, args.invstd, args.w, bias, args.act_scale, args.act_shift);
  }
  std::vector<double> gw(g.C), gb(g.C);
  if (g.blocked) bn_backward_blocked(g, args, go.data<float>(), x.data<float>(), gx.data<float>(), gw, gb);
  else if (x.dtype() == DType::Float64)
    bn_backward<double>(g, args, go.data<double>(), x.data<double>(), gx.data<double>(), gw, gb);
  else bn_backward<float>(g, args, go.data<float>(), x.data<float>(), gx.data<float>(), gw, gb);
  if (half) cpu::copy_cast(gx, out[0]);
  store_channel_values(out[1], gw);
  store_channel_values(out[2], gb);
}

}  // namespace

void register_norm_ops() {
  OpDef bn = kernel_op(OpId::batch_norm, bn_infer, bn_kernel, bn_back, kSaveBoth);
  bn.num_outputs = 3;
  bn.num_differentiable_outputs = 1;
  // The derivative reads x, weight, save_mean and save_invstd only. Not
  // saving the running statistics also keeps their in-place updates (a
  // second forward through the same layer) from tripping the version check.
  // (A fused residual, input 5, is saved so that its refusal below can see it.)
  bn.unsaved_inputs = 0b11100;  // bias, running_mean, running_var
  bn.unsaved_outputs = 0b001;   // y
  bn.mutated_inputs = (1u << 3) | (1u << 4);  // running_mean, running_var (training)
  define_op(bn);
  OpDef bb = kernel_op(OpId::batch_norm_backward, bn_bwd_infer, bn_bwd_kernel);
  bb.num_outputs = 3;
  bb.num_differentiable_outputs = 0;  // no double backward through batch norm yet
  define_op(bb);
}

// ---- public functions ----
Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                  const Tensor& running_var, bool training, double momentum, double eps) {
  KILN_CHECK(x.defined(), "batch_norm: input is undefined");
  auto needs_grad = [](const Tensor& t) { return t.defined() && t.requires_grad(); };
  if (training) {
    KILN_CHECK(!(grad_mode_enabled() && (needs_grad(running_mean) || needs_grad(running_var))),
               "batch_norm: running_mean/running_var require grad; they are buffers updated in place, create them "
               "without requires_grad");
  }
  return dispatch1(OpId::batch_norm, {x, weight, bias, running_mean, running_var},
                   Attrs().set("training", training).set("momentum", momentum).set("eps", eps));
}

std::tuple<Tensor, Tensor, Tensor> batch_norm_backward(const Tensor& grad_out, const Tensor& x, const Tensor& weight,
                                                       const Tensor& save_mean, const Tensor& save_invstd,
                                                       bool training, double eps) {
  Tensors r = dispatch(OpId::batch_norm_backward, {grad_out, x, weight, save_mean, save_invstd},
                       Attrs().set("training", training).set("eps", eps));
  return {r[0], r[1], r[2]};
}

}  // namespace kiln
