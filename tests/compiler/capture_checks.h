// Compiled vs eager checks shared by the capture tests.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "compiler/capture/compiled_state.h"
#include "kiln/compile.h"
#include "kiln/kiln.h"
#include "testing/compare.h"

namespace kiln::testing {

// A zoo model compiled (kiln::compile(module)) against an identical eager
// twin: forward outputs and every parameter gradient over two steps (the
// trace and a replay) within 1e-5 relative, and one variant.
inline void check_model(const std::string& name, bool training, int64_t batch = 4) {
  const double width = name == "airbench" ? 0.5 : 1.0;
  manual_seed(3);
  auto a = models::create(name, width);
  manual_seed(3);
  auto b = models::create(name, width);
  a->train(training);
  b->train(training);
  auto cb = compile(b);
  for (int step = 0; step < 2; ++step) {
    Tensor x = randn({batch, 3, 32, 32});
    Tensor ya = a->forward(x), yb = cb(x);
    EXPECT_TENSOR_CLOSE(yb, ya, 1e-5, 1e-5) << name << " training=" << training << " step " << step;
    ya.sum().backward();
    yb.sum().backward();
    auto pa = a->named_parameters(), pb = b->named_parameters();
    ASSERT_EQ(pa.size(), pb.size());
    for (size_t i = 0; i < pa.size(); ++i) {
      ASSERT_TRUE(pb[i].second.grad().defined()) << name << " " << pb[i].first;
      EXPECT_TENSOR_CLOSE(pb[i].second.grad(), pa[i].second.grad(), 1e-5, 1e-5)
          << name << " training=" << training << " step " << step << " " << pa[i].first;
    }
  }
  EXPECT_EQ(cb.stats().variants, 1) << name;
}

// A zoo model in eval mode (airbench at width 0.25) with running statistics
// as after training, not a fresh model's identity, so a pass that folds or
// fuses batch norms has real numbers to get wrong: its eager output on a
// random batch of two, the compiled output on `backend`, and the graph the
// compiled forward ran.
struct CompiledEval {
  Tensor want, got;
  compiler::Graph executable;
};
inline CompiledEval compile_zoo_eval(const std::string& name, const std::string& backend, uint64_t seed) {
  manual_seed(seed);
  std::shared_ptr<nn::Module> m = models::create(name, name == "airbench" ? 0.25 : 1.0);
  for (auto& [key, t] : m->named_buffers()) {
    if (key.find("running_mean") != std::string::npos) t.copy_(mul(randn(t.shape()), 0.1));
    if (key.find("running_var") != std::string::npos) t.copy_(add(rand(t.shape()), 0.5));
  }
  m->eval();
  NoGradGuard ng;
  Tensor x = randn({2, 3, 32, 32});
  CompiledEval r;
  r.want = m->forward(x);
  auto cm = compile(m, CompileOptions().backend(backend));
  r.got = cm(x);
  r.executable = cm.state().variants.back()->segments.at(0)->executable;
  return r;
}

// A whole train step compiled: cross entropy, zero_grad, backward and the
// optimizer's step in one function.
template <typename Module, typename Optimizer>
auto compile_train_step(Module& model, Optimizer& opt, CompileOptions options = {}) {
  return compile(
      [&model, &opt](const Tensor& x, const Tensor& y) {
        Tensor loss = cross_entropy(model->forward(x), y);
        opt.zero_grad();
        loss.backward();
        opt.step();
        return loss;
      },
      options);
}

// Two SGD-with-momentum train steps of zoo model `name` (at `width`),
// compiled on the cpp backend and eager, from the same weights on the same
// random batches of four: losses within 1e-4 relative, then every weight
// within 1e-4. Returns the graph the compiled step ran.
inline compiler::Graph expect_compiled_train_steps_match_eager(const std::string& name, double width, uint64_t seed) {
  manual_seed(seed);
  auto eager = models::create(name, width);
  manual_seed(seed);
  auto compiled = models::create(name, width);
  optim::SGD opt_e(eager->parameters(), optim::SGDOptions(0.05).momentum(0.9));
  optim::SGD opt_c(compiled->parameters(), optim::SGDOptions(0.05).momentum(0.9));
  auto step = compile_train_step(compiled, opt_c, CompileOptions().fullgraph(true).backend("cpp"));
  manual_seed(seed + 1);
  for (int i = 0; i < 2; ++i) {
    Tensor x = randn({4, 3, 32, 32}), y = randint(0, 10, {4});
    Tensor loss_e = cross_entropy(eager->forward(x), y);
    opt_e.zero_grad();
    loss_e.backward();
    opt_e.step();
    EXPECT_NEAR(step(x, y).item(), loss_e.item(), 1e-4 * std::abs(loss_e.item())) << name << " step " << i;
  }
  auto pe = eager->state_dict(), pc = compiled->state_dict();
  EXPECT_EQ(pe.size(), pc.size());
  for (size_t i = 0; i < pe.size() && i < pc.size(); ++i)
    EXPECT_TENSOR_CLOSE(pc[i].second, pe[i].second, 1e-4, 1e-5) << name << " " << pe[i].first;
  return step.state().variants.back()->segments.at(0)->executable;
}

}  // namespace kiln::testing
