// nn::fuse_modules (kiln/fusion.h) and conv2d's activation post-op: fused
// eval outputs equal the unfused model's, with fewer ops dispatched.
#include <gtest/gtest.h>

#include "fusion/fusion_testing.h"
#include "kiln/compile.h"
#include "kiln/fusion.h"
#include "kiln/kiln.h"
#include "ops/conv_fused.h"

namespace kiln {
namespace {

using testing::OpCounter;
using testing::scaled_error;

TEST(ConvPostOp, MatchesActivationOfConvInFloat32AndFloat64) {
  manual_seed(4);
  for (DType dt : {DType::Float32, DType::Float64}) {
    Tensor x = randn({2, 5, 9, 9}).to(dt), w = randn({8, 5, 3, 3}).to(dt), b = randn({8}).to(dt);
    Conv2dParams p;
    p.padding = {1, 1};
    Tensor z = conv2d(x, w, b, p);
    EXPECT_TENSOR_CLOSE(conv2d_fused(x, w, b, p, "relu"), relu(z), 1e-5, 1e-5) << dtype_name(dt);
    EXPECT_TENSOR_CLOSE(conv2d_fused(x, w, Tensor(), p, "gelu"), gelu(conv2d(x, w, Tensor(), p)), 1e-5, 1e-5)
        << dtype_name(dt);
  }
}

TEST(ConvPostOp, GradientsEqualTheUnfusedOps) {
  manual_seed(4);
  Conv2dParams p;
  for (std::string act : {"relu", "gelu"}) {
    Tensor x = randn({2, 3, 6, 6}, dtype(DType::Float64)).requires_grad_();
    Tensor w = randn({4, 3, 3, 3}, dtype(DType::Float64)).requires_grad_();
    Tensor b = randn({4}, dtype(DType::Float64)).requires_grad_();
    Tensor g = randn({2, 4, 4, 4}, dtype(DType::Float64));
    mul(conv2d_fused(x, w, b, p, act), g).sum().backward();
    Tensor gx = x.grad(), gw = w.grad(), gb = b.grad();
    x.set_grad(Tensor()), w.set_grad(Tensor()), b.set_grad(Tensor());
    Tensor z = conv2d(x, w, b, p);
    mul(act == "relu" ? relu(z) : gelu(z), g).sum().backward();
    EXPECT_TENSOR_CLOSE(gx, x.grad(), 1e-10, 1e-10) << act;
    EXPECT_TENSOR_CLOSE(gw, w.grad(), 1e-10, 1e-10) << act;
    EXPECT_TENSOR_CLOSE(gb, b.grad(), 1e-10, 1e-10) << act;
  }
}

TEST(ConvPostOp, UnknownActivationIsAnError) {
  Conv2dParams p;
  EXPECT_THROW(conv2d_fused(randn({1, 1, 3, 3}), randn({1, 1, 3, 3}), Tensor(), p, "tanh"), Error);
}

// Non-trivial running statistics and affine parameters, so folding them is tested.
void randomize_batch_norms(nn::Module& model) {
  NoGradGuard no_grad;
  for (auto& [_, m] : model.named_modules())
    if (auto* bn = dynamic_cast<nn::BatchNorm2d*>(m.get())) {
      int64_t c = bn->options.num_features();
      copy_(bn->running_mean, mul(randn({c}), 0.3));
      copy_(bn->running_var, add(rand({c}), 0.5));
      copy_(bn->weight, add(rand({c}), 0.5));
      copy_(bn->bias, mul(randn({c}), 0.2));
    }
}

struct ZooCase {
  const char* model;
  double width;
  size_t fused;          // lines in FusedModel::fused()
  int64_t batch_norms;   // batch_norm ops left
  int64_t post_ops;      // convolutions with an activation post-op
};

class FuseModulesZoo : public ::testing::TestWithParam<ZooCase> {};

TEST_P(FuseModulesZoo, EvalOutputEqualsUnfusedModelWithFewerOps) {
  const ZooCase& c = GetParam();
  manual_seed(7);
  auto model = models::create(c.model, c.width);
  randomize_batch_norms(*model);
  model->eval();
  NoGradGuard no_grad;
  Tensor x = randn({4, 3, 32, 32});
  OpCounter before_counter;
  Tensor want = model->forward(x);
  auto before = before_counter.counts;
  auto fused = nn::fuse_modules(model);
  EXPECT_FALSE(fused->planned());
  EXPECT_LE(scaled_error(fused->forward(x), want), 1e-6);  // the planning call runs unfused
  ASSERT_TRUE(fused->planned());
  EXPECT_EQ(fused->fused().size(), c.fused) << ::testing::PrintToString(fused->fused());
  OpCounter after;
  Tensor got = fused->forward(x);
  double err = scaled_error(got, want);
  EXPECT_LE(err, 1e-5) << c.model;
  EXPECT_EQ(after["batch_norm"], c.batch_norms);
  EXPECT_EQ(after["conv2d+relu"] + after["conv2d+gelu"], c.post_ops);
  EXPECT_EQ(after["relu"] + after["gelu"], before["relu"] + before["gelu"] - c.post_ops);
  // Again: the plan holds on every call.
  EXPECT_LE(scaled_error(fused->forward(x), want), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Zoo, FuseModulesZoo,
                         ::testing::Values(ZooCase{"tutorial", 1.0, 2, 0, 2},
                                           // whiten + gelu; blockN.conv2 + normN2 + gelu; conv1's norm follows a pool
                                           ZooCase{"airbench", 0.5, 4, 3, 4},
                                           // stem and each block's conv1: + bn + relu; conv2 and shortcuts: + bn
                                           ZooCase{"resnet18", 1.0, 20, 0, 9}),
                         [](const auto& info) { return std::string(info.param.model); });

TEST(FuseModules, FusedModelRefusesTrainingAndFoldedNormsRefuseToTrain) {
  manual_seed(7);
  auto model = models::create("tutorial");
  auto fused = nn::fuse_modules(model);
  fused->train();
  EXPECT_THROW(fused->forward(randn({1, 3, 32, 32})), Error);
  auto bn = std::make_shared<nn::BatchNorm2d>(2);
  bn->folded = true;
  EXPECT_THROW(bn->forward(randn({1, 2, 3, 3})), Error);
  bn->eval();
  Tensor x = randn({1, 2, 3, 3});
  EXPECT_TENSOR_CLOSE(bn->forward(x), x, 0, 0);
}

// A conv whose output is also read elsewhere is not fused with its activation.
TEST(FuseModules, SharedConvOutputIsNotFused) {
  struct Net : nn::Module {
    Net() : Module("Net") { conv = register_module("conv", std::make_shared<nn::Conv2d>(nn::Conv2dOptions(3, 4, 3))); }
    Tensor forward(const Tensor& x) override {
      Tensor z = conv->forward(x);
      return add(relu(z), z);
    }
    std::shared_ptr<nn::Conv2d> conv;
  };
  manual_seed(7);
  auto net = std::make_shared<Net>();
  Tensor x = randn({2, 3, 8, 8});
  net->eval();
  Tensor want = net->forward(x);
  auto fused = nn::fuse_modules(net);
  fused->forward(x);
  EXPECT_TRUE(fused->fused().empty());
  EXPECT_TENSOR_CLOSE(fused->forward(x), want, 0, 0);
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// A compiled graph never folds a batch norm into a conv2d whose activation
// post-op comes between them (the fold_batch_norm pass skips it).
TEST(ConvPostOp, CompiledBatchNormAfterFusedActivationIsNotFolded) {
  manual_seed(4);
  Conv2dParams p;
  Tensor w = randn({4, 3, 3, 3}), b = randn({4});
  Tensor mean = randn({4}), var = add(rand({4}), 0.5), gamma = randn({4}), beta = randn({4});
  auto f = [&](const Tensor& x) {
    return batch_norm(conv2d_fused(x, w, b, p, "relu"), gamma, beta, mean, var, false, 0.1, 1e-5);
  };
  NoGradGuard no_grad;
  Tensor x = randn({2, 3, 8, 8});
  Tensor want = f(x);
  auto compiled = compile(f);
  EXPECT_TENSOR_CLOSE(compiled(x), want, 1e-5, 1e-5);
  EXPECT_TENSOR_CLOSE(compiled(x), want, 1e-5, 1e-5);
}

}  // namespace
}  // namespace kiln
