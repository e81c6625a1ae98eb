// Every layer's forward, input gradient, parameter gradients and buffer
// updates against torch.nn with the same weights (tools/goldens/gen_modules.py),
// the weights loaded through load_state_dict.
#include <gtest/gtest.h>

#include "kiln/kiln.h"
#include "testing/errors.h"
#include "testing/golden.h"

namespace kiln {
namespace {

using nn::ModulePtr;
using std::make_shared;

const testing::Goldens& G() { return testing::goldens("modules"); }

// Loads "<name>.sd.*" into m (strictly: every key must match).
void load_golden_state(nn::Module& m, const std::string& name) {
  nn::TensorDict sd;
  for (const auto& [k, t] : m.state_dict()) {
    std::string key = name + ".sd." + k;
    if (G().has(key)) sd.emplace_back(k, G()[key]);
  }
  m.load_state_dict(sd);
}

void check_case(const std::string& name, nn::Module& m, bool train, double rtol = 1e-5, double atol = 1e-5) {
  SCOPED_TRACE(name);
  load_golden_state(m, name);
  m.train(train);
  Tensor x = G()[name + ".x"].clone().requires_grad_();
  Tensor y = m.forward(x);
  EXPECT_TENSOR_CLOSE(y, G()[name + ".y"], rtol, atol);
  y.backward(G()[name + ".gy"]);
  EXPECT_TENSOR_CLOSE(x.grad(), G()[name + ".gx"], rtol, atol);
  for (const auto& [k, p] : m.named_parameters()) {
    SCOPED_TRACE(k);
    ASSERT_TRUE(p.grad().defined());
    EXPECT_TENSOR_CLOSE(p.grad(), G()[name + ".grad." + k], rtol, 10 * atol);
  }
  for (const auto& [k, b] : m.named_buffers()) {
    SCOPED_TRACE(k);
    EXPECT_TENSOR_CLOSE(b, G()[name + ".after." + k], rtol, atol);
  }
}

TEST(Layers, Conv2d) {
  nn::Conv2d a(nn::Conv2dOptions(3, 4, 3).padding(1));
  check_case("conv", a, true);
  nn::Conv2d b(nn::Conv2dOptions(4, 6, 3).stride(2).padding(1).bias(false));
  check_case("conv_nobias_s2", b, true);
  nn::Conv2d c(nn::Conv2dOptions(4, 6, {2, 3}).stride(std::vector<int64_t>{2, 1}).padding(std::vector<int64_t>{1, 0})
                   .dilation(std::vector<int64_t>{1, 2}).groups(2));
  check_case("conv_groups", c, true);
}

TEST(Layers, Linear) {
  nn::Linear a(7, 5);
  check_case("linear", a, true);
  nn::Linear b(nn::LinearOptions(7, 5).bias(false));
  check_case("linear_nobias", b, true);
}

TEST(Layers, BatchNorm2d) {
  nn::BatchNorm2d train(4), eval(4);
  check_case("bn_train", train, true, 1e-4, 1e-5);
  EXPECT_EQ(train.num_batches_tracked.item<int64_t>(), 4);  // 3 loaded + 1
  check_case("bn_eval", eval, false, 1e-4, 1e-5);
  EXPECT_EQ(eval.num_batches_tracked.item<int64_t>(), 3);
  nn::BatchNorm2d mom(nn::BatchNorm2dOptions(4).momentum(0.3).eps(1e-3));
  check_case("bn_momentum", mom, true, 1e-4, 1e-5);
  nn::BatchNorm2d noaffine(nn::BatchNorm2dOptions(4).affine(false));
  check_case("bn_noaffine", noaffine, true, 1e-4, 1e-5);
  nn::BatchNorm2d nostats(nn::BatchNorm2dOptions(4).track_running_stats(false));
  check_case("bn_nostats_eval", nostats, false, 1e-4, 1e-5);  // batch statistics even in eval
}

TEST(Layers, Pooling) {
  nn::MaxPool2d a(2);
  check_case("maxpool", a, true);
  nn::MaxPool2d b(nn::Pool2dOptions(3).stride(std::vector<int64_t>{2, 2}).padding(std::vector<int64_t>{1, 1}).ceil_mode(true));
  check_case("maxpool_pad", b, true);
  nn::AvgPool2d c(2);
  check_case("avgpool", c, true);
  nn::AvgPool2d d(nn::Pool2dOptions(3).stride(std::vector<int64_t>{2, 2}).padding(std::vector<int64_t>{1, 1}));
  check_case("avgpool_pad", d, true);
  nn::AdaptiveAvgPool2d e({1, 1});
  check_case("adaptive_avg", e, true);
  nn::AdaptiveMaxPool2d f({2, 2});
  check_case("adaptive_max", f, true);
}

TEST(Layers, Activations) {
  nn::ReLU relu;
  check_case("relu", relu, true);
  nn::GELU gelu, gelu_tanh("tanh");
  check_case("gelu", gelu, true);
  check_case("gelu_tanh", gelu_tanh, true);
  nn::Flatten flat;
  check_case("flatten", flat, true);
  nn::Dropout drop(0.5);
  check_case("dropout_eval", drop, false);
}

TEST(Layers, DropoutTrains) {
  nn::Dropout drop(0.5);
  Tensor y = drop.forward(ones({1000}));
  std::vector<float> v = y.to_vector<float>();
  int zeros_seen = 0;
  for (float f : v) {
    EXPECT_TRUE(f == 0.0f || f == 2.0f);
    zeros_seen += f == 0.0f;
  }
  EXPECT_GT(zeros_seen, 400);
  EXPECT_LT(zeros_seen, 600);
}

TEST(Layers, SequentialTutorialNet) {
  nn::Sequential net({make_shared<nn::Conv2d>(nn::Conv2dOptions(3, 6, 5)), make_shared<nn::ReLU>(),
                      make_shared<nn::MaxPool2d>(2), make_shared<nn::Conv2d>(nn::Conv2dOptions(6, 16, 5)),
                      make_shared<nn::ReLU>(), make_shared<nn::MaxPool2d>(2), make_shared<nn::Flatten>(),
                      make_shared<nn::Linear>(400, 120), make_shared<nn::ReLU>(), make_shared<nn::Linear>(120, 84),
                      make_shared<nn::ReLU>(), make_shared<nn::Linear>(84, 10)});
  EXPECT_EQ(net.size(), 12u);
  EXPECT_EQ(net.num_parameters(), 62006);  // as torch's tutorial CNN
  check_case("seq_tutorial", net, true, 1e-4, 1e-5);
}

TEST(Layers, SequentialWithBatchNorm) {
  nn::Sequential net;
  net.push_back(make_shared<nn::Conv2d>(nn::Conv2dOptions(3, 8, 3).padding(1).bias(false)))
      .push_back(make_shared<nn::BatchNorm2d>(8))
      .push_back(make_shared<nn::GELU>())
      .push_back(make_shared<nn::MaxPool2d>(2))
      .push_back(make_shared<nn::Sequential>(std::vector<ModulePtr>{
          make_shared<nn::Conv2d>(nn::Conv2dOptions(8, 8, 3).padding(1).bias(false)),
          make_shared<nn::BatchNorm2d>(8), make_shared<nn::ReLU>()}))
      .push_back(make_shared<nn::AdaptiveMaxPool2d>(std::vector<int64_t>{1, 1}))
      .push_back(make_shared<nn::Flatten>())
      .push_back(make_shared<nn::Linear>(nn::LinearOptions(8, 10).bias(false)));
  check_case("seq_bn", net, true, 1e-4, 1e-5);
}

TEST(Layers, ClearErrors) {
  nn::Conv2d conv(nn::Conv2dOptions(3, 4, 3));
  EXPECT_KILN_ERROR(conv.forward(zeros({2, 5, 8, 8})), "Conv2d(3, 4)", "C = 3", "[2, 5, 8, 8]");
  EXPECT_KILN_ERROR(nn::Conv2d(nn::Conv2dOptions(3, 4, 3).groups(2)), "groups=2", "in_channels=3");
  EXPECT_KILN_ERROR(nn::Conv2d(nn::Conv2dOptions(3, 4, std::vector<int64_t>{3})), "kernel_size needs 2 values");
  nn::Linear lin(400, 120);
  EXPECT_KILN_ERROR(lin.forward(zeros({2, 16, 5, 5})), "Linear(in_features=400", "flatten");
  nn::BatchNorm2d bn(8);
  EXPECT_KILN_ERROR(bn.forward(zeros({2, 4, 3, 3})), "BatchNorm2d(8)", "C = 8");
  EXPECT_KILN_ERROR(nn::BatchNorm2d(nn::BatchNorm2dOptions(4).momentum(2.0)), "momentum");
  nn::MaxPool2d pool(nn::Pool2dOptions(std::vector<int64_t>{0, 2}));
  EXPECT_KILN_ERROR(pool.forward(zeros({1, 1, 4, 4})), "MaxPool2d", "kernel_size");
  EXPECT_KILN_ERROR(nn::Sequential().push_back(nullptr), "null");
}

TEST(Layers, LambdaInSequential) {
  nn::Sequential s({make_shared<nn::Lambda>("Scale", [](const Tensor& x) { return x * 0.5; }), make_shared<nn::ReLU>()});
  EXPECT_EQ(s.forward(from_vector(std::vector<float>{-2.0f, 4.0f}, {2})).to_vector<float>(), (std::vector<float>{0.0f, 2.0f}));
  EXPECT_EQ(s.str(), "Sequential(\n  (0): Scale()\n  (1): ReLU()\n)");
}

}  // namespace
}  // namespace kiln
