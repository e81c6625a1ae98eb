// nn::init: torch.nn.init's fills, in place under NoGradGuard. Random draws
// come from kiln's Philox generator, so the values differ from torch's but
// the distributions are the same.
#include <cmath>

#include "kiln/nn.h"

namespace kiln::nn::init {

namespace {
void check_tensor(const Tensor& t, const char* fn) {
  KILN_CHECK(t.defined(), "init::", fn, ": the tensor is undefined");
  KILN_CHECK(t.is_floating_point(), "init::", fn, ": needs a floating-point tensor, got ", dtype_name(t.dtype()));
}
// Random values are drawn in float64 for float64 tensors, float32 otherwise.
DType draw_dtype(const Tensor& t) { return t.dtype() == DType::Float64 ? DType::Float64 : DType::Float32; }

double leaky_relu_gain(double a) { return std::sqrt(2.0 / (1.0 + a * a)); }
}  // namespace

std::pair<int64_t, int64_t> fan_in_out(const Tensor& w) {
  KILN_CHECK(w.defined() && w.dim() >= 2, "init::fan_in_out: fan in and fan out need a weight with at least 2 ",
             "dimensions [out, in, ...], got ", w.defined() ? shape_str(w.shape()) : std::string("an undefined tensor"));
  int64_t receptive = 1;
  for (int64_t d = 2; d < w.dim(); ++d) receptive *= w.size(d);
  return {w.size(1) * receptive, w.size(0) * receptive};
}

void uniform_(Tensor& t, double low, double high, Generator* gen) {
  check_tensor(t, "uniform_");
  KILN_CHECK(low <= high, "init::uniform_: low (", low, ") must not exceed high (", high, ")");
  if (t.numel() == 0) return;
  NoGradGuard no_grad;
  Tensor r = rand(t.shape(), dtype(draw_dtype(t)), gen);
  copy_(t, add(mul(r, high - low), low));
}

void normal_(Tensor& t, double mean, double std, Generator* gen) {
  check_tensor(t, "normal_");
  KILN_CHECK(std >= 0, "init::normal_: std must be >= 0, got ", std);
  if (t.numel() == 0) return;
  NoGradGuard no_grad;
  Tensor r = randn(t.shape(), dtype(draw_dtype(t)), gen);
  copy_(t, add(mul(r, std), mean));
}

void constant_(Tensor& t, double value) {
  check_tensor(t, "constant_");
  NoGradGuard no_grad;
  fill_(t, value);
}

void kaiming_uniform_(Tensor& t, double a, Generator* gen) {
  check_tensor(t, "kaiming_uniform_");
  if (t.numel() == 0) return;  // torch warns and leaves it
  int64_t fan = fan_in_out(t).first;
  KILN_CHECK(fan > 0, "init::kaiming_uniform_: fan_in is 0 for shape ", shape_str(t.shape()));
  double bound = std::sqrt(3.0) * leaky_relu_gain(a) / std::sqrt(static_cast<double>(fan));
  uniform_(t, -bound, bound, gen);
}

void kaiming_normal_(Tensor& t, double a, Generator* gen) {
  check_tensor(t, "kaiming_normal_");
  if (t.numel() == 0) return;
  int64_t fan = fan_in_out(t).first;
  KILN_CHECK(fan > 0, "init::kaiming_normal_: fan_in is 0 for shape ", shape_str(t.shape()));
  normal_(t, 0.0, leaky_relu_gain(a) / std::sqrt(static_cast<double>(fan)), gen);
}

}  // namespace kiln::nn::init
