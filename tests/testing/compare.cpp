#include "testing/compare.h"

#include <cmath>
#include <limits>
#include <sstream>

namespace kiln::testing {

namespace {
Shape unflatten(int64_t flat, const Shape& shape) {
  Shape idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = shape[d] > 0 ? flat % shape[d] : 0;
    flat = shape[d] > 0 ? flat / shape[d] : 0;
  }
  return idx;
}
bool same_special(double a, double e) { return (std::isnan(a) && std::isnan(e)) || (std::isinf(a) && a == e); }
}  // namespace

TensorError tensor_error(const std::vector<double>& a, const std::vector<double>& e, const Shape& shape) {
  KILN_CHECK(a.size() == e.size(), "tensor_error: ", a.size(), " values against ", e.size());
  TensorError r;
  r.count = static_cast<int64_t>(a.size());
  int64_t abs_i = -1, rel_i = -1;
  const double inf = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < a.size(); ++i) {
    if (same_special(a[i], e[i])) continue;
    double err = std::abs(a[i] - e[i]);
    if (std::isnan(err)) err = inf;
    double rel = err == 0 ? 0 : e[i] == 0 ? inf : err / std::abs(e[i]);
    if (abs_i < 0 || err > r.max_abs) r.max_abs = err, abs_i = static_cast<int64_t>(i);
    if (rel_i < 0 || rel > r.max_rel) r.max_rel = rel, rel_i = static_cast<int64_t>(i);
  }
  if (abs_i >= 0) {
    r.max_abs_index = unflatten(abs_i, shape);
    r.actual_at_abs = a[abs_i];
    r.expected_at_abs = e[abs_i];
  }
  if (rel_i >= 0) r.max_rel_index = unflatten(rel_i, shape);
  return r;
}

TensorError tensor_error(const Tensor& actual, const Tensor& expected) {
  KILN_CHECK(actual.shape() == expected.shape(), "tensor_error: shape ", shape_str(actual.shape()),
             " against expected ", shape_str(expected.shape()));
  return tensor_error(actual.to_vector<double>(), expected.to_vector<double>(), actual.shape());
}

std::string TensorError::str() const {
  std::ostringstream os;
  os.precision(9);
  os << "max abs error " << max_abs << " at " << shape_str(max_abs_index) << " (" << actual_at_abs << " vs expected "
     << expected_at_abs << "), max rel error " << max_rel << " at " << shape_str(max_rel_index);
  return os.str();
}

::testing::AssertionResult tensors_close(const Tensor& actual, const Tensor& expected, double rtol, double atol) {
  if (!actual.defined() || !expected.defined()) return ::testing::AssertionFailure() << "undefined tensor";
  if (actual.shape() != expected.shape())
    return ::testing::AssertionFailure() << "shape " << shape_str(actual.shape()) << " != expected "
                                         << shape_str(expected.shape());
  if (actual.dtype() != expected.dtype())
    return ::testing::AssertionFailure() << "dtype " << dtype_name(actual.dtype()) << " != expected "
                                         << dtype_name(expected.dtype());
  std::vector<double> a = actual.to_vector<double>(), e = expected.to_vector<double>();
  int64_t bad = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (same_special(a[i], e[i])) continue;
    if (!(std::abs(a[i] - e[i]) <= atol + rtol * std::abs(e[i]))) ++bad;
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << a.size() << " elements differ (rtol " << rtol << ", atol "
                                       << atol << "); " << tensor_error(a, e, actual.shape()).str();
}

double scaled_error(const Tensor& actual, const Tensor& expected) {
  Tensor a = actual.detach().to(Device::cpu()).to(DType::Float64);
  Tensor e = expected.detach().to(Device::cpu()).to(DType::Float64);
  const double err = amax(abs(sub(a, e))).item(), scale = amax(abs(e)).item();
  return scale > 0 ? err / scale : err;
}

}  // namespace kiln::testing
