// The graph tools on graphs capture really makes: a whole train step and a
// zoo model's forward verify cleanly, and the default passes keep them valid
// without adding work on activations (batch-norm folding adds small ops on
// the weights to take a whole activation pass away).
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

// Ops with an output of rank >= 2 whose dim 0 is the batch (the first
// input's dim 0; the tests' batch sizes are no weight's dim 0).
int activation_ops(const Graph& g) {
  const int64_t batch = g.type(g.inputs.at(0)).shape.at(0);
  int n = 0;
  for (const Node& node : g.nodes) {
    if (node.kind != NodeKind::Op) continue;
    bool activation = false;
    for (ValueId v : node.outputs) activation = activation || (g.type(v).shape.size() >= 2 && g.type(v).shape[0] == batch);
    n += activation;
  }
  return n;
}

template <class F>
void check_graphs(const Compiled<F>& compiled) {
  ASSERT_FALSE(compiled.state().variants.empty());
  for (const auto& variant : compiled.state().variants) {
    for (const auto& segment : variant->segments) {
      const Graph& g = segment->graph;
      EXPECT_EQ(verify(g), std::vector<std::string>{}) << print(g);
      Graph optimized = g;
      run_passes(optimized, default_passes());
      EXPECT_LE(activation_ops(optimized), activation_ops(g)) << print(optimized);
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
