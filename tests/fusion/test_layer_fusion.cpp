// Layer Fusion (kiln/fusion.h): similar_layers' cosine similarities, the
// freeze and tie policies, and what frozen layers no longer cost: weight
// gradient kernels in eager autograd and in a compiled train step, optimizer
// updates and state.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "fusion/fusion_testing.h"
#include "kiln/explain.h"
#include "kiln/fusion.h"
#include "kiln/kiln.h"

namespace kiln {
namespace {

using testing::OpCounter;

std::shared_ptr<nn::Sequential> three_linears() {
  return std::make_shared<nn::Sequential>(std::vector<nn::ModulePtr>{
      std::make_shared<nn::Linear>(2, 2), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(2, 2),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(2, 2),
      std::make_shared<nn::Linear>(2, 3)});  // another shape: in no pair
}

void set_weight(nn::Module& m, std::vector<float> v) {
  NoGradGuard no_grad;
  Tensor& w = dynamic_cast<nn::Linear&>(m).weight;
  copy_(w, from_vector(v, w.shape()));
}

TEST(LayerFusion, SimilarLayersMatchesHandComputedCosines) {
  auto model = three_linears();
  set_weight(*(*model)[0], {1, 0, 0, 1});
  set_weight(*(*model)[2], {1, 1, 0, 1});
  set_weight(*(*model)[4], {-1, 0, 0, -1});
  // cos(I, [[1,1],[0,1]]) = 2 / (sqrt 2 * sqrt 3); cos(I, -I) = -1; cos([[1,1],[0,1]], -I) = -2 / sqrt 6.
  auto all = fusion::similar_layers(*model, 100);
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0].a, "0");
  EXPECT_EQ(all[0].b, "2");
  EXPECT_NEAR(all[0].cosine, 2 / std::sqrt(6.0), 1e-12);
  EXPECT_EQ(all[1].a, "2");
  EXPECT_EQ(all[1].b, "4");
  EXPECT_NEAR(all[1].cosine, -2 / std::sqrt(6.0), 1e-12);
  EXPECT_EQ(all[2].a, "0");
  EXPECT_EQ(all[2].b, "4");
  EXPECT_NEAR(all[2].cosine, -1.0, 1e-12);
  auto top1 = fusion::similar_layers(*model, 1);
  ASSERT_EQ(top1.size(), 1u);
  EXPECT_EQ(top1[0].b, "2");
  EXPECT_TRUE(fusion::similar_layers(*model, 0).empty());
}

// torch.nn.functional.cosine_similarity(a.flatten(), b.flatten(), dim=0)
// written with kiln ops, against every pair of a zoo model.
TEST(LayerFusion, SimilarLayersMatchesTorchFormulaOnResnet18) {
  manual_seed(1);
  auto model = models::create("resnet18");
  auto params = model->state_dict();
  auto pairs = fusion::similar_layers(*model, 1000);
  ASSERT_GT(pairs.size(), 10u);
  for (size_t i = 1; i < pairs.size(); ++i) EXPECT_GE(pairs[i - 1].cosine, pairs[i].cosine);
  for (const auto& p : pairs) {
    Tensor a = params.at(p.a + ".weight").detach().to(DType::Float64).flatten();
    Tensor b = params.at(p.b + ".weight").detach().to(DType::Float64).flatten();
    double want = mul(a, b).sum().item() / (std::sqrt(mul(a, a).sum().item()) * std::sqrt(mul(b, b).sum().item()));
    EXPECT_NEAR(p.cosine, want, 1e-9) << p.a << " " << p.b;
    EXPECT_EQ(params.at(p.a + ".weight").shape(), params.at(p.b + ".weight").shape());
  }
}

TEST(LayerFusion, BadArgumentsAreErrors) {
  auto model = three_linears();
  EXPECT_THROW(fusion::similar_layers(*model, -1), Error);
  EXPECT_THROW(fusion::parse_policy("merge"), Error);
  EXPECT_EQ(fusion::parse_policy("tie"), fusion::Policy::Tie);
  try {
    fusion::freeze_similar(*model, -3);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("k must be >= 0"), std::string::npos) << e.what();
  }
}

// three_linears with layer "2" a small perturbation of layer "0".
std::shared_ptr<nn::Sequential> similar_model() {
  manual_seed(5);
  auto model = three_linears();
  NoGradGuard no_grad;
  Tensor w0 = dynamic_cast<nn::Linear&>(*(*model)[0]).weight;
  Tensor& w2 = dynamic_cast<nn::Linear&>(*(*model)[2]).weight;
  copy_(w2, add(w0, mul(randn({2, 2}), 0.01)));
  return model;
}

TEST(LayerFusion, FreezeSkipsGradsUpdatesAndOptimizerState) {
  auto model = similar_model();
  auto pairs = fusion::freeze_similar(*model, 1, fusion::Policy::Freeze);
  ASSERT_EQ(pairs.size(), 1u);
  EXPECT_EQ(pairs[0].a, "0");
  EXPECT_EQ(pairs[0].b, "2");
  auto& frozen = dynamic_cast<nn::Linear&>(*(*model)[2]);
  EXPECT_FALSE(frozen.weight.requires_grad());
  EXPECT_FALSE(frozen.bias.requires_grad());
  Tensor before = frozen.weight.clone();
  // All 8 parameters handed over, as torch users do: state for the 6 that train.
  optim::SGD sgd(model->parameters(), optim::SGDOptions(0.1).momentum(0.9));
  EXPECT_EQ(sgd.num_state_tensors(), 6);
  optim::AdamW adamw(model->parameters(), optim::AdamWOptions(1e-2));
  EXPECT_EQ(adamw.num_state_tensors(), 12);
  EXPECT_EQ(fusion::trainable_parameters(*model).size(), 6u);
  Tensor x = randn({8, 2});
  for (int step = 0; step < 3; ++step) {
    sgd.zero_grad();
    model->forward(x).sum().backward();
    EXPECT_FALSE(frozen.weight.grad().defined());
    EXPECT_FALSE(frozen.bias.grad().defined());
    EXPECT_TRUE(dynamic_cast<nn::Linear&>(*(*model)[0]).weight.grad().defined());
    sgd.step();
    adamw.step();
  }
  EXPECT_TENSOR_CLOSE(frozen.weight, before, 0, 0);
  EXPECT_EQ(sgd.num_state_tensors(), 6);
  EXPECT_EQ(adamw.num_state_tensors(), 12);
  EXPECT_EQ(adamw.state_dict().size(), 6u + 3u * 6u);  // hyper-parameters + (step, m, v) per trained param
}

TEST(LayerFusion, SetParamsKeepsStateOfRemainingParamsAndDropsTheRest) {
  auto model = similar_model();
  optim::SGD sgd(model->parameters(), optim::SGDOptions(0.1).momentum(0.9));
  Tensor x = randn({8, 2});
  sgd.zero_grad();
  model->forward(x).sum().backward();
  sgd.step();
  EXPECT_EQ(sgd.num_state_tensors(), 8);
  Tensor kept = sgd.state_dict().at("momentum_buffer.0").clone();
  fusion::freeze_similar(*model, 1);
  sgd.set_params(fusion::trainable_parameters(*model));
  EXPECT_EQ(sgd.params().size(), 6u);
  EXPECT_EQ(sgd.num_state_tensors(), 6);
  EXPECT_TENSOR_CLOSE(sgd.state_dict().at("momentum_buffer.0"), kept, 0, 0);
}

TEST(LayerFusion, TieSharesOneParameterAndSumsItsGradients) {
  auto model = similar_model();
  auto twin = similar_model();
  EXPECT_EQ(model->parameters().size(), 8u);
  fusion::freeze_similar(*model, 1, fusion::Policy::Tie);
  auto& l0 = dynamic_cast<nn::Linear&>(*(*model)[0]);
  auto& l2 = dynamic_cast<nn::Linear&>(*(*model)[2]);
  EXPECT_EQ(l0.weight.impl(), l2.weight.impl());
  EXPECT_EQ(model->parameters().size(), 7u);  // the tied weight once
  // The twin, untied, with layer 2's weight set to layer 0's: the tied
  // gradient is the sum of the twin's two weight gradients.
  {
    NoGradGuard no_grad;
    Tensor& w2 = dynamic_cast<nn::Linear&>(*(*twin)[2]).weight;
    copy_(w2, dynamic_cast<nn::Linear&>(*(*twin)[0]).weight);
  }
  Tensor x = randn({8, 2});
  model->forward(x).sum().backward();
  twin->forward(x).sum().backward();
  Tensor want = add(dynamic_cast<nn::Linear&>(*(*twin)[0]).weight.grad(),
                    dynamic_cast<nn::Linear&>(*(*twin)[2]).weight.grad());
  EXPECT_TENSOR_CLOSE(l0.weight.grad(), want, 1e-6, 1e-6);
  optim::SGD sgd(model->parameters(), optim::SGDOptions(0.1).momentum(0.9));
  EXPECT_EQ(sgd.num_state_tensors(), 7);
  for (int step = 0; step < 3; ++step) {
    sgd.zero_grad();
    model->forward(x).sum().backward();
    sgd.step();
  }
  EXPECT_TENSOR_CLOSE(l2.weight, l0.weight, 0, 0);
  // state_dict keeps both names for the one tensor, as torch does for tied weights.
  EXPECT_EQ(model->state_dict().at("2.weight").data_ptr(), l0.weight.data_ptr());
}

// airbench at width 0.25: the frozen layers' conv2d_backward_weight kernels
// are gone from eager backward, and from the backward of a compiled step.
int64_t frozen_convs(nn::Module& model, const std::vector<fusion::LayerPair>& pairs) {
  std::set<std::string> bs;
  for (const auto& p : pairs) bs.insert(p.b);
  int64_t n = 0;
  for (auto& [name, m] : model.named_modules())
    if (bs.count(name) && dynamic_cast<nn::Conv2d*>(m.get())) ++n;
  return n;
}

TEST(LayerFusion, EagerBackwardSkipsFrozenWeightGradientKernels) {
  manual_seed(2);
  auto plain = models::create("airbench", 0.25);
  manual_seed(2);
  auto fused = models::create("airbench", 0.25);
  auto pairs = fusion::freeze_similar(*fused, 2);
  ASSERT_EQ(pairs.size(), 2u);
  const int64_t frozen = frozen_convs(*fused, pairs);
  ASSERT_GE(frozen, 1);
  Tensor x = randn({4, 3, 32, 32});
  Tensor y = randint(0, 10, {4});
  auto backward_ops = [&](nn::Module& m) {
    Tensor loss = cross_entropy(m.forward(x), y);
    OpCounter counter;
    loss.backward();
    return counter.counts;
  };
  auto a = backward_ops(*plain), b = backward_ops(*fused);
  EXPECT_EQ(a["conv2d_backward_weight"], 7);
  EXPECT_EQ(b["conv2d_backward_weight"], 7 - frozen);
  EXPECT_EQ(b["conv2d_backward_input"], a["conv2d_backward_input"]);  // the input gradient still flows through
}

TEST(LayerFusion, CompiledTrainStepDropsFrozenWeightGradientKernels) {
  auto count_in_graph = [](bool freeze) {
    manual_seed(2);
    auto model = models::create("airbench", 0.25);
    int64_t frozen = 0;
    if (freeze) frozen = frozen_convs(*model, fusion::freeze_similar(*model, 2));
    optim::SGD opt(model->parameters(), optim::SGDOptions(0.1).momentum(0.9));
    Tensor x = randn({4, 3, 32, 32});
    Tensor y = randint(0, 10, {4});
    auto step = [&](const Tensor& xs, const Tensor& ys) {
      Tensor loss = cross_entropy(model->forward(xs), ys);
      opt.zero_grad();
      loss.backward();
      opt.step();
      return loss;
    };
    ExplainReport r = explain(ExplainOptions().calls(2), step, x, y);
    EXPECT_EQ(r.variants, 1);
    return std::pair<int64_t, int64_t>{r.ops["conv2d_backward_weight"], frozen};
  };
  auto [plain, none] = count_in_graph(false);
  auto [fused, frozen] = count_in_graph(true);
  EXPECT_EQ(none, 0);
  EXPECT_EQ(plain, 7);
  EXPECT_EQ(fused, plain - frozen);
}

// compile(model) in training: AOT autograd's backward graph gives the frozen
// layers no gradient and the others eager's.
TEST(LayerFusion, AotBackwardOfACompiledForwardLeavesFrozenLayersWithoutGrads) {
  auto make = [] {
    manual_seed(2);
    auto m = models::create("airbench", 0.25);
    fusion::freeze_similar(*m, 2);
    return m;
  };
  auto eager = make(), compiled_model = make();
  auto fwd = compile(compiled_model);
  Tensor x = randn({2, 3, 32, 32});
  eager->forward(x).sum().backward();
  fwd(x).sum().backward();
  auto pe = eager->named_parameters(), pc = compiled_model->named_parameters();
  ASSERT_EQ(pe.size(), pc.size());
  for (size_t i = 0; i < pe.size(); ++i) {
    ASSERT_EQ(pc[i].second.grad().defined(), pc[i].second.requires_grad()) << pc[i].first;
    ASSERT_EQ(pe[i].second.grad().defined(), pc[i].second.grad().defined()) << pc[i].first;
    if (pe[i].second.grad().defined()) {
      EXPECT_TENSOR_CLOSE(pc[i].second.grad(), pe[i].second.grad(), 1e-4, 1e-4) << pc[i].first;
    }
  }
}

}  // namespace
}  // namespace kiln
