#include "testing/gradcheck.h"

#include <cmath>

#include "testing/compare.h"

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
    std::vector<double> numeric(static_cast<size_t>(flat.numel()));
    int64_t bad = 0;
    for (int64_t i = 0; i < flat.numel(); ++i) {
      double orig = p[i];
      p[i] = orig + eps;
      double lp = loss_value(f, xs, r);
      p[i] = orig - eps;
      double lm = loss_value(f, xs, r);
      p[i] = orig;
      numeric[i] = (lp - lm) / (2 * eps);
      if (!(std::abs(numeric[i] - analytic[i]) <= atol + rtol * std::abs(numeric[i]))) ++bad;
    }
    if (bad > 0)
      return ::testing::AssertionFailure() << "input " << k << ": " << bad << " of " << numeric.size()
                                           << " gradient elements differ from finite differences (atol " << atol
                                           << ", rtol " << rtol << "); backward against finite differences: "
                                           << tensor_error(analytic, numeric, base.shape()).str();
  }
  return ::testing::AssertionSuccess();
}

}  // namespace kiln::testing
