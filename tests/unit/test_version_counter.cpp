// Version counters: every in-place write bumps the storage's counter (shared
// by views and detach()), autograd records it for each saved tensor, and
// backward refuses a saved tensor written since, as PyTorch does, instead of
// computing a silently wrong gradient. Writes to tensors that were not saved,
// or after backward, are fine; batch_norm's running-stat updates never trip it.
#include <gtest/gtest.h>

#include "kiln/kiln.h"
#include "testing/errors.h"

namespace kiln {
namespace {

Tensor leaf(std::vector<float> v) {
  Tensor t = from_vector(v, {static_cast<int64_t>(v.size())});
  t.requires_grad_();
  return t;
}

// Runs stmt once (a failed backward has already freed part of its graph).
#define EXPECT_MODIFIED_ERROR(stmt, ...)                                                                 \
  EXPECT_TRUE(::kiln::testing::error_says([&] { stmt; },                                                  \
                                          {"one of the variables needed for gradient computation has been " \
                                           "modified by an inplace operation",                            \
                                           ##__VA_ARGS__}))                                               \
      << #stmt

// The repro: w.grad() was left at 10 (the answer is x's old value, 1).
TEST(VersionCounter, SavedInputModifiedInPlaceIsAnError) {
  Tensor w = leaf({1, 1, 1});
  Tensor x = ones({3});
  Tensor y = mul(w, x).sum();
  x.mul_(10);
  EXPECT_MODIFIED_ERROR(y.backward(), "[mul input 1, float32[3]]", "is at version 1; expected version 0",
                        "Fix:");
  EXPECT_FALSE(w.grad().defined());
}

TEST(VersionCounter, EveryInPlaceOpBumps) {
  Tensor x = zeros({4});
  uint64_t v = x.version();
  x.fill_(1);
  x.zero_();
  x.add_(ones({4}));
  x.mul_(2.0);
  x.mul_(ones({4}));
  x.copy_(ones({4}));
  addcmul_(x, ones({4}), ones({4}));
  addcdiv_(x, ones({4}), ones({4}));
  lerp_(x, zeros({4}), 0.5);
  EXPECT_EQ(x.version(), v + 9);
  (void)add(x, 1.0);  // out-of-place: no bump
  EXPECT_EQ(x.version(), v + 9);
}

TEST(VersionCounter, SharedByViewsAndDetach) {
  Tensor x = zeros({2, 3});
  Tensor v = x.slice(1, 0, 2);
  Tensor d = x.detach();
  v.fill_(1);
  EXPECT_EQ(x.version(), 1u);
  EXPECT_EQ(d.version(), 1u);
  d.add_(ones({2, 3}));
  EXPECT_EQ(x.version(), 2u);
  EXPECT_EQ(v.version(), 2u);
  EXPECT_EQ(zeros({2}).version(), 0u);  // a new storage starts at 0
}

// A write through a view of a saved tensor, or into the base of a saved view.
TEST(VersionCounter, ViewModifiedInPlaceIsAnError) {
  Tensor w = leaf({1, 1, 1});
  Tensor x = ones({2, 3});
  Tensor y = mul(w, x[0]).sum();
  x[1].fill_(5);  // another row, but the same storage: torch errors too
  EXPECT_MODIFIED_ERROR(y.backward(), "[mul input 1, float32[3]]");

  Tensor x2 = ones({3});
  Tensor y2 = mul(w, x2).sum();
  x2.slice(0, 0, 2).mul_(3.0);
  EXPECT_MODIFIED_ERROR(y2.backward(), "mul input 1");
}

TEST(VersionCounter, DetachedThenModifiedIsAnError) {
  Tensor w = leaf({1, 2, 3});
  Tensor y = mul(w, w).sum();
  {
    NoGradGuard ng;
    w.detach().add_(ones({3}));  // a detached alias of a saved tensor
  }
  EXPECT_MODIFIED_ERROR(y.backward(), "[mul input 0, float32[3]]");
}

// A saved output (relu saves its result) written under NoGradGuard.
TEST(VersionCounter, SavedOutputModifiedIsAnError) {
  Tensor w = leaf({1, -2, 3});
  Tensor r = relu(w);
  Tensor y = r.sum();
  {
    NoGradGuard ng;
    r.mul_(2.0);
  }
  EXPECT_MODIFIED_ERROR(y.backward(), "[relu output 0, float32[3]]");
}

TEST(VersionCounter, RetainedGraphThenModifiedIsAnError) {
  Tensor w = leaf({1, 1});
  Tensor x = ones({2});
  Tensor y = mul(w, x).sum();
  y.backward({}, true);
  x.fill_(3);
  EXPECT_MODIFIED_ERROR(y.backward(), "mul input 1");
  EXPECT_EQ(w.grad().to_vector<float>(), (std::vector<float>{1, 1}));  // only the first backward counted
}

TEST(VersionCounter, WritesThatAreNotReadAreFine) {
  // add does not save its inputs: its gradient does not depend on them.
  Tensor w = leaf({1, 2});
  Tensor x = ones({2});
  Tensor y = add(w, x).sum();
  x.mul_(10);
  y.backward();
  EXPECT_EQ(w.grad().to_vector<float>(), (std::vector<float>{1, 1}));

  // After backward the saved values are gone: writing is fine.
  Tensor w2 = leaf({1, 2});
  Tensor x2 = from_vector(std::vector<float>{3, 4}, {2});
  Tensor y2 = mul(w2, x2).sum();
  y2.backward();
  x2.mul_(10);
  EXPECT_EQ(w2.grad().to_vector<float>(), (std::vector<float>{3, 4}));

  // A fresh clone is a different storage.
  Tensor w3 = leaf({1, 2});
  Tensor x3 = ones({2});
  Tensor y3 = mul(w3, x3.clone()).sum();
  x3.fill_(7);
  y3.backward();
  EXPECT_EQ(w3.grad().to_vector<float>(), (std::vector<float>{1, 1}));
}

TEST(VersionCounter, OptimizerStepThenNewGraphIsFine) {
  Tensor w = leaf({1, 2, 3});
  Tensor x = from_vector(std::vector<float>{1, 1, 1}, {3});
  optim::SGD opt({w}, optim::SGDOptions(0.1).momentum(0.9));
  for (int step = 0; step < 3; ++step) {
    opt.zero_grad();
    Tensor loss = mul(mul(w, w), x).sum();
    loss.backward();
    opt.step();
  }
  EXPECT_EQ(w.version(), 3u);
  // grad 2w, momentum 0.9, lr 0.1: w = 1 -> 0.8 -> 0.46 -> 0.062
  std::vector<float> got = w.to_vector<float>();
  EXPECT_NEAR(got[0], 0.062f, 1e-5);

  // The same step taken between a forward and its backward is caught.
  Tensor loss = mul(w, x).sum();
  Tensor loss2 = mul(w, w).sum();
  loss.backward();
  opt.step();
  EXPECT_MODIFIED_ERROR(loss2.backward(), "[mul input 0, float32[3]]");
}

// Running-stat updates are in-place writes to buffers that backward never
// reads: two training forwards through one layer, then one backward.
TEST(VersionCounter, BatchNormRunningStatsDoNotTrip) {
  nn::BatchNorm2d bn(3);
  bn.train();
  Generator g(3);
  Tensor x = randn({4, 3, 2, 2}, {}, &g);
  x.requires_grad_();
  Tensor running_mean = bn.named_buffers()[0].second;
  uint64_t v0 = running_mean.version();
  Tensor y = add(bn.forward(x).sum(), bn.forward(mul(x, 2.0)).sum());
  EXPECT_EQ(running_mean.version(), v0 + 2);
  y.backward();
  ASSERT_TRUE(x.grad().defined());
  EXPECT_EQ(x.grad().shape(), x.shape());
  for (auto& [name, p] : bn.named_parameters()) EXPECT_TRUE(p.grad().defined()) << name;
}

}  // namespace
}  // namespace kiln
