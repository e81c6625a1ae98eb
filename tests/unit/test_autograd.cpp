// The autograd tape and backward engine: scalar backward, accumulation,
// retain_graph, detach, no-grad mode, leaf rules, diamonds, view gradients,
// grads that must not alias, and in-place ops on tensors that require grad.
#include <cmath>

#include <gtest/gtest.h>

#include "autograd/node.h"
#include "kiln/kiln.h"
#include "testing/errors.h"
#include "testing/gradcheck.h"

namespace kiln {
namespace {

Tensor leaf(std::vector<double> v, const Shape& shape) {
  Tensor t = from_vector(v, shape);
  t.requires_grad_();
  return t;
}
std::vector<double> grad_of(const Tensor& t) {
  EXPECT_TRUE(t.grad().defined());
  return t.grad().defined() ? t.grad().to_vector<double>() : std::vector<double>{};
}
// Random float64 leaf for gradcheck.
Tensor rnd(const Shape& shape, uint64_t seed = 1) {
  Generator g(seed);
  Tensor t = randn(shape, dtype(DType::Float64), &g);
  t.requires_grad_();
  return t;
}

template <typename... T>
std::vector<Tensor> ins(T... t) {
  return {t...};
}

TEST(Autograd, RecordsGraph) {
  Tensor x = leaf({1, 2, 3}, {3});
  EXPECT_TRUE(x.is_leaf());
  EXPECT_TRUE(x.requires_grad());
  EXPECT_FALSE(x.grad_fn());
  Tensor y = mul(x, 2.0);
  EXPECT_FALSE(y.is_leaf());
  EXPECT_TRUE(y.requires_grad());
  ASSERT_TRUE(y.grad_fn());
  EXPECT_STREQ(y.grad_fn()->name(), "mul");
  Tensor c = from_vector(std::vector<double>{1, 1, 1}, {3});
  EXPECT_FALSE(mul(c, 2.0).requires_grad());  // nothing to differentiate
  EXPECT_FALSE(gt(x, 1.5).requires_grad());   // bool output: no grad_fn
}

TEST(Autograd, BackwardOnScalar) {
  Tensor x = leaf({1, 2, 3}, {3});
  Tensor y = sum(mul(x, x));
  EXPECT_EQ(y.dim(), 0);
  y.backward();
  EXPECT_EQ(grad_of(x), (std::vector<double>{2, 4, 6}));
  EXPECT_EQ(x.grad().shape(), x.shape());
  EXPECT_EQ(x.grad().dtype(), DType::Float64);
}

TEST(Autograd, OneElementNonScalarGetsImplicitGrad) {
  Tensor x = leaf({3}, {1});
  mul(x, x).backward();
  EXPECT_EQ(grad_of(x), (std::vector<double>{6}));
}

TEST(Autograd, GradientsAccumulateAcrossBackwardCalls) {
  Tensor x = leaf({1, 2, 3}, {3});
  sum(mul(x, x)).backward();
  sum(mul(x, x)).backward();
  EXPECT_EQ(grad_of(x), (std::vector<double>{4, 8, 12}));
  // zeroing the grad in place starts over
  x.grad().zero_();
  sum(mul(x, 3.0)).backward();
  EXPECT_EQ(grad_of(x), (std::vector<double>{3, 3, 3}));
}

TEST(Autograd, RetainGraph) {
  Tensor x = leaf({1, 2, 3}, {3});
  Tensor y = sum(mul(x, x));
  y.backward(Tensor(), /*retain_graph=*/true);
  y.backward();
  EXPECT_EQ(grad_of(x), (std::vector<double>{4, 8, 12}));
  EXPECT_KILN_ERROR(y.backward(), "retain_graph");
}

TEST(Autograd, SecondBackwardWithoutRetainGraphThrows) {
  Tensor x = leaf({1, 2, 3}, {3});
  Tensor y = sum(exp(mul(x, x)));
  y.backward();
  EXPECT_KILN_ERROR(y.backward(), "retain_graph");
}

TEST(Autograd, DetachStopsGradients) {
  Tensor x = leaf({1, 2, 3}, {3});
  Tensor d = x.detach();
  EXPECT_FALSE(d.requires_grad());
  EXPECT_TRUE(d.is_leaf());
  EXPECT_TRUE(d.shares_storage(x));
  sum(mul(d, x)).backward();
  EXPECT_EQ(grad_of(x), (std::vector<double>{1, 2, 3}));  // not 2x
  Tensor y = mul(x, 2.0).detach();
  EXPECT_FALSE(y.requires_grad());
  EXPECT_FALSE(y.grad_fn());
}

TEST(Autograd, NoGradGuardRecordsNothing) {
  Tensor x = leaf({1, 2, 3}, {3});
  EXPECT_TRUE(grad_mode_enabled());
  {
    NoGradGuard ng;
    EXPECT_FALSE(grad_mode_enabled());
    Tensor y = sum(mul(x, x));
    EXPECT_FALSE(y.requires_grad());
    EXPECT_FALSE(y.grad_fn());
    Tensor v = x.view({3, 1});
    EXPECT_FALSE(v.grad_fn());
    {
      NoGradGuard nested;
      EXPECT_FALSE(grad_mode_enabled());
    }
    EXPECT_FALSE(grad_mode_enabled());
    EXPECT_KILN_ERROR(y.backward(), "backward", "requires_grad");
  }
  EXPECT_TRUE(grad_mode_enabled());
  EXPECT_TRUE(mul(x, x).requires_grad());
}

TEST(Autograd, RequiresGradOnIntTensorThrows) {
  Tensor i = from_vector(std::vector<int64_t>{1, 2}, {2});
  EXPECT_KILN_ERROR(i.requires_grad_(), "requires_grad", "int64");
  Tensor b = Tensor::empty({2}, DType::Bool);
  EXPECT_THROW(b.requires_grad_(), Error);
  EXPECT_NO_THROW(i.requires_grad_(false));
  EXPECT_NO_THROW(Tensor::empty({2}, DType::Float16).requires_grad_());
}

TEST(Autograd, RequiresGradOnNonLeafThrows) {
  Tensor x = leaf({1, 2}, {2});
  Tensor y = mul(x, 2.0);
  EXPECT_KILN_ERROR(y.requires_grad_(), "requires_grad", "leaf", "detach");
  EXPECT_NO_THROW(y.detach().requires_grad_());
}

TEST(Autograd, BackwardOnNonScalarNeedsGrad) {
  Tensor x = leaf({1, 2, 3}, {3});
  Tensor y = mul(x, 2.0);
  EXPECT_KILN_ERROR(y.backward(), "backward", "[3]");
  EXPECT_KILN_ERROR(y.backward(from_vector(std::vector<double>{1, 1}, {2})), "backward", "[2]", "[3]");
  y.backward(from_vector(std::vector<double>{1, 10, 100}, {3}));
  EXPECT_EQ(grad_of(x), (std::vector<double>{2, 20, 200}));
}

TEST(Autograd, BackwardOnTensorWithoutGradThrows) {
  Tensor c = from_vector(std::vector<double>{1, 2}, {2});
  EXPECT_KILN_ERROR(sum(c).backward(), "backward");
}

TEST(Autograd, DiamondSumsGradients) {
  Tensor x = leaf({0.5, 1.0, 2.0}, {3});
  Tensor a = mul(x, 3.0);
  Tensor b = exp(x);
  Tensor y = sum(add(a, b));
  y.backward();
  std::vector<double> g = grad_of(x);
  ASSERT_EQ(g.size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(g[i], 3.0 + std::exp(x.to_vector<double>()[i]), 1e-12);
}

TEST(Autograd, SameTensorUsedTwiceInOneOp) {
  Tensor x = leaf({1, 2, 3}, {3});
  Tensor h = mul(x, 2.0);
  sum(mul(h, h)).backward();  // d/dx (2x)^2 = 8x
  EXPECT_EQ(grad_of(x), (std::vector<double>{8, 16, 24}));
}

TEST(Autograd, DeepDiamondVisitsEachNodeOnce) {
  // x -> h -> (p, q) -> r ; each node's gradient must be complete before it runs
  Tensor x = leaf({1, 2}, {2});
  Tensor h = mul(x, 2.0);
  Tensor p = mul(h, 3.0), q = mul(h, h);
  Tensor r = sum(add(mul(p, q), h));
  r.backward();
  // r = sum(3h^3 + h), dr/dh = 9h^2 + 1, dh/dx = 2
  std::vector<double> xs = {1, 2};
  std::vector<double> g = grad_of(x);
  for (int i = 0; i < 2; ++i) EXPECT_NEAR(g[i], (9 * 4 * xs[i] * xs[i] + 1) * 2, 1e-9);
}

TEST(Autograd, IntermediateGradNotKeptUnlessRetained) {
  Tensor x = leaf({1, 2}, {2});
  Tensor h = mul(x, 2.0);
  Tensor k = mul(x, 3.0);
  h.retain_grad();
  sum(mul(h, k)).backward();
  EXPECT_FALSE(k.grad().defined());
  ASSERT_TRUE(h.grad().defined()) << "retain_grad() on a non-leaf should keep its grad";
  EXPECT_EQ(h.grad().to_vector<double>(), (std::vector<double>{3, 6}));
}

TEST(Autograd, RetainedGradsAccumulateAndAreCopies) {
  Tensor x = leaf({1, 2}, {2});
  Tensor h = mul(x, 2.0);
  h.retain_grad();
  h.retain_grad();  // twice is once
  Tensor y = sum(mul(h, 3.0));
  y.retain_grad();
  y.backward(Tensor(), true);
  EXPECT_EQ(h.grad().to_vector<double>(), (std::vector<double>{3, 3}));
  EXPECT_EQ(y.grad().item(), 1.0);
  y.backward();
  EXPECT_EQ(h.grad().to_vector<double>(), (std::vector<double>{6, 6}));
  EXPECT_EQ(grad_of(x), (std::vector<double>{12, 12}));
  h.grad().zero_();  // its own storage: x's grad is untouched
  EXPECT_EQ(grad_of(x), (std::vector<double>{12, 12}));
  EXPECT_KILN_ERROR(from_vector(std::vector<double>{1}, {1}).retain_grad(), "retain_grad", "require");
}

TEST(Autograd, LeafGradsDoNotAlias) {
  // add's backward hands the same gradient tensor to both inputs.
  Tensor a = leaf({1, 2, 3}, {3});
  Tensor b = leaf({4, 5, 6}, {3});
  sum(add(a, b)).backward();
  ASSERT_TRUE(a.grad().defined() && b.grad().defined());
  EXPECT_FALSE(a.grad().shares_storage(b.grad()));
  Tensor ga = a.grad();
  ga.mul_(5.0);
  EXPECT_EQ(grad_of(a), (std::vector<double>{5, 5, 5}));
  EXPECT_EQ(grad_of(b), (std::vector<double>{1, 1, 1}));
  // the next backward accumulates into a's grad without touching b's
  sum(add(a, b)).backward();
  EXPECT_EQ(grad_of(a), (std::vector<double>{6, 6, 6}));
  EXPECT_EQ(grad_of(b), (std::vector<double>{2, 2, 2}));
}

TEST(Autograd, LeafGradIsAContiguousTensorOfItsOwn) {
  // sum's backward may return an expanded (stride 0) tensor: the leaf's grad
  // must still be a writable, contiguous tensor.
  Tensor x = leaf({1, 2, 3, 4}, {2, 2});
  sum(x).backward();
  Tensor g = x.grad();
  EXPECT_TRUE(g.is_contiguous());
  EXPECT_EQ(g.strides(), (Shape{2, 1}));
  g.data<double>()[0] = 7;
  EXPECT_EQ(g.to_vector<double>(), (std::vector<double>{7, 1, 1, 1}));
  EXPECT_FALSE(g.shares_storage(x));
}

TEST(Autograd, GradOfBroadcastInputsIsReduced) {
  Tensor a = leaf({1, 2, 3}, {3});
  Tensor b = leaf({10, 20}, {2, 1});
  sum(mul(a, b)).backward();
  EXPECT_EQ(grad_of(a), (std::vector<double>{30, 30, 30}));
  EXPECT_EQ(grad_of(b), (std::vector<double>{6, 6}));
  EXPECT_EQ(b.grad().shape(), (Shape{2, 1}));
}

TEST(Autograd, InplaceOnTensorThatRequiresGradThrows) {
  Tensor x = leaf({1, 2, 3}, {3});
  Tensor o = from_vector(std::vector<double>{1, 1, 1}, {3});
  EXPECT_KILN_ERROR(x.add_(o), "add_", "requires grad", "NoGradGuard");
  EXPECT_THROW(x.mul_(2.0), Error);
  EXPECT_THROW(x.fill_(0.0), Error);
  Tensor y = mul(x, 2.0);
  EXPECT_THROW(y.add_(o), Error);
  EXPECT_EQ(x.to_vector<double>(), (std::vector<double>{1, 2, 3}));  // untouched
  {
    NoGradGuard ng;  // optimizer-style update
    x.add_(o, -0.5);
  }
  EXPECT_EQ(x.to_vector<double>(), (std::vector<double>{0.5, 1.5, 2.5}));
  EXPECT_TRUE(x.requires_grad());
}

TEST(Autograd, IntegerOpsOnGradTensorsDoNotBreak) {
  Tensor x = leaf({1, -2, 3}, {3});
  Tensor idx = argmax(x, 0);
  EXPECT_FALSE(idx.requires_grad());
  Tensor y = sum(relu(x));
  y.backward();
  EXPECT_EQ(grad_of(x), (std::vector<double>{1, 0, 1}));
}

// ---- gradients of views via finite differences ----
TEST(AutogradViews, Slice) {
  EXPECT_GRADCHECK([](const std::vector<Tensor>& in) { return in[0].slice(1, 1, 5, 2); }, ins(rnd({3, 6})));
  EXPECT_GRADCHECK([](const std::vector<Tensor>& in) { return in[0].slice(0, -2, 100); }, ins(rnd({4, 2})));
}
TEST(AutogradViews, Select) {
  EXPECT_GRADCHECK([](const std::vector<Tensor>& in) { return in[0].select(1, 2); }, ins(rnd({3, 4, 2})));
  EXPECT_GRADCHECK([](const std::vector<Tensor>& in) { return in[0].select(0, -1); }, ins(rnd({3, 4})));
}
TEST(AutogradViews, Expand) {
  EXPECT_GRADCHECK([](const std::vector<Tensor>& in) { return in[0].expand({2, 3, 4}); }, ins(rnd({3, 1})));
  EXPECT_GRADCHECK([](const std::vector<Tensor>& in) { return in[0].expand({5, 3}); }, ins(rnd({3})));
}
TEST(AutogradViews, Permute) {
  EXPECT_GRADCHECK([](const std::vector<Tensor>& in) { return in[0].permute({2, 0, 1}); }, ins(rnd({2, 3, 4})));
  EXPECT_GRADCHECK([](const std::vector<Tensor>& in) { return in[0].transpose(0, 1); }, ins(rnd({2, 3})));
}
TEST(AutogradViews, ViewReshapeFlattenSqueeze) {
  EXPECT_GRADCHECK([](const std::vector<Tensor>& in) { return in[0].view({-1, 2}); }, ins(rnd({2, 3, 2})));
  EXPECT_GRADCHECK([](const std::vector<Tensor>& in) { return in[0].t().reshape({6}); }, ins(rnd({2, 3})));
  EXPECT_GRADCHECK([](const std::vector<Tensor>& in) { return in[0].flatten(1); }, ins(rnd({2, 3, 2})));
  EXPECT_GRADCHECK([](const std::vector<Tensor>& in) { return in[0].squeeze().unsqueeze(0); }, ins(rnd({3, 1, 2})));
  EXPECT_GRADCHECK([](const std::vector<Tensor>& in) { return in[0].permute({1, 0}).contiguous(); }, ins(rnd({3, 2})));
}
TEST(AutogradViews, ChainedAndOverlapping) {
  // a chain of views, and two overlapping slices of one input added together
  EXPECT_GRADCHECK(
      [](const std::vector<Tensor>& in) { return in[0].select(0, 1).slice(0, 0, 4, 2).t().expand({2, 3, 2}); },
      ins(rnd({2, 4, 3})));
  EXPECT_GRADCHECK(
      [](const std::vector<Tensor>& in) { return add(in[0].slice(0, 0, 3), mul(in[0].slice(0, 1, 4), in[1])); },
      ins(rnd({4, 2}), rnd({3, 2}, 2)));
}

}  // namespace
}  // namespace kiln
