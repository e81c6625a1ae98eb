// kiln::compile against eager on what real code does to a compiled
// function: a ResNet-18 in both modes, arguments of another dtype or
// requires_grad, a module switched between train() and eval(), a call that
// throws, and random ops.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "capture_checks.h"
#include "compiler/capture/compiled_state.h"
#include "kiln/compile.h"
#include "kiln/kiln.h"
#include "testing/compare.h"

namespace kiln {
namespace {

using testing::check_model;

bool all_variants_complete(const compiler::CompiledState& st) {
  return std::all_of(st.variants.begin(), st.variants.end(), [](const auto& v) { return v->complete; });
}

TEST(CaptureModels, Resnet18TrainForwardAndGradientsEqualEager) { check_model("resnet18", true, 2); }
TEST(CaptureModels, Resnet18EvalForwardAndGradientsEqualEager) { check_model("resnet18", false, 2); }

TEST(CaptureModels, AnotherDtypeRecompilesAndStaysRight) {
  manual_seed(11);
  auto f = [](const Tensor& x) { return mul(exp(x), 2.0).sum({1}); };
  auto cf = compile(f);
  Tensor x32 = randn({3, 4});
  Tensor x64 = randn({3, 4}).to(DType::Float64);
  for (const Tensor& x : {x32, x64, x32, x64}) {
    Tensor got = cf(x);
    EXPECT_EQ(got.dtype(), x.dtype());
    EXPECT_TENSOR_CLOSE(got, f(x), 1e-6, 1e-6);
  }
  EXPECT_EQ(cf.stats().variants, 2);
  EXPECT_EQ(cf.stats().recompiles, 1);
}

TEST(CaptureModels, RequiresGradRecompilesAndGradientsAreRight) {
  manual_seed(12);
  Tensor w = randn({4, 3});
  auto f = [&](const Tensor& x) { return tanh(matmul(x, w)).sum(); };
  auto cf = compile(f);
  Tensor x = randn({5, 4});
  EXPECT_TENSOR_CLOSE(cf(x), f(x));  // no gradient wanted: recorded without one
  for (int i = 0; i < 2; ++i) {
    Tensor xa = x.clone().requires_grad_(), xb = x.clone().requires_grad_();
    Tensor ya = f(xa), yb = cf(xb);
    EXPECT_TENSOR_CLOSE(yb, ya);
    ASSERT_TRUE(yb.requires_grad());
    ya.backward();
    yb.backward();
    ASSERT_TRUE(xb.grad().defined());
    EXPECT_TENSOR_CLOSE(xb.grad(), xa.grad(), 1e-5, 1e-6);
  }
  EXPECT_TENSOR_CLOSE(cf(x), f(x));  // back to the first variant
  EXPECT_EQ(cf.stats().variants, 2);
}

std::shared_ptr<nn::Module> small_bn_net() {
  return std::make_shared<nn::Sequential>(std::vector<nn::ModulePtr>{
      std::make_shared<nn::Conv2d>(nn::Conv2dOptions(3, 8, 3).padding(1)), std::make_shared<nn::BatchNorm2d>(8),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(8 * 6 * 6, 4)});
}

// train()/eval() between calls: batch statistics and running-stat updates in
// train mode, running stats in eval mode, like the eager twin each time.
void check_train_eval_switch(bool through_module) {
  manual_seed(13);
  auto a = small_bn_net();
  manual_seed(13);
  auto b = small_bn_net();
  auto by_lambda = compile([&](const Tensor& x) { return b->forward(x); });
  auto by_module = compile(b);
  auto run_b = [&](const Tensor& x) { return through_module ? by_module(x) : by_lambda(x); };
  for (bool training : {true, false, true, false, true}) {
    a->train(training);
    b->train(training);
    Tensor x = randn({4, 3, 6, 6});
    EXPECT_TENSOR_CLOSE(run_b(x), a->forward(x), 1e-5, 1e-6) << "training=" << training;
    auto ba = a->named_buffers(), bb = b->named_buffers();
    ASSERT_EQ(ba.size(), bb.size());
    for (size_t i = 0; i < ba.size(); ++i)
      EXPECT_TENSOR_CLOSE(bb[i].second, ba[i].second, 1e-5, 1e-6) << "training=" << training << " " << ba[i].first;
  }
  const auto& stats = through_module ? by_module.stats() : by_lambda.stats();
  EXPECT_EQ(stats.variants, 2);
  EXPECT_FALSE(stats.fell_back);
}

TEST(CaptureModels, TrainEvalSwitchThroughALambdaMatchesEager) { check_train_eval_switch(false); }
TEST(CaptureModels, TrainEvalSwitchThroughCompileModuleMatchesEager) { check_train_eval_switch(true); }

// A call that throws (a shape error inside the function) leaves no broken
// variant: the next good call runs and matches eager.
TEST(CaptureModels, AThrowingCallLeavesNoBrokenVariant) {
  manual_seed(14);
  Tensor w = randn({4, 3});
  auto f = [&](const Tensor& x, const Tensor& bias) { return relu(add(matmul(x, w), bias)); };
  auto cf = compile(f);
  Tensor good_x = randn({5, 4}), good_b = randn({3}), bad_b = randn({2});

  // While tracing the first call.
  EXPECT_THROW(cf(good_x, bad_b), Error);
  EXPECT_TRUE(all_variants_complete(cf.state()));
  EXPECT_TENSOR_CLOSE(cf(good_x, good_b), f(good_x, good_b));

  // While replaying: the guard on bias fails, the new variant's trace throws.
  EXPECT_THROW(cf(good_x, bad_b), Error);
  EXPECT_TRUE(all_variants_complete(cf.state()));
  for (int i = 0; i < 2; ++i) {
    Tensor x = randn({5, 4});
    EXPECT_TENSOR_CLOSE(cf(x, good_b), f(x, good_b));
  }
  // At the first op (matmul with a wrong inner size).
  EXPECT_THROW(cf(randn({5, 7}), good_b), Error);
  EXPECT_TRUE(all_variants_complete(cf.state()));
  Tensor x = randn({5, 4});
  EXPECT_TENSOR_CLOSE(cf(x, good_b), f(x, good_b));
  EXPECT_EQ(cf.state().variants.size(), 1u);
}

// The user's code throws half-way through a replay that matched so far.
TEST(CaptureModels, AThrowMidReplayKeepsTheVariantUsable) {
  manual_seed(17);
  Tensor w = randn({4, 3});
  bool fail = false;
  auto f = [&](const Tensor& x) {
    Tensor h = relu(matmul(x, w));
    KILN_CHECK(!fail, "asked to fail");
    return h.sum({1});
  };
  auto cf = compile(f);
  Tensor x = randn({5, 4});
  EXPECT_TENSOR_CLOSE(cf(x), f(x));
  fail = true;
  EXPECT_THROW(cf(x), Error);
  fail = false;
  for (int i = 0; i < 2; ++i) {
    Tensor x2 = randn({5, 4});
    EXPECT_TENSOR_CLOSE(cf(x2), f(x2));
  }
  EXPECT_EQ(cf.stats().variants, 1);
  EXPECT_TRUE(all_variants_complete(cf.state()));
}

// Random ops: each call draws new numbers, and the same numbers as eager
// from the same seed.
TEST(CaptureModels, RandomOpsMatchEagerPerSeedAndDifferPerCall) {
  manual_seed(15);
  Tensor x = randn({4, 8});
  auto f = [](const Tensor& x) { return add(dropout(x, 0.5, true), randn({4, 8})); };
  auto cf = compile(f);
  for (uint64_t seed : {100, 101, 102}) {
    manual_seed(seed);
    Tensor want = f(x);
    manual_seed(seed);
    Tensor got = cf(x);
    EXPECT_TENSOR_CLOSE(got, want, 1e-6, 1e-6) << "seed " << seed;
  }
  manual_seed(7);
  Tensor first = cf(x), second = cf(x);
  EXPECT_GT(amax(abs(sub(first, second))).item(), 0.1);
  manual_seed(7);
  EXPECT_TENSOR_CLOSE(f(x), first, 1e-6, 1e-6);
  EXPECT_TENSOR_CLOSE(f(x), second, 1e-6, 1e-6);
  EXPECT_EQ(cf.stats().variants, 1);  // seeds and offsets are graph inputs
}

// Dropout as a module in train mode, through compile(module).
TEST(CaptureModels, DropoutModuleInTrainModeMatchesEagerPerSeed) {
  manual_seed(16);
  nn::ModulePtr net = std::make_shared<nn::Sequential>(std::vector<nn::ModulePtr>{
      std::make_shared<nn::Linear>(8, 16), std::make_shared<nn::ReLU>(), std::make_shared<nn::Dropout>(0.3)});
  net->train();
  auto cnet = compile(net);
  Tensor x = randn({4, 8});
  Tensor prev;
  for (uint64_t seed : {200, 201}) {
    manual_seed(seed);
    Tensor want = net->forward(x);
    manual_seed(seed);
    Tensor got = cnet(x);
    EXPECT_TENSOR_CLOSE(got, want, 1e-6, 1e-6) << "seed " << seed;
    if (prev.defined()) {
      EXPECT_GT(amax(abs(sub(got, prev))).item(), 0.01);
    }
    prev = got;
  }
  EXPECT_EQ(cnet.stats().variants, 1);
}

// A C++ number keeps its wrapped-number promotion through the graph (it
// once became f64 after functionalization); label smoothing multiplies by one.
TEST(CaptureModels, ZeroDimTensorTimesCppNumberMatchesEager) {
  manual_seed(18);
  auto f = [](const Tensor& x) { return mul(x.sum(), 0.2); };
  auto cf = compile(f);
  Tensor x = randn({4, 3});
  EXPECT_TENSOR_CLOSE(cf(x), f(x));
  auto g = [](const Tensor& x, const Tensor& y) { return cross_entropy(x, y, 0.2); };
  auto cg = compile(g);
  Tensor y = randint(0, 3, {4});
  EXPECT_TENSOR_CLOSE(cg(x, y), g(x, y));
}

}  // namespace
}  // namespace kiln
