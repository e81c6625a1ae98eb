// Tensor methods mirror the free functions of ops.h (x.mean({2, 3}, true) is
// mean(x, {2, 3}, true)).
#include <gtest/gtest.h>

#include "kiln/kiln.h"
#include "testing/compare.h"

namespace kiln {
namespace {

Tensor sample(uint64_t seed = 1, const Shape& shape = {2, 3, 4, 5}) {
  Generator g(seed);
  return randn(shape, {}, &g);
}

TEST(TensorMethods, ReductionsTakeDimsAndKeepdim) {
  Tensor x = sample();
  EXPECT_TENSOR_CLOSE(x.mean({2, 3}, true), mean(x, {2, 3}, true), 0, 0);
  EXPECT_EQ(x.mean({2, 3}, true).shape(), (Shape{2, 3, 1, 1}));
  EXPECT_TENSOR_CLOSE(x.sum({1}), sum(x, {1}), 0, 0);
  EXPECT_TENSOR_CLOSE(x.sum(), sum(x), 0, 0);
  EXPECT_TENSOR_CLOSE(x.mean(), mean(x), 0, 0);
  EXPECT_TENSOR_CLOSE(x.amax({0, 2}), amax(x, {0, 2}), 0, 0);
  EXPECT_TENSOR_CLOSE(x.amin({-1}, true), amin(x, {-1}, true), 0, 0);
  EXPECT_TENSOR_CLOSE(x.var({3}, 0), var(x, {3}, 0), 0, 0);
  EXPECT_TENSOR_CLOSE(x.argmax(1), argmax(x, 1), 0, 0);
  EXPECT_TENSOR_CLOSE(x.softmax(1), softmax(x, 1), 0, 0);
  EXPECT_TENSOR_CLOSE(x.log_softmax(-1), log_softmax(x, -1), 0, 0);
}

TEST(TensorMethods, PointwiseAndLinearAlgebra) {
  Tensor x = sample(1, {3, 4}), y = sample(2, {3, 4});
  Tensor pos = x.abs().add(0.5);
  EXPECT_TENSOR_CLOSE(x.add(y), add(x, y), 0, 0);
  EXPECT_TENSOR_CLOSE(x.sub(2.0), sub(x, 2.0), 0, 0);
  EXPECT_TENSOR_CLOSE(x.mul(y), mul(x, y), 0, 0);
  EXPECT_TENSOR_CLOSE(x.div(3.0), div(x, 3.0), 0, 0);
  EXPECT_TENSOR_CLOSE(pos.pow(1.5), pow(pos, 1.5), 0, 0);
  EXPECT_TENSOR_CLOSE(pos.pow(y), pow(pos, y), 0, 0);
  EXPECT_TENSOR_CLOSE(x.maximum(y), maximum(x, y), 0, 0);
  EXPECT_TENSOR_CLOSE(x.minimum(y), minimum(x, y), 0, 0);
  EXPECT_TENSOR_CLOSE(x.neg(), neg(x), 0, 0);
  EXPECT_TENSOR_CLOSE(pos.sqrt(), sqrt(pos), 0, 0);
  EXPECT_TENSOR_CLOSE(pos.rsqrt(), rsqrt(pos), 0, 0);
  EXPECT_TENSOR_CLOSE(pos.log(), log(pos), 0, 0);
  EXPECT_TENSOR_CLOSE(x.exp(), exp(x), 0, 0);
  EXPECT_TENSOR_CLOSE(x.sign(), sign(x), 0, 0);
  EXPECT_TENSOR_CLOSE(x.relu(), relu(x), 0, 0);
  EXPECT_TENSOR_CLOSE(x.gelu("tanh"), gelu(x, "tanh"), 0, 0);
  EXPECT_TENSOR_CLOSE(x.sigmoid(), sigmoid(x), 0, 0);
  EXPECT_TENSOR_CLOSE(x.tanh(), tanh(x), 0, 0);
  EXPECT_TENSOR_CLOSE(x.clamp(-0.5, 0.5), clamp(x, -0.5, 0.5), 0, 0);
  EXPECT_TENSOR_CLOSE(x.clamp(std::nullopt, 0.0), clamp(x, std::nullopt, 0.0), 0, 0);
  EXPECT_TENSOR_CLOSE(x.gt(y), gt(x, y), 0, 0);
  EXPECT_TENSOR_CLOSE(x.le(0.0), le(x, 0.0), 0, 0);
  EXPECT_TENSOR_CLOSE(x.eq(x), eq(x, x), 0, 0);
  EXPECT_TENSOR_CLOSE(x.ne(1.0).logical_not(), logical_not(ne(x, 1.0)), 0, 0);
  EXPECT_TENSOR_CLOSE(x.matmul(y.t()), matmul(x, y.t()), 0, 0);
  Tensor idx = from_vector(std::vector<int64_t>{2, 0}, {2});
  EXPECT_TENSOR_CLOSE(x.index_select(0, idx), index_select(x, 0, idx), 0, 0);
  Tensor gidx = zeros({3, 1}, dtype(DType::Int64));
  EXPECT_TENSOR_CLOSE(x.gather(1, gidx), gather(x, 1, gidx), 0, 0);
  EXPECT_EQ(x.view_as(zeros({12})).shape(), (Shape{12}));
  EXPECT_EQ(zeros({1, 4}).expand_as(x).shape(), (Shape{3, 4}));
}

TEST(TensorMethods, RecordAutograd) {
  Tensor w = sample(3, {4});
  w.requires_grad_();
  w.mul(2.0).sigmoid().mean().backward();
  Tensor s = sigmoid(mul(w.detach(), 2.0));
  EXPECT_TENSOR_CLOSE(w.grad(), mul(mul(s, 1.0 - s), 0.5), 1e-6, 1e-7);
}

}  // namespace
}  // namespace kiln
