// Losses: nll_loss (+ its backward op) and cross_entropy (a composite:
// log_softmax + nll_loss, with label smoothing computed as PyTorch 1.13 does).
#include <atomic>
#include <cmath>
#include <limits>

#include "kiln/ops.h"
#include "ops/cpu/loops.h"
#include "ops/cpu/reduce_kernels.h"
#include "ops/families.h"
#include "ops/op_def.h"

namespace kiln {
namespace {

int reduction_code(const std::string& r, const char* op) {
  if (r == "none") return 0;
  if (r == "mean") return 1;
  if (r == "sum") return 2;
  KILN_FAIL(op, ": unknown reduction '", r, "'; use \"mean\", \"sum\" or \"none\"");
}

// log_probs viewed as [N, C, S] with target [N, S].
struct NllShape {
  int64_t N = 1, C = 1, S = 1;
};
NllShape check_nll(const Tensor& lp, const Tensor& target, const char* op) {
  KILN_CHECK(is_floating(lp.dtype()), op, ": log_probs must be floating point, got ", dtype_name(lp.dtype()));
  KILN_CHECK(target.dtype() == DType::Int64, op, ": target must hold int64 class indices, got ",
             dtype_name(target.dtype()), shape_str(target.shape()), "; cast it with .to(DType::Int64)");
  KILN_CHECK(lp.dim() >= 1, op, ": log_probs must be [C], [N, C] or [N, C, d1, ...], got a 0-dim tensor");
  NllShape s;
  if (lp.dim() == 1) {
    KILN_CHECK(target.dim() == 0, op, ": for log_probs ", shape_str(lp.shape()), " ([C]) the target must be 0-dim, got ",
               shape_str(target.shape()));
    s.C = lp.shape()[0];
    return s;
  }
  Shape want = lp.shape();
  want.erase(want.begin() + 1);
  KILN_CHECK(target.shape() == want, op, ": log_probs ", shape_str(lp.shape()), " ([N, C, ...]) needs target ",
             shape_str(want), " ([N, ...]) but got target ", shape_str(target.shape()),
             "; the target holds one class index per sample (and per spatial position)");
  s.N = lp.shape()[0];
  s.C = lp.shape()[1];
  for (int64_t d = 2; d < lp.dim(); ++d) s.S *= lp.shape()[d];
  return s;
}

// ---- nll_loss ----
std::vector<TensorMeta> nll_infer(TensorSpan in, const Attrs& a) {
  check_nll(in[0], in[1], "nll_loss");
  int r = reduction_code(a.s("reduction"), "nll_loss");
  return {{r == 0 ? in[1].shape() : Shape{}, in[0].dtype(), in[0].device()}};
}

[[noreturn]] void bad_target(int64_t t, const NllShape& s, int64_t ignore, const char* op) {
  KILN_FAIL(op, ": target ", t, " is out of range for ", s.C, " classes; targets must be in [0, ", s.C,
            ") or equal ignore_index (", ignore, ")");
}

void nll_kernel(TensorSpan in, std::span<Tensor> out, const Attrs& a) {
  Tensor lp = cpu::contiguous_nograd(in[0]);
  Tensor target = cpu::contiguous_nograd(in[1]);
  NllShape s = check_nll(lp, target, "nll_loss");
  int r = reduction_code(a.s("reduction"), "nll_loss");
  int64_t ignore = a.i("ignore_index");
  const int64_t* tp = target.data<int64_t>();
  for (int64_t i = 0; i < s.N * s.S; ++i)
    if (tp[i] != ignore && (tp[i] < 0 || tp[i] >= s.C)) bad_target(tp[i], s, ignore, "nll_loss");
  visit_dtype(lp.dtype(), [&]<typename T>() {
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, Half> ||
                  std::is_same_v<T, BFloat16>) {
      using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
      const T* p = static_cast<const T*>(lp.data_ptr());
      T* o = static_cast<T*>(out[0].data_ptr());
      double total = 0;
      int64_t count = 0;
      for (int64_t n = 0; n < s.N; ++n) {
        for (int64_t k = 0; k < s.S; ++k) {
          int64_t t = tp[n * s.S + k];
          double v = 0;
          if (t != ignore) {
            v = -static_cast<double>(static_cast<C>(p[(n * s.C + t) * s.S + k]));
            ++count;
          }
          if (r == 0) o[n * s.S + k] = T(static_cast<C>(v));
          total += v;
        }
      }
      if (r == 1) total = count == 0 ? std::numeric_limits<double>::quiet_NaN() : total / static_cast<double>(count);
      if (r != 0) o[0] = T(static_cast<C>(total));
    } else {
      KILN_ASSERT(false, "nll_loss on ", dtype_name(lp.dtype()));
    }
  });
}

Tensor nll_loss_backward(const Tensor& g, const Tensor& target, const Shape& input_shape, const Attrs& a) {
  Attrs b = a;
  b.set("input_shape", input_shape);
  return dispatch1(OpId::nll_loss_backward, {g, target}, b);
}
Tensors nll_back(const BackwardCtx& c, TensorSpan g) {
  return {nll_loss_backward(g[0], c.inputs[1], c.input_metas[0].shape, c.attrs), Tensor()};
}

// ---- nll_loss_backward: zeros with -g (scaled) at each target ----
std::vector<TensorMeta> nll_backward_infer(TensorSpan in, const Attrs& a) {
  KILN_CHECK(is_floating(in[0].dtype()), "nll_loss_backward: grad must be floating point");
  return {{a.ints("input_shape"), in[0].dtype(), in[0].device()}};
}
void nll_backward_kernel(TensorSpan in, std::span<Tensor> out, const Attrs& a) {
  Tensor g = cpu::contiguous_nograd(in[0]);
  Tensor target = cpu::contiguous_nograd(in[1]);
  Tensor& o = out[0];
  const Shape& shp = o.shape();
  NllShape s;
  if (shp.size() == 1) {
    s.C = shp[0];
  } else {
    s.N = shp[0];
    s.C = shp[1];
    for (size_t d = 2; d < shp.size(); ++d) s.S *= shp[d];
  }
  int r = reduction_code(a.s("reduction"), "nll_loss_backward");
  int64_t ignore = a.i("ignore_index");
  const int64_t* tp = target.data<int64_t>();
  int64_t count = 0;
  for (int64_t i = 0; i < s.N * s.S; ++i) {
    if (tp[i] == ignore) continue;
    if (tp[i] < 0 || tp[i] >= s.C) bad_target(tp[i], s, ignore, "nll_loss_backward");
    ++count;
  }
  visit_dtype(o.dtype(), [&]<typename T>() {
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, Half> ||
                  std::is_same_v<T, BFloat16>) {
      using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
      T* op = static_cast<T*>(o.data_ptr());
      std::fill(op, op + o.numel(), T(C(0)));
      const T* gp = static_cast<const T*>(g.data_ptr());
      C scale = 1;
      if (r == 1) scale = C(1) / static_cast<C>(count);  // count 0: nothing is written
      for (int64_t n = 0; n < s.N; ++n)
        for (int64_t k = 0; k < s.S; ++k) {
          int64_t t = tp[n * s.S + k];
          if (t == ignore) continue;
          C gv = static_cast<C>(r == 0 ? gp[n * s.S + k] : gp[0]);
          op[(n * s.C + t) * s.S + k] = T(static_cast<C>(-gv * scale));
        }
    } else {
      KILN_ASSERT(false, "nll_loss_backward on ", dtype_name(o.dtype()));
    }
  });
}

// ---- cross_entropy ----
Tensors cross_entropy_dec(TensorSpan in, const Attrs& a) {
  const Tensor& logits = in[0];
  const Tensor& target = in[1];
  KILN_CHECK(logits.dim() >= 1, "cross_entropy: logits must be [C], [N, C] or [N, C, d1, ...], got a 0-dim tensor");
  KILN_CHECK(target.dtype() == DType::Int64, "cross_entropy: target must hold int64 class indices, got ",
             dtype_name(target.dtype()), shape_str(target.shape()),
             "; cast it with .to(DType::Int64) (class-probability targets are not supported)");
  double eps = a.f("label_smoothing");
  KILN_CHECK(eps >= 0.0 && eps <= 1.0, "cross_entropy: label_smoothing must be in [0, 1], got ", eps);
  const std::string& red = a.s("reduction");
  int r = reduction_code(red, "cross_entropy");
  int64_t ignore = a.i("ignore_index");
  int64_t class_dim = logits.dim() == 1 ? 0 : 1;
  check_nll(logits, target, "cross_entropy");
  Tensor lp = log_softmax(logits, class_dim);
  Tensor nll = nll_loss(lp, target, red, ignore);
  if (eps == 0.0) return {nll};
  double C = static_cast<double>(logits.shape()[class_dim]);
  Tensor ignored = eq(target, static_cast<double>(ignore));
  Tensor smooth = where(ignored, scalar_tensor(0.0, lp.dtype()), neg(sum(lp, {class_dim})));
  Tensor ret;
  if (r == 1) ret = div(sum(smooth), sum(logical_not(ignored)));
  else if (r == 2) ret = sum(smooth);
  else ret = smooth;
  return {add(mul(nll, 1.0 - eps), mul(ret, eps / C))};
}

}  // namespace

void register_loss_ops() {
  define_op(kernel_op(OpId::nll_loss, nll_infer, nll_kernel, nll_back, kSaveInputs));
  define_op(kernel_op(OpId::nll_loss_backward, nll_backward_infer, nll_backward_kernel, nullptr, kSaveNone));
  define_op(composite_op(OpId::cross_entropy, cross_entropy_dec));
}

Tensor nll_loss(const Tensor& log_probs, const Tensor& target, const std::string& reduction, int64_t ignore_index) {
  return dispatch1(OpId::nll_loss, {log_probs, target},
                   Attrs().set("reduction", reduction).set("ignore_index", ignore_index));
}
Tensor cross_entropy(const Tensor& logits, const Tensor& target, double label_smoothing,
                     const std::string& reduction) {
  return dispatch1(OpId::cross_entropy, {logits, target},
                   Attrs()
                       .set("label_smoothing", label_smoothing)
                       .set("reduction", reduction)
                       .set("ignore_index", int64_t{-100}));
}

}  // namespace kiln
