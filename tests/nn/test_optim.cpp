// Optimizers against torch.optim (tools/goldens/gen_optim.py): three steps on
// two parameters with fixed gradients, including a parameter skipped for
// lack of a grad; state dicts; schedules; EMA.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "kiln/optim.h"
#include "kiln/kiln.h"
#include "testing/errors.h"
#include "testing/golden.h"

namespace kiln {
namespace {

const testing::Goldens& G() { return testing::goldens("optim"); }

std::unique_ptr<optim::Optimizer> make(const std::string& name, std::vector<Tensor> ps) {
  auto sgd = [&](optim::SGDOptions o) { return std::make_unique<optim::SGD>(std::move(ps), o); };
  auto adamw = [&](optim::AdamWOptions o) { return std::make_unique<optim::AdamW>(std::move(ps), o); };
  if (name == "sgd") return sgd(optim::SGDOptions(0.1));
  if (name == "sgd_wd") return sgd(optim::SGDOptions(0.1).weight_decay(0.01));
  if (name == "sgd_momentum") return sgd(optim::SGDOptions(0.1).momentum(0.9));
  if (name == "sgd_damp_wd") return sgd(optim::SGDOptions(0.05).momentum(0.9).dampening(0.2).weight_decay(0.01));
  if (name == "sgd_nesterov" || name == "sgd_nesterov_f64")
    return sgd(optim::SGDOptions(0.1).momentum(0.9).weight_decay(5e-4).nesterov(true));
  if (name == "sgd_skip") return sgd(optim::SGDOptions(0.1).momentum(0.9).weight_decay(0.01));
  if (name == "adamw" || name == "adamw_skip") return adamw(optim::AdamWOptions(0.01));
  if (name == "adamw_custom") return adamw(optim::AdamWOptions(0.02).betas(0.8, 0.95).eps(1e-6).weight_decay(0.1));
  if (name == "adamw_f64") return adamw(optim::AdamWOptions(0.01).weight_decay(0.05));
  ADD_FAILURE() << name;
  return nullptr;
}

const char* kCases[] = {"sgd",          "sgd_wd", "sgd_momentum", "sgd_damp_wd",  "sgd_nesterov", "sgd_skip",
                        "sgd_nesterov_f64", "adamw", "adamw_custom", "adamw_skip", "adamw_f64"};

std::vector<Tensor> init_params(const std::string& c) {
  return {G()[c + ".p0.init"].clone().requires_grad_(), G()[c + ".p1.init"].clone().requires_grad_()};
}
void set_grads(const std::string& c, std::vector<Tensor>& ps, int s) {
  for (size_t i = 0; i < ps.size(); ++i) {
    std::string key = c + ".g" + std::to_string(i) + ".step" + std::to_string(s);
    ps[i].set_grad(G().has(key) ? G()[key] : Tensor());
  }
}

TEST(Optim, ThreeStepsMatchTorch) {
  for (std::string c : kCases) {
    SCOPED_TRACE(c);
    bool f64 = c.ends_with("_f64");
    double rtol = f64 ? 1e-12 : 2e-6, atol = f64 ? 1e-13 : 2e-6;
    std::vector<Tensor> ps = init_params(c);
    auto opt = make(c, ps);
    for (int s = 0; s < 3; ++s) {
      set_grads(c, ps, s);
      opt->step();
      for (size_t i = 0; i < ps.size(); ++i)
        EXPECT_TENSOR_CLOSE(ps[i], G()[c + ".p" + std::to_string(i) + ".step" + std::to_string(s)], rtol, atol)
            << "param " << i << " step " << s;
    }
    // The saved state holds torch's buffers under the documented names.
    nn::TensorDict sd = opt->state_dict();
    for (const auto& [k, t] : sd) {
      if (G().has(c + ".state." + k)) {
        EXPECT_TENSOR_CLOSE(t, G()[c + ".state." + k], rtol, atol) << k;
      }
    }
    int matched = 0;
    for (const auto& [k, t] : sd) matched += G().has(c + ".state." + k);
    EXPECT_GT(matched, c == "sgd" || c == "sgd_wd" ? -1 : 1);
  }
}

TEST(Optim, StateDictNames) {
  std::vector<Tensor> ps = init_params("sgd_skip");
  optim::SGD sgd(ps, optim::SGDOptions(0.1).momentum(0.9));
  set_grads("sgd_skip", ps, 1);  // p1 has no grad: no buffer for it
  sgd.step();
  std::vector<std::string> names;
  for (const auto& [k, t] : sgd.state_dict()) names.push_back(k);
  EXPECT_EQ(names, (std::vector<std::string>{"lr", "momentum", "dampening", "weight_decay", "nesterov",
                                             "momentum_buffer.0"}));
  EXPECT_EQ(sgd.state_dict()[0].second.dim(), 0);
  optim::AdamW adam(ps, {});
  set_grads("sgd_skip", ps, 0);
  adam.step();
  names.clear();
  for (const auto& [k, t] : adam.state_dict()) names.push_back(k);
  EXPECT_EQ(names, (std::vector<std::string>{"lr", "beta1", "beta2", "eps", "weight_decay", "step", "step.0",
                                             "exp_avg.0", "exp_avg_sq.0", "step.1", "exp_avg.1", "exp_avg_sq.1"}));
}

// Two steps, save, load into a fresh optimizer, one more step on both: equal.
template <typename Opt, typename Options>
void check_round_trip(const Options& o) {
  std::vector<Tensor> a = init_params("adamw"), b = init_params("adamw");
  Opt oa(a, o);
  for (int s = 0; s < 2; ++s) {
    set_grads("adamw", a, s);
    oa.step();
  }
  for (size_t i = 0; i < a.size(); ++i) {
    NoGradGuard ng;
    copy_(b[i], a[i]);
  }
  Opt ob(b, Options{});
  ob.load_state_dict(oa.state_dict());
  EXPECT_EQ(ob.lr(), oa.lr());
  set_grads("adamw", a, 2);
  set_grads("adamw", b, 2);
  oa.step();
  ob.step();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TENSOR_CLOSE(a[i], b[i], 0, 0);
}

TEST(Optim, StateRoundTrip) {
  check_round_trip<optim::SGD>(optim::SGDOptions(0.05).momentum(0.9).weight_decay(1e-3).nesterov(true));
  check_round_trip<optim::AdamW>(optim::AdamWOptions(0.003).beta1(0.85).weight_decay(0.2));
}

TEST(Optim, LoadStateErrors) {
  std::vector<Tensor> ps = init_params("sgd");
  optim::SGD sgd(ps, optim::SGDOptions(0.1).momentum(0.9));
  nn::TensorDict bad = {{"lr", full({}, 0.1, dtype(DType::Float64))},
                        {"momentum_buffer.0", zeros({3, 4})},
                        {"momentum_buffer.7", zeros({5})},
                        {"momentum_buffer.x", zeros({5})},
                        {"exp_avg.0", zeros({4, 3})}};
  EXPECT_KILN_ERROR(sgd.load_state_dict(bad), "SGD.load_state_dict", "2 parameters",
                    "\"momentum_buffer.0\" has shape [3, 4], but parameter 0 has shape [4, 3]",
                    "\"momentum_buffer.7\" names parameter 7", "\"momentum_buffer.x\"", "unexpected key \"exp_avg.0\"");
  optim::AdamW adam(ps, {});
  EXPECT_KILN_ERROR(adam.load_state_dict({{"exp_avg.0", zeros({4, 3})}}), "parameter 0 needs all of");
  EXPECT_KILN_ERROR(adam.load_state_dict({{"momentum_buffer.0", zeros({4, 3})}}), "unexpected key");
}

// Optimizer options read like nn's: chainable setters, getters of the same name.
TEST(Optim, OptionsAreChainableBuilders) {
  optim::SGDOptions s = optim::SGDOptions(0.1).momentum(0.9).nesterov(true).weight_decay(5e-4);
  EXPECT_EQ(s.lr(), 0.1);
  EXPECT_EQ(s.momentum(), 0.9);
  EXPECT_TRUE(s.nesterov());
  EXPECT_EQ(s.weight_decay(), 5e-4);
  EXPECT_EQ(s.dampening(), 0.0);
  EXPECT_EQ(optim::SGDOptions().lr(), 0.01);
  optim::AdamWOptions a = optim::AdamWOptions(3e-4).betas(0.8, 0.95).weight_decay(0.1);
  EXPECT_EQ(a.lr(), 3e-4);
  EXPECT_EQ(a.beta1(), 0.8);
  EXPECT_EQ(a.beta2(), 0.95);
  EXPECT_EQ(a.eps(), 1e-8);
  EXPECT_EQ(a.weight_decay(), 0.1);
  std::vector<Tensor> ps = init_params("sgd");
  optim::SGD opt(ps, s);
  EXPECT_EQ(opt.lr(), 0.1);
  EXPECT_TRUE(opt.options.nesterov());
  optim::AdamW adam(ps, a);
  EXPECT_EQ(adam.options.beta2(), 0.95);
}

TEST(Optim, ConstructionErrors) {
  std::vector<Tensor> ps = init_params("sgd");
  EXPECT_KILN_ERROR(optim::SGD(ps, optim::SGDOptions(0.1).momentum(0).nesterov(true)), "nesterov");
  EXPECT_KILN_ERROR(optim::SGD(ps, optim::SGDOptions(-1)), "lr must be >= 0");
  EXPECT_KILN_ERROR(optim::SGD({ps[0], ps[0]}, {}), "more than once");
  EXPECT_KILN_ERROR(optim::SGD({zeros({2}, dtype(DType::Int64))}, {}), "floating-point");
  EXPECT_KILN_ERROR(optim::AdamW(ps, optim::AdamWOptions().beta1(1.0)), "betas");
}

TEST(Optim, ZeroGradAndSkippedParams) {
  std::vector<Tensor> ps = init_params("sgd");
  optim::SGD sgd(ps, optim::SGDOptions(0.1));
  set_grads("sgd", ps, 0);
  sgd.zero_grad();
  for (auto& p : ps) EXPECT_FALSE(p.grad().defined());
  std::vector<float> before = ps[0].to_vector<float>();
  sgd.step();  // no grads: nothing moves
  EXPECT_EQ(ps[0].to_vector<float>(), before);
}

TEST(Optim, TrainsATinyModel) {
  // A linear regression that SGD with momentum fits.
  manual_seed(3);
  nn::Linear lin(3, 1);
  Tensor x = randn({64, 3});
  Tensor y = matmul(x, from_vector(std::vector<float>{1.0f, -2.0f, 0.5f}, {3, 1})) + 0.3;
  optim::SGD opt(lin.parameters(), optim::SGDOptions(0.1).momentum(0.9));
  double first = 0, last = 0;
  for (int i = 0; i < 100; ++i) {
    opt.zero_grad();
    Tensor loss = mean(pow(lin.forward(x) - y, 2.0));
    if (i == 0) first = loss.item();
    last = loss.item();
    loss.backward();
    opt.step();
  }
  EXPECT_LT(last, first * 1e-3);
}

TEST(Schedule, StepLRMatchesTorch) {
  optim::StepLR s(0.1, 3, 0.5);
  std::vector<double> want = G()["sched.step_lr"].to_vector<double>();
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(s.lr_at(static_cast<int64_t>(i)), want[i], 1e-15) << i;
}

TEST(Schedule, CosineMatchesTorchCosineAnnealing) {
  optim::CosineLR s(0.1, 10, 0, 0.001);
  std::vector<double> want = G()["sched.cosine"].to_vector<double>();
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(s.lr_at(static_cast<int64_t>(i)), want[i], 1e-12) << i;
  EXPECT_DOUBLE_EQ(s.lr_at(50), 0.001);  // stays at the floor after the end
}

TEST(Schedule, CosineWarmup) {
  optim::CosineLR s(0.4, 110, 10);
  EXPECT_DOUBLE_EQ(s.lr_at(0), 0.0);
  EXPECT_DOUBLE_EQ(s.lr_at(5), 0.2);
  EXPECT_DOUBLE_EQ(s.lr_at(10), 0.4);
  EXPECT_NEAR(s.lr_at(60), 0.2, 1e-15);
  EXPECT_NEAR(s.lr_at(35), 0.2 * (1 + std::cos(std::numbers::pi / 4)), 1e-15);
  EXPECT_NEAR(s.lr_at(110), 0.0, 1e-15);
  EXPECT_KILN_ERROR(optim::CosineLR(0.1, 5, 10).lr_at(0), "warmup");
}

TEST(Schedule, PiecewiseLinearMatchesNumpyInterp) {
  optim::PiecewiseLinearLR s({0, 5, 20}, {0.0, 0.4, 0.0});
  std::vector<double> want = G()["sched.interp"].to_vector<double>();
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(s.lr_at(static_cast<int64_t>(i)), want[i], 1e-15) << i;
  EXPECT_DOUBLE_EQ(s.lr_at(-3), 0.0);
  EXPECT_KILN_ERROR(optim::PiecewiseLinearLR({0, 5, 5}, {1, 2, 3}), "increase strictly");
  EXPECT_KILN_ERROR(optim::PiecewiseLinearLR({0, 5}, {1}), "as many steps as lrs");
  std::vector<Tensor> ps = init_params("sgd");
  optim::SGD opt(ps, {});
  s.apply(opt, 5);
  EXPECT_DOUBLE_EQ(opt.lr(), 0.4);
}

TEST(EMA, AveragesParametersAndBuffers) {
  nn::Sequential m({std::make_shared<nn::Linear>(2, 2), std::make_shared<nn::BatchNorm2d>(2)});
  Tensor w = m[0]->named_parameters()[0].second;
  {
    NoGradGuard ng;
    fill_(w, 1.0);
  }
  optim::EMA ema(m, 0.9);
  EXPECT_EQ(ema.averaged().size(), m.state_dict().size());
  {
    NoGradGuard ng;
    fill_(w, 2.0);
    Tensor nbt = m[1]->named_buffers()[2].second;
    fill_(nbt, 7.0);
  }
  ema.update(m);  // 0.9*1 + 0.1*2
  EXPECT_TENSOR_CLOSE(ema.averaged()[0].second, full({2, 2}, 1.1), 1e-6, 1e-6);
  ema.update(m);  // 0.9*1.1 + 0.1*2
  EXPECT_TENSOR_CLOSE(ema.averaged()[0].second, full({2, 2}, 1.19), 1e-6, 1e-6);
  EXPECT_EQ(ema.averaged().back().second.item<int64_t>(), 7);  // integers copied
  EXPECT_EQ(ema.averaged()[0].second.impl() == w.impl(), false);
  ema.copy_to(m);
  EXPECT_TENSOR_CLOSE(w, full({2, 2}, 1.19), 1e-6, 1e-6);
  nn::Linear other(3, 3);
  EXPECT_KILN_ERROR(ema.update(other), "EMA.update", "names or shapes");
  EXPECT_KILN_ERROR(optim::EMA(m, 1.5), "decay");
}

}  // namespace
}  // namespace kiln
