// nn::init and the layers' default initialization: torch's bounds and distributions.
#include <gtest/gtest.h>

#include <cmath>

#include "kiln/kiln.h"
#include "testing/errors.h"

namespace kiln {
namespace {

struct Stats {
  double min, max, mean, var;
};
Stats stats(const Tensor& t) {
  std::vector<double> v = t.to_vector<double>();
  Stats s{1e300, -1e300, 0, 0};
  for (double x : v) {
    s.min = std::min(s.min, x);
    s.max = std::max(s.max, x);
    s.mean += x;
  }
  s.mean /= static_cast<double>(v.size());
  for (double x : v) s.var += (x - s.mean) * (x - s.mean);
  s.var /= static_cast<double>(v.size());
  return s;
}

// Uniform(-b, b): inside the bound, reaching near it, mean 0, variance b^2/3.
void expect_uniform(const Tensor& t, double b) {
  Stats s = stats(t);
  double n = static_cast<double>(t.numel());
  EXPECT_GE(s.min, -b);
  EXPECT_LE(s.max, b);
  EXPECT_LT(s.min, -0.95 * b);
  EXPECT_GT(s.max, 0.95 * b);
  EXPECT_NEAR(s.mean, 0.0, 5 * b / std::sqrt(3 * n));
  EXPECT_NEAR(s.var, b * b / 3, 0.1 * b * b / 3);
}

TEST(Init, FanInOut) {
  EXPECT_EQ(nn::init::fan_in_out(empty({64, 3, 5, 5})), std::make_pair(int64_t{75}, int64_t{1600}));
  EXPECT_EQ(nn::init::fan_in_out(empty({10, 400})), std::make_pair(int64_t{400}, int64_t{10}));
  EXPECT_KILN_ERROR(nn::init::fan_in_out(empty({10})), "at least 2 dimensions", "[10]");
}

TEST(Init, ConvAndLinearDefaultsMatchTorchBounds) {
  manual_seed(0);
  nn::Conv2d conv(nn::Conv2dOptions(16, 64, 3));
  double b = 1.0 / std::sqrt(16.0 * 9.0);  // kaiming_uniform_(a = sqrt(5)) == 1/sqrt(fan_in)
  expect_uniform(conv.weight, b);
  Stats sb = stats(conv.bias);
  EXPECT_GE(sb.min, -b);
  EXPECT_LE(sb.max, b);
  nn::Conv2d grouped(nn::Conv2dOptions(16, 64, 3).groups(4));
  expect_uniform(grouped.weight, 1.0 / std::sqrt(4.0 * 9.0));

  nn::Linear lin(400, 120);
  expect_uniform(lin.weight, 1.0 / 20.0);
  Stats lb = stats(lin.bias);
  EXPECT_GE(lb.min, -0.05);
  EXPECT_LE(lb.max, 0.05);
  EXPECT_GT(lb.max - lb.min, 0.05);  // spread, not constant
}

TEST(Init, BatchNormDefaults) {
  nn::BatchNorm2d bn(5);
  EXPECT_EQ(bn.weight.to_vector<float>(), std::vector<float>(5, 1.0f));
  EXPECT_EQ(bn.bias.to_vector<float>(), std::vector<float>(5, 0.0f));
  EXPECT_EQ(bn.running_mean.to_vector<float>(), std::vector<float>(5, 0.0f));
  EXPECT_EQ(bn.running_var.to_vector<float>(), std::vector<float>(5, 1.0f));
  EXPECT_EQ(bn.num_batches_tracked.dtype(), DType::Int64);
  EXPECT_EQ(bn.num_batches_tracked.dim(), 0);
  EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), 0);
  nn::BatchNorm2d plain(nn::BatchNorm2dOptions(5).affine(false).track_running_stats(false));
  EXPECT_TRUE(plain.state_dict().empty());
}

TEST(Init, Functions) {
  Generator gen(42);
  Tensor w = empty({256, 128});
  nn::init::kaiming_uniform_(w, 0.0, &gen);  // gain sqrt(2): bound sqrt(6 / fan_in)
  expect_uniform(w, std::sqrt(6.0 / 128));
  nn::init::kaiming_normal_(w, 0.0, &gen);
  Stats s = stats(w);
  EXPECT_NEAR(s.mean, 0.0, 0.01);
  EXPECT_NEAR(std::sqrt(s.var), std::sqrt(2.0 / 128), 0.02 * std::sqrt(2.0 / 128));
  nn::init::normal_(w, 3.0, 0.5, &gen);
  s = stats(w);
  EXPECT_NEAR(s.mean, 3.0, 0.01);
  EXPECT_NEAR(std::sqrt(s.var), 0.5, 0.01);
  nn::init::uniform_(w, 2.0, 4.0, &gen);
  s = stats(w);
  EXPECT_GE(s.min, 2.0);
  EXPECT_LE(s.max, 4.0);
  nn::init::constant_(w, 0.25);
  EXPECT_EQ(stats(w).min, 0.25);
  EXPECT_EQ(stats(w).max, 0.25);
  // Same seed, same values; float64 works; parameters (requires_grad) can be filled.
  Generator g1(5), g2(5);
  Tensor a = empty({10, 10}, dtype(DType::Float64)).requires_grad_(), b2 = empty({10, 10}, dtype(DType::Float64));
  nn::init::kaiming_uniform_(a, std::sqrt(5.0), &g1);
  nn::init::kaiming_uniform_(b2, std::sqrt(5.0), &g2);
  EXPECT_EQ(a.to_vector<double>(), b2.to_vector<double>());
  EXPECT_FALSE(a.grad_fn());
  Tensor i = zeros({3}, dtype(DType::Int64));
  EXPECT_KILN_ERROR(nn::init::uniform_(i, 0, 1), "floating-point", "int64");
  EXPECT_KILN_ERROR(nn::init::uniform_(w, 1, 0), "low");
}

}  // namespace
}  // namespace kiln
