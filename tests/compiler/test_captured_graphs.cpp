// The graph tools on graphs capture really makes: a whole train step and a
// zoo model's forward verify cleanly, and the default passes keep them valid
// without growing them.
#include <gtest/gtest.h>

#include "capture_checks.h"
#include "compiler/capture/compiled_state.h"
#include "compiler/graph/printer.h"
#include "compiler/graph/verifier.h"
#include "compiler/passes/pipeline.h"
#include "kiln/compile.h"
#include "kiln/kiln.h"

namespace kiln::compiler {
namespace {

template <class F>
void check_graphs(const Compiled<F>& compiled) {
  ASSERT_FALSE(compiled.state().variants.empty());
  for (const auto& variant : compiled.state().variants) {
    for (const auto& segment : variant->segments) {
      const Graph& g = segment->graph;
      EXPECT_EQ(verify(g), std::vector<std::string>{}) << print(g);
      Graph optimized = g;
      run_passes(optimized, default_passes());
      EXPECT_LE(optimized.num_ops(), g.num_ops());
      EXPECT_EQ(optimized.inputs.size(), g.inputs.size());
      EXPECT_EQ(optimized.outputs.size(), g.outputs.size());
    }
  }
}

TEST(CapturedGraphs, TrainStepVerifiesAndSurvivesThePasses) {
  manual_seed(5);
  auto model = models::tutorial_cnn();
  optim::SGD opt(model->parameters(), optim::SGDOptions(0.05).momentum(0.9).nesterov(true).weight_decay(5e-4));
  auto step = kiln::testing::compile_train_step(model, opt, CompileOptions().fullgraph(true).name("train_step"));
  for (int i = 0; i < 2; ++i) step(randn({4, 3, 32, 32}), randint(0, 10, {4}));
  check_graphs(step);
}

TEST(CapturedGraphs, ModelForwardVerifiesAndSurvivesThePasses) {
  manual_seed(6);
  auto model = models::create("airbench", 0.5);
  model->eval();
  auto forward = compile(model);
  forward(randn({2, 3, 32, 32}));
  check_graphs(forward);
}

}  // namespace
}  // namespace kiln::compiler
