#include "testing/gradcheck.h"

#include <cmath>

namespace kiln::testing {

namespace {
double loss_value(const TensorFn& f, const std::vector<Tensor>& inputs, const Tensor& r) {
  NoGradGuard ng;
  return sum(mul(f(inputs).to(DType::Float64), r)).item();
}
}  // namespace

::testing::AssertionResult gradcheck(const TensorFn& f, const std::vector<Tensor>& inputs, double eps, double atol,
                                     double rtol) {
  std::vector<Tensor> xs;
  for (const Tensor& x : inputs) {
    Tensor c = x.detach().clone();
    if (x.requires_grad()) c.requires_grad_(true);
    xs.push_back(c);
  }
  Tensor out = f(xs);
  Generator gen(1234);
  Tensor r = randn(out.shape(), dtype(DType::Float64), &gen);
  Tensor loss = sum(mul(out.to(DType::Float64), r));
  loss.backward();
  for (size_t k = 0; k < xs.size(); ++k) {
    if (!xs[k].requires_grad()) continue;
    Tensor g = xs[k].grad();
    if (!g.defined()) return ::testing::AssertionFailure() << "input " << k << " got no gradient";
    std::vector<double> analytic = g.to_vector<double>();
    Tensor base = xs[k].detach();
    Tensor flat = base.contiguous();
    KILN_CHECK(flat.shares_storage(base), "gradcheck needs contiguous inputs");
    double* p = flat.data<double>();
    for (int64_t i = 0; i < flat.numel(); ++i) {
      double orig = p[i];
      p[i] = orig + eps;
      double lp = loss_value(f, xs, r);
      p[i] = orig - eps;
      double lm = loss_value(f, xs, r);
      p[i] = orig;
      double numeric = (lp - lm) / (2 * eps);
      double err = std::abs(numeric - analytic[i]);
      if (!(err <= atol + rtol * std::abs(numeric)))
        return ::testing::AssertionFailure() << "input " << k << " element " << i << ": backward gives "
                                             << analytic[i] << ", finite differences give " << numeric;
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace kiln::testing
