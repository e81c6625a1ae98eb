// Reductions, softmax/log_softmax and sum_to against PyTorch goldens
// (tools/goldens/gen_reduce.py) and finite-difference gradients.
#include <omp.h>

#include <cmath>
#include <map>

#include "testing/golden.h"
#include "testing/gradcheck.h"

namespace kiln {
namespace {

using testing::Goldens;
using testing::randn_input;

// GRAD_OK(({inputs...}), expression of v): gradcheck of v -> expression.
#define GRAD_OK(inputs, ...)                                                              \
  do {                                                                                    \
    auto f_ = [&](const std::vector<Tensor>& v) { return Tensor(__VA_ARGS__); };          \
    EXPECT_GRADCHECK(f_, std::vector<Tensor> inputs);                                     \
  } while (0)

const Goldens& G() { return testing::goldens("reduce"); }

const std::map<std::string, std::vector<int64_t>> kDims = {{"all", {}},     {"d0", {0}},     {"d1", {1}},
                                                           {"d2", {2}},     {"dm1", {-1}},   {"d02", {0, 2}},
                                                           {"d12", {1, 2}}};

TEST(Reduce, GoldenAllDimsAndKeepdim) {
  Tensor x = G()["x"];
  for (const std::string base : {"", "t_"}) {
    Tensor t = base.empty() ? x : x.transpose(0, 2);
    ASSERT_EQ(base.empty(), t.is_contiguous());
    for (const auto& [name, dims] : kDims) {
      for (bool keep : {false, true}) {
        std::string k = keep ? "_k" : "";
        SCOPED_TRACE(base + name + k);
        EXPECT_TENSOR_CLOSE(sum(t, dims, keep), G()[base + "sum_" + name + k], 1e-5, 1e-5);
        EXPECT_TENSOR_CLOSE(mean(t, dims, keep), G()[base + "mean_" + name + k], 1e-5, 1e-6);
        EXPECT_TENSOR_CLOSE(amax(t, dims, keep), G()[base + "amax_" + name + k], 0, 0);
        EXPECT_TENSOR_CLOSE(amin(t, dims, keep), G()[base + "amin_" + name + k], 0, 0);
        EXPECT_TENSOR_CLOSE(var(t, dims, 1, keep), G()[base + "var1_" + name + k], 1e-5, 1e-6);
        EXPECT_TENSOR_CLOSE(var(t, dims, 0, keep), G()[base + "var0_" + name + k], 1e-5, 1e-6);
      }
    }
    for (int64_t d = 0; d < 3; ++d) {
      SCOPED_TRACE(base + std::to_string(d));
      EXPECT_TENSOR_CLOSE(argmax(t, d), G()[base + "argmax_" + std::to_string(d)], 0, 0);
      EXPECT_TENSOR_CLOSE(argmax(t, d, true), G()[base + "argmax_" + std::to_string(d) + "_k"], 0, 0);
      EXPECT_TENSOR_CLOSE(softmax(t, d), G()[base + "softmax_" + std::to_string(d)], 1e-5, 1e-6);
      EXPECT_TENSOR_CLOSE(log_softmax(t, d), G()[base + "log_softmax_" + std::to_string(d)], 1e-5, 1e-5);
    }
  }
}

TEST(Reduce, ArgmaxFirstOfTies) {
  Tensor t = G()["ties"];
  EXPECT_EQ(argmax(t, 1).to_vector<int64_t>(), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(argmax(t, 0).to_vector<int64_t>(), (std::vector<int64_t>{1, 0, 0, 1}));
  EXPECT_EQ(argmax(t, 1).dtype(), DType::Int64);
}

TEST(Reduce, NchwChannelReductions) {
  Tensor x4 = G()["x4"];
  EXPECT_TENSOR_CLOSE(sum(x4, {0, 2, 3}), G()["x4_sum_023"], 1e-5, 1e-5);
  EXPECT_TENSOR_CLOSE(mean(x4, {0, 2, 3}), G()["x4_mean_023"], 1e-5, 1e-6);
  EXPECT_TENSOR_CLOSE(var(x4, {0, 2, 3}, 0), G()["x4_var_023"], 1e-5, 1e-6);
  EXPECT_TENSOR_CLOSE(amax(x4, {0, 2, 3}), G()["x4_amax_023"], 0, 0);
  EXPECT_TENSOR_CLOSE(sum(x4, {1, 3}), G()["x4_sum_13"], 1e-5, 1e-5);
}

TEST(Reduce, Float32SumAccuracyOnAMillion) {
  std::vector<float> v(1000000);
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = static_cast<float>(static_cast<double>((i * 7919) % 1000) / 1000.0 + 0.5);
  Tensor big = from_vector(v, {1000000});
  double exact = G()["big_sum"].item();
  // Same result with 1 and 2 threads, and within 1e-6 relative of the exact sum.
  for (int nt : {1, 2}) {
    int prev = omp_get_max_threads();
    omp_set_num_threads(nt);
    double s = sum(big).item();
    omp_set_num_threads(prev);
    EXPECT_NEAR(s, exact, 1e-6 * exact) << nt << " threads";
  }
  EXPECT_NEAR(sum(big).item(), G()["big_sum_f32"].item(), 1e-5 * exact);
  Tensor m = G()["mat"];
  EXPECT_TENSOR_CLOSE(sum(m, {0}), G()["mat_sum_0"], 1e-5, 1e-5);
  EXPECT_TENSOR_CLOSE(sum(m, {1}), G()["mat_sum_1"], 1e-5, 1e-5);
  EXPECT_TENSOR_CLOSE(sum(m.t(), {1}), G()["mat_sum_0"], 1e-5, 1e-5);
  EXPECT_TENSOR_CLOSE(amax(m, {0}), G()["mat_amax_0"], 0, 0);
  EXPECT_TENSOR_CLOSE(softmax(m, 1), G()["mat_softmax_1"], 1e-5, 1e-7);
  EXPECT_TENSOR_CLOSE(log_softmax(m, 0), G()["mat_log_softmax_0"], 1e-5, 1e-5);
}

TEST(Reduce, OuterReductionSplitAcrossThreads) {
  // [R, inner] with few columns and many rows takes the row-split path.
  Generator gen(7);
  Tensor x = randn({200000, 3}, {}, &gen);
  Tensor ref = sum(x.to(DType::Float64), {0});
  EXPECT_TENSOR_CLOSE(sum(x, {0}).to(DType::Float64), ref, 1e-5, 1e-4);
  Tensor xd = x.to(DType::Float64);
  std::vector<double> v = xd.to_vector<double>();
  double m0 = v[0];
  for (size_t i = 0; i < v.size(); i += 3) m0 = std::max(m0, v[i]);
  EXPECT_DOUBLE_EQ(amax(xd, {0}).to_vector<double>()[0], m0);
}

TEST(Reduce, SoftmaxIsStableForLargeLogits) {
  Tensor s = G()["large_logits"];
  EXPECT_TENSOR_CLOSE(softmax(s, 1), G()["large_softmax"], 1e-5, 1e-7);
  EXPECT_TENSOR_CLOSE(log_softmax(s, 1), G()["large_log_softmax"], 1e-5, 1e-4);
  EXPECT_FALSE(std::isnan(softmax(full({1, 3}, 1e30), 1).to_vector<float>()[0]));
}

TEST(Reduce, IntegerAndBoolSums) {
  Tensor xi = G()["xi"];
  EXPECT_TENSOR_CLOSE(sum(xi), G()["xi_sum"], 0, 0);
  EXPECT_TENSOR_CLOSE(sum(xi, {1}), G()["xi_sum_1"], 0, 0);
  EXPECT_TENSOR_CLOSE(amax(xi, {0}), G()["xi_amax_0"], 0, 0);
  EXPECT_TENSOR_CLOSE(sum(G()["xb"], {0}), G()["xb_sum_0"], 0, 0);
  EXPECT_EQ(sum(xi.to(DType::Int32)).dtype(), DType::Int64);
}

TEST(Reduce, HalfPrecisionComputesInFloat) {
  Tensor x = G()["x"];
  Tensor xb = x.to(DType::BFloat16);
  Tensor s = sum(xb, {2});
  EXPECT_EQ(s.dtype(), DType::BFloat16);
  EXPECT_TENSOR_CLOSE(s.to(DType::Float32), sum(xb.to(DType::Float32), {2}), 1e-2, 1e-2);
  EXPECT_TENSOR_CLOSE(softmax(x.to(DType::Float16), 1).to(DType::Float32), softmax(x, 1), 1e-2, 1e-3);
}

TEST(Reduce, EmptyInputs) {
  Tensor e = zeros({0, 3});
  EXPECT_EQ(sum(e, {0}).to_vector<float>(), (std::vector<float>{0, 0, 0}));
  EXPECT_EQ(sum(e).item(), 0.0);
  EXPECT_TRUE(std::isnan(mean(e).item()));
  EXPECT_EQ(amax(e, {1}).shape(), (Shape{0}));
  EXPECT_THROW(amax(e, {0}), Error);
}

TEST(Reduce, Errors) {
  Tensor xi = arange(6).reshape({2, 3});
  try {
    mean(xi);
    FAIL() << "mean of int64 should throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("mean"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("int64"), std::string::npos);
  }
  EXPECT_THROW(var(xi), Error);
  EXPECT_THROW(softmax(xi, 1), Error);
  EXPECT_THROW(sum(G()["x"], {3}), Error);
  EXPECT_THROW(sum(G()["x"], {1, 1}), Error);
  EXPECT_THROW(argmax(G()["x"], 5), Error);
}

TEST(Reduce, NanPropagatesThroughAmaxAmin) {
  for (int64_t at : {0, 5, 13, 20}) {
    std::vector<float> v(21);
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 7);
    v[at] = NAN;
    Tensor t = from_vector(v, {21});
    EXPECT_TRUE(std::isnan(amax(t).item())) << at;
    EXPECT_TRUE(std::isnan(amin(t).item())) << at;
    EXPECT_TRUE(std::isnan(amax(t.reshape({3, 7}), {0}).to_vector<float>()[at % 7])) << at;
    EXPECT_EQ(argmax(t, 0).item(), at);
  }
}

TEST(Reduce, SumTo) {
  Tensor x = G()["x"];  // [4, 5, 6]
  EXPECT_TENSOR_CLOSE(sum_to(x, {5, 6}), sum(x, {0}), 1e-6, 1e-6);
  EXPECT_TENSOR_CLOSE(sum_to(x, {4, 1, 6}), sum(x, {1}, true), 1e-6, 1e-6);
  EXPECT_TENSOR_CLOSE(sum_to(x, {1, 6}), sum(x, {0, 1}).reshape({1, 6}), 1e-5, 1e-6);
  EXPECT_TENSOR_CLOSE(sum_to(x, {}), sum(x), 1e-5, 1e-5);
  EXPECT_EQ(sum_to(x, x.shape()).impl(), x.impl());
  EXPECT_THROW(sum_to(x, {3, 6}), Error);
}

// ---- gradients (float64) ----
TEST(Reduce, GradSumMeanVar) {
  Tensor x = randn_input({3, 4, 5}, 1);
  for (const auto& [name, dims] : kDims) {
    for (bool keep : {false, true}) {
      SCOPED_TRACE(name + (keep ? "_k" : ""));
      GRAD_OK(({x}), sum(v[0], dims, keep));
      GRAD_OK(({x}), mean(v[0], dims, keep));
      GRAD_OK(({x}), var(v[0], dims, 1, keep));
      GRAD_OK(({x}), var(v[0], dims, 0, keep));
    }
  }
  // non-contiguous input
  GRAD_OK(({x}), sum(v[0].transpose(0, 2), {0, 1}));
  GRAD_OK(({x}), var(v[0].transpose(0, 1), {0}));
}

TEST(Reduce, GradAmaxAmin) {
  Tensor x = randn_input({3, 4, 5}, 2);
  for (const auto& [name, dims] : kDims) {
    for (bool keep : {false, true}) {
      SCOPED_TRACE(name);
      GRAD_OK(({x}), amax(v[0], dims, keep));
      GRAD_OK(({x}), amin(v[0], dims, keep));
    }
  }
}

TEST(Reduce, AmaxGradSplitsTies) {
  Tensor x = from_vector(std::vector<double>{1, 3, 3, 0}, {4}).requires_grad_();
  amax(x).backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{0, 0.5, 0.5, 0}));
}

TEST(Reduce, GradSoftmax) {
  Tensor x = randn_input({3, 4, 5}, 3);
  for (int64_t d : {0, 1, 2, -1}) {
    SCOPED_TRACE(d);
    GRAD_OK(({x}), softmax(v[0], d));
    GRAD_OK(({x}), log_softmax(v[0], d));
  }
  GRAD_OK(({x}), log_softmax(v[0].transpose(0, 2), 1));
  // float32 backward matches the float64 one
  Tensor xf = x.detach().to(DType::Float32).requires_grad_();
  Tensor g = G()["x"].slice(0, 0, 3).slice(1, 0, 4).slice(2, 0, 5).contiguous();
  log_softmax(xf, 1).backward(g);
  Tensor xd = x.detach().clone().requires_grad_();
  log_softmax(xd, 1).backward(g.to(DType::Float64));
  EXPECT_TENSOR_CLOSE(xf.grad(), xd.grad().to(DType::Float32), 1e-5, 1e-6);
}

}  // namespace
}  // namespace kiln
