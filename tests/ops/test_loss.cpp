// nll_loss and cross_entropy against PyTorch goldens (tools/goldens/gen_reduce.py),
// gradients against finite differences, and the error messages.
#include <cmath>

#include "testing/golden.h"
#include "testing/gradcheck.h"

namespace kiln {
namespace {

using testing::Goldens;

const Goldens& G() { return testing::goldens("loss"); }

Tensor weights_like(const Tensor& out) {
  // The generator weights the outputs with arange * 0.1 + 1 before backward.
  return add(mul(arange(0, static_cast<double>(out.numel()), 1, dtype(DType::Float32)), 0.1), 1.0).reshape(out.shape());
}

TEST(Loss, GoldenNllAndCrossEntropy) {
  for (const std::string tag : {"", "3_"}) {
    Tensor logits = G()[tag.empty() ? "logits" : "logits3"];
    Tensor target = G()[tag.empty() ? "target" : "target3"];
    Tensor lp = log_softmax(logits, 1);
    for (const std::string red : {"mean", "sum", "none"}) {
      SCOPED_TRACE(tag + red);
      EXPECT_TENSOR_CLOSE(nll_loss(lp, target, red), G()[tag + "nll_" + red], 1e-5, 1e-6);
      for (int ls : {0, 2}) {
        SCOPED_TRACE(ls);
        std::string name = tag + "ce_" + red + "_ls" + std::to_string(ls);
        Tensor x = logits.detach().clone().requires_grad_();
        Tensor out = cross_entropy(x, target, ls / 10.0, red);
        EXPECT_TENSOR_CLOSE(out, G()[name], 1e-5, 1e-6);
        out.backward(weights_like(out));
        EXPECT_TENSOR_CLOSE(x.grad(), G()[name + "_grad"], 1e-5, 1e-6);
      }
    }
    std::vector<int64_t> tv = target.to_vector<int64_t>();
    for (int64_t& e : tv) e = std::max<int64_t>(e, 0);
    Tensor t0 = from_vector(tv, target.shape());
    EXPECT_TENSOR_CLOSE(nll_loss(lp, t0, "mean", 1), G()[tag + "nll_ignore1"], 1e-5, 1e-6);
  }
}

TEST(Loss, OneDimensionalInput) {
  Tensor lp = log_softmax(from_vector(std::vector<float>{1, 2, 3}, {3}), 0);
  Tensor t = from_vector(std::vector<int64_t>{2}, {});
  EXPECT_NEAR(nll_loss(lp, t).item(), -lp.to_vector<float>()[2], 1e-6);
  EXPECT_NEAR(cross_entropy(from_vector(std::vector<float>{1, 2, 3}, {3}), t).item(), -lp.to_vector<float>()[2], 1e-6);
}

TEST(Loss, AllIgnoredMeanIsNan) {
  Tensor lp = log_softmax(ones({2, 3}), 1);
  Tensor t = from_vector(std::vector<int64_t>{-100, -100}, {2});
  EXPECT_TRUE(std::isnan(nll_loss(lp, t).item()));
  EXPECT_EQ(nll_loss(lp, t, "sum").item(), 0.0);
}

TEST(Loss, Gradients) {
  Generator gen(4);
  Tensor logits = randn({6, 5}, dtype(DType::Float64), &gen).requires_grad_();
  Tensor target = from_vector(std::vector<int64_t>{0, 4, -100, 2, 2, 1}, {6});
  Tensor logits3 = randn({3, 4, 2, 2}, dtype(DType::Float64), &gen).requires_grad_();
  Tensor target3 = randint(0, 4, {3, 2, 2}, dtype(DType::Int64), &gen);
  for (const std::string red : {"mean", "sum", "none"}) {
    for (double ls : {0.0, 0.2}) {
      SCOPED_TRACE(red + std::to_string(ls));
      auto ce = [&](const std::vector<Tensor>& v) { return cross_entropy(v[0], target, ls, red); };
      EXPECT_GRADCHECK(ce, std::vector<Tensor>{logits});
      auto ce3 = [&](const std::vector<Tensor>& v) { return cross_entropy(v[0], target3, ls, red); };
      EXPECT_GRADCHECK(ce3, std::vector<Tensor>{logits3});
    }
    auto nll = [&](const std::vector<Tensor>& v) { return nll_loss(v[0], target, red); };
    EXPECT_GRADCHECK(nll, std::vector<Tensor>{logits});
  }
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Loss, Errors) {
  Tensor lp = log_softmax(ones({2, 3}), 1);
  std::string m = message_of([&] { nll_loss(lp, from_vector(std::vector<int64_t>{0, 3}, {2})); });
  EXPECT_NE(m.find("nll_loss"), std::string::npos) << m;
  EXPECT_NE(m.find("out of range"), std::string::npos) << m;
  m = message_of([&] { cross_entropy(ones({2, 3}), from_vector(std::vector<int64_t>{-1, 0}, {2})); });
  EXPECT_NE(m.find("out of range"), std::string::npos) << m;
  m = message_of([&] { cross_entropy(ones({2, 3}), from_vector(std::vector<float>{0, 1}, {2})); });
  EXPECT_NE(m.find("int64"), std::string::npos) << m;
  m = message_of([&] { nll_loss(lp, from_vector(std::vector<int64_t>{0, 1, 2}, {3})); });
  EXPECT_NE(m.find("[2, 3]"), std::string::npos) << m;
  EXPECT_NE(m.find("[3]"), std::string::npos) << m;
  EXPECT_THROW(nll_loss(lp, from_vector(std::vector<int64_t>{0, 1}, {2}), "average"), Error);
  EXPECT_THROW(cross_entropy(ones({2, 3}), from_vector(std::vector<int64_t>{0, 1}, {2}), 1.5), Error);
}

}  // namespace
}  // namespace kiln
