// Decompositions of ops that have a fast eager kernel (softmax, batch norm,
// nll_loss, gelu and their backward ops) into primitive ops: pointwise ops,
// reductions, views, factories, gather/scatter_add and copy_. Eager dispatch
// keeps calling the kernels; the compiler expands these ops with the
// functions registered here (OpDef::decompose) so that it can fuse and
// differentiate through their parts.
//
// Each decomposition gives the same outputs (count, shapes, dtypes) and the
// same observable effects as the kernel: batch_norm's training update of the
// running statistics is an explicit copy_ into them, so functionalization sees
// the mutation. 16-bit float inputs compute in float32 and round once at the
// end, as the kernels do. A decomposition never calls its own op
// (tests/ops/test_decompositions.cpp checks it with a recording dispatch mode).
#include <cmath>
#include <limits>

#include "kiln/ops.h"
#include "ops/cpu/pointwise_util.h"
#include "ops/families.h"
#include "ops/op_def.h"
#include "ops/scalar_expr.h"

namespace kiln {
namespace {

using cpu::wrap_number;

bool is_half(DType d) { return d == DType::Float16 || d == DType::BFloat16; }
// The dtype the kernels compute in: float32 for 16-bit floats.
DType compute_dtype_of(DType d) { return is_half(d) ? DType::Float32 : d; }
// `t` in dtype `d` (no cast node when it already is).
Tensor as_dtype(const Tensor& t, DType d) { return t.dtype() == d ? t : cast(t, d); }

// ---- softmax / log_softmax ----
// y = exp(x - m) / sum(exp(x - m)), m the max along dim (0 where it is
// infinite, as the kernel: a row of -inf stays finite before the exp).
template <bool Log>
Tensors softmax_dec(TensorSpan in, const Attrs& a) {
  const Tensor& x_in = in[0];
  int64_t dim = a.i("dim");
  Tensor x = as_dtype(x_in, compute_dtype_of(x_in.dtype()));
  Tensor m = amax(x, {dim}, true);
  m = where(eq(abs(m), std::numeric_limits<double>::infinity()), wrap_number(0.0), m);
  Tensor shifted = sub(x, m);
  Tensor e = exp(shifted);
  Tensor s = sum(e, {dim}, true);
  Tensor y = Log ? sub(x, add(m, log(s))) : div(e, s);
  return {as_dtype(y, x_in.dtype())};
}

// softmax_backward(g, y): y * (g - sum(g * y)); log_softmax_backward(g, y):
// g - exp(y) * sum(g), along dim.
template <bool Log>
Tensors softmax_backward_dec(TensorSpan in, const Attrs& a) {
  const Tensor& y_in = in[1];
  int64_t dim = a.i("dim");
  DType cd = compute_dtype_of(y_in.dtype());
  Tensor g = as_dtype(in[0], cd), y = as_dtype(y_in, cd);
  Tensor gx = Log ? sub(g, mul(exp(y), sum(g, {dim}, true))) : mul(y, sub(g, sum(mul(g, y), {dim}, true)));
  return {as_dtype(gx, y_in.dtype())};
}

// ---- batch_norm ----
// Per-channel [C] statistics broadcast against [N, C, *].
struct ChannelLayout {
  std::vector<int64_t> reduce_dims;  // every dim but 1
  Shape broadcast;                   // [1, C, 1, ...]
  int64_t count = 1;                 // values per channel
};
ChannelLayout channel_layout(const Tensor& x) {
  ChannelLayout l;
  l.broadcast = Shape(x.dim(), 1);
  l.broadcast[1] = x.shape()[1];
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (d == 1) continue;
    l.reduce_dims.push_back(d);
    l.count *= x.shape()[d];
  }
  return l;
}
// The decompositions index NCHW: the nChw16c form (ops/blocked_layout.h) is
// made after the compiler decomposes.
// The compiler's forms of batch norm (a blocked layout, a fused activation)
// come after decomposition and have none.
void check_plain_layout(const Attrs& a, const char* op) {
  KILN_CHECK(!a.has("layout"), op, " with layout=", a.s("layout"), " has no decomposition; decompose the plain op");
  KILN_CHECK(!a.has("activation"), op, " with activation=", a.s("activation"), " has no decomposition; decompose ",
             "the plain op and the activation");
}
// Statistics of 16-bit inputs are float32, as the kernel's (and PyTorch's).
DType stat_dtype(DType x) { return x == DType::Float64 ? DType::Float64 : DType::Float32; }

// batch_norm(x, weight?, bias?, running_mean?, running_var?) -> (y, save_mean, save_invstd)
Tensors batch_norm_dec(TensorSpan in, const Attrs& a) {
  check_plain_layout(a, "batch_norm");
  KILN_CHECK(in.size() <= 5 || !in[5].defined(), "batch_norm with a fused residual has no decomposition; decompose ",
             "the plain op and the add");
  const Tensor& x_in = in[0];
  const Tensor &w = in[1], &b = in[2], &rm = in[3], &rv = in[4];
  bool training = a.b("training");
  double momentum = a.f("momentum"), eps = a.f("eps");
  DType sd = stat_dtype(x_in.dtype());
  Tensor x = as_dtype(x_in, sd);
  ChannelLayout l = channel_layout(x);
  Tensor mean_c, var_c;  // [C]
  if (training) {
    mean_c = mean(x, l.reduce_dims);
    var_c = var(x, l.reduce_dims, /*correction=*/0);
    if (rm.defined()) {
      // The kernel's in-place update, as explicit writes (unbiased variance).
      double unbias = static_cast<double>(l.count) / static_cast<double>(l.count - 1);
      Tensor new_rm = add(mul(rm, 1.0 - momentum), mul(mean_c, momentum));
      Tensor new_rv = add(mul(rv, 1.0 - momentum), mul(var_c, momentum * unbias));
      Tensor rm_ref = rm, rv_ref = rv;
      copy_(rm_ref, new_rm);
      copy_(rv_ref, new_rv);
    }
  } else {
    mean_c = cast(rm, sd);  // a new tensor: save_mean never aliases the buffer
    var_c = as_dtype(rv, sd);
  }
  Tensor invstd_c = rsqrt(add(var_c, eps));
  Tensor scale = reshape(invstd_c, l.broadcast);
  if (w.defined()) scale = mul(scale, reshape(w, l.broadcast));
  Tensor y = mul(sub(x, reshape(mean_c, l.broadcast)), scale);
  if (b.defined()) y = add(y, reshape(b, l.broadcast));
  return {as_dtype(y, x_in.dtype()), mean_c, invstd_c};
}

// batch_norm_backward(grad_out, x, weight?, save_mean, save_invstd)
//   -> (grad_x, grad_weight, grad_bias)
// grad_x = invstd * w * (g - sum(g)/n - (x - mean) * invstd^2 * sum(g (x - mean))/n)
// in training; invstd * w * g in eval (the statistics are constants).
Tensors batch_norm_backward_dec(TensorSpan in, const Attrs& a) {
  check_plain_layout(a, "batch_norm_backward");
  const Tensor &go_in = in[0], &x_in = in[1], &w = in[2];
  bool training = a.b("training");
  DType sd = stat_dtype(x_in.dtype());
  DType pd = w.defined() ? w.dtype() : sd;
  Tensor go = as_dtype(go_in, sd), x = as_dtype(x_in, sd);
  ChannelLayout l = channel_layout(x);
  Tensor invstd_c = as_dtype(in[4], sd);
  Tensor centered = sub(x, reshape(as_dtype(in[3], sd), l.broadcast));
  Tensor sum_g = sum(go, l.reduce_dims);                      // [C]
  Tensor sum_gd = sum(mul(go, centered), l.reduce_dims);      // [C]
  Tensor invstd = reshape(invstd_c, l.broadcast);
  Tensor scale = w.defined() ? mul(invstd, reshape(as_dtype(w, sd), l.broadcast)) : invstd;
  Tensor gx;
  if (training) {
    double inv_n = 1.0 / static_cast<double>(l.count);
    Tensor proj = mul(mul(mul(invstd, invstd), reshape(sum_gd, l.broadcast)), inv_n);
    gx = mul(sub(sub(go, mul(reshape(sum_g, l.broadcast), inv_n)), mul(centered, proj)), scale);
  } else {
    gx = mul(go, scale);
  }
  return {as_dtype(gx, x_in.dtype()), as_dtype(mul(sum_gd, invstd_c), pd), as_dtype(sum_g, pd)};
}

// ---- nll_loss ----
int64_t class_dim_of(int64_t log_probs_dim) { return log_probs_dim == 1 ? 0 : 1; }
// Targets with ignore_index replaced by class 0 (a valid index for gather
// and scatter_add; the ignored positions are masked out afterwards).
Tensor safe_target(const Tensor& target, const Tensor& ignored) { return where(ignored, wrap_number(0.0), target); }

// nll_loss(log_probs, target): -log_probs[target] per sample, 0 where
// target == ignore_index; "mean" divides by the count of kept targets.
Tensors nll_loss_dec(TensorSpan in, const Attrs& a) {
  const Tensor &lp_in = in[0], &target = in[1];
  const std::string& reduction = a.s("reduction");
  int64_t cd = class_dim_of(lp_in.dim());
  Tensor lp = as_dtype(lp_in, compute_dtype_of(lp_in.dtype()));
  Tensor ignored = eq(target, static_cast<double>(a.i("ignore_index")));
  Tensor picked = squeeze(gather(lp, cd, unsqueeze(safe_target(target, ignored), cd)), cd);
  Tensor losses = where(ignored, wrap_number(0.0), neg(picked));
  Tensor r = losses;
  if (reduction == "sum") r = sum(losses);
  else if (reduction == "mean") r = div(sum(losses), sum(cast(logical_not(ignored), lp.dtype())));
  else KILN_CHECK(reduction == "none", "nll_loss: unknown reduction '", reduction, "'; use \"mean\", \"sum\" or \"none\"");
  return {as_dtype(r, lp_in.dtype())};
}

// nll_loss_backward(grad, target) -> zeros(input_shape) with -grad (over the
// kept count for "mean") scattered to each kept target.
Tensors nll_loss_backward_dec(TensorSpan in, const Attrs& a) {
  const Tensor &g_in = in[0], &target = in[1];
  const std::string& reduction = a.s("reduction");
  Shape input_shape = a.ints("input_shape");
  int64_t cd = class_dim_of(static_cast<int64_t>(input_shape.size()));
  DType dt = compute_dtype_of(g_in.dtype());
  Tensor g = as_dtype(g_in, dt);
  Tensor ignored = eq(target, static_cast<double>(a.i("ignore_index")));
  Tensor per_target = neg(g);  // "none": one gradient per target
  if (reduction == "mean") per_target = div(per_target, sum(cast(logical_not(ignored), dt)));
  per_target = where(ignored, wrap_number(0.0), expand(per_target, target.shape()));
  Tensor zero = zeros(input_shape, TensorOptions().with_dtype(dt).with_device(g.device()));
  Tensor gx = scatter_add(zero, cd, unsqueeze(safe_target(target, ignored), cd), unsqueeze(per_target, cd));
  return {as_dtype(gx, g_in.dtype())};
}

// ---- gelu, gelu_backward, relu_backward: their scalar formula (ops/scalar_math.h) as tensor ops ----
// One node of the expression, one primitive op (erf, tanh, exp, mul...).
template <OpId Id>
Tensors pointwise_formula_dec(TensorSpan in, const Attrs& a) {
  DType out = result_type(in);
  DType cd = compute_dtype_of(out);
  Tensors xs;
  for (const Tensor& t : in) xs.push_back(as_dtype(t, cd));
  Tensor y = eval_tensors(pointwise_expr(Id, a, static_cast<int>(in.size())), xs);
  return {as_dtype(y, out)};
}

}  // namespace

void register_decompositions() {
  register_decomposition(OpId::gelu, pointwise_formula_dec<OpId::gelu>);
  register_decomposition(OpId::gelu_backward, pointwise_formula_dec<OpId::gelu_backward>);
  register_decomposition(OpId::relu_backward, pointwise_formula_dec<OpId::relu_backward>);
  register_decomposition(OpId::softmax, softmax_dec<false>);
  register_decomposition(OpId::log_softmax, softmax_dec<true>);
  register_decomposition(OpId::softmax_backward, softmax_backward_dec<false>);
  register_decomposition(OpId::log_softmax_backward, softmax_backward_dec<true>);
  register_decomposition(OpId::batch_norm, batch_norm_dec);
  register_decomposition(OpId::batch_norm_backward, batch_norm_backward_dec);
  register_decomposition(OpId::nll_loss, nll_loss_dec);
  register_decomposition(OpId::nll_loss_backward, nll_loss_backward_dec);
}

}  // namespace kiln
