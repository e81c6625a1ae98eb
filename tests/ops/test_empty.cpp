// Tensors with no elements through the ops a training step uses: every op
// returns torch's shape (and its value where one is defined) instead of
// crashing. Found by a new user's test: an in-place add on a [0] parameter
// died of SIGFPE in the CPU loop's index arithmetic, and an empty
// channels-last tensor could not be made.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kiln/kiln.h"

namespace kiln {
namespace {

const std::vector<Shape> kEmptyShapes = {{0}, {3, 0}, {0, 4}, {2, 0, 3, 3}, {0, 3, 2, 2}};

TEST(EmptyTensors, PointwiseAndInPlaceOpsKeepTheShape) {
  for (const Shape& s : kEmptyShapes) {
    SCOPED_TRACE(shape_str(s));
    Tensor a = randn(s), b = randn(s);
    for (Tensor* r : {&add_(a, b), &mul_(a, b), &mul_(a, 2.0), &fill_(a, 1.0), &copy_(a, b), &addcmul_(a, b, b),
                      &addcdiv_(a, b, b), &lerp_(a, b, 0.3), &a.zero_()})
      EXPECT_EQ(r->shape(), s);
    for (const Tensor& r : {add(a, b), exp(a), relu(a), gelu(a), sigmoid(a), tanh(a), pow(a, 2.0), clamp(a, -1.0, 1.0),
                            where(gt(a, 0.0), a, b), a.clone(), a.to(DType::BFloat16), a.to(DType::Float64),
                            a.to(DType::Int64), softmax(a, -1), log_softmax(a, -1)})
      EXPECT_EQ(r.shape(), s);
    EXPECT_EQ(cat({a, b}, 0).shape()[0], 2 * s[0]);
  }
}

TEST(EmptyTensors, ReductionsGiveTorchsValues) {
  Tensor e = randn({3, 0});
  EXPECT_EQ(sum(e).item(), 0.0);
  EXPECT_TRUE(std::isnan(mean(e).item()));
  Tensor rows = sum(e, {1});
  ASSERT_EQ(rows.shape(), (Shape{3}));
  EXPECT_TRUE(allclose(rows, zeros({3}), 0, 0));
  EXPECT_EQ(sum(e, {0}).shape(), (Shape{0}));
  EXPECT_EQ(amax(e, {0}).shape(), (Shape{0}));
  // The maximum of no elements is undefined: an error naming the dim, as torch.
  EXPECT_THROW(amax(e, {1}), Error);
}

TEST(EmptyTensors, ChannelsLastAndMatmul) {
  for (const Shape& s : {Shape{2, 0, 3, 3}, Shape{0, 3, 2, 2}, Shape{2, 3, 0, 4}}) {
    SCOPED_TRACE(shape_str(s));
    Tensor cl = contiguous(randn(s), MemoryFormat::ChannelsLast);
    EXPECT_EQ(cl.shape(), s);
    EXPECT_TRUE(is_contiguous(cl, MemoryFormat::ChannelsLast));
    EXPECT_TRUE(is_contiguous(cl, MemoryFormat::Contiguous));
  }
  Tensor z = matmul(randn({4, 0}), randn({0, 5}));
  EXPECT_TRUE(allclose(z, zeros({4, 5}), 0, 0));
  EXPECT_EQ(matmul(randn({0, 3}), randn({3, 5})).shape(), (Shape{0, 5}));
  EXPECT_EQ(linear(randn({0, 3}), randn({5, 3}), randn({5})).shape(), (Shape{0, 5}));
  EXPECT_EQ(max_pool2d(randn({0, 3, 4, 4}), {2, 2}, {2, 2}).shape(), (Shape{0, 3, 2, 2}));
}

// An empty parameter (a zero-width layer) trains with the others: its grad
// is empty and every optimizer steps over it.
TEST(EmptyTensors, BackwardAndOptimizersStepOverAnEmptyParameter) {
  Tensor w = randn({4}).requires_grad_(true);
  Tensor e = randn({0}).requires_grad_(true);
  add(sum(mul(w, w)), sum(exp(e))).backward();
  ASSERT_TRUE(e.grad().defined());
  EXPECT_EQ(e.grad().shape(), (Shape{0}));
  const Tensor w0 = w.detach().clone();
  optim::SGD sgd({w, e}, optim::SGDOptions(0.1).momentum(0.9).weight_decay(1e-4).nesterov(true));
  sgd.step();
  sgd.step();
  optim::AdamW adam({w, e}, optim::AdamWOptions(0.1));
  adam.step();
  EXPECT_EQ(e.shape(), (Shape{0}));
  EXPECT_FALSE(allclose(w.detach(), w0, 0, 0)) << "the non-empty parameter still steps";
}

}  // namespace
}  // namespace kiln
