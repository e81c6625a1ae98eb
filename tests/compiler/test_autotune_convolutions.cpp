// max-autotune's convolutions: the pass that marks them, the `algorithm`
// attribute of the three conv ops, and a compiled train step that tunes,
// matches the default mode and keeps its choices on disk for the next process.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>

#include <nlohmann/json.hpp>

#include "capture_checks.h"
#include "compiler/capture/compiled_state.h"
#include "compiler/graph/interpreter.h"
#include "compiler/graph/printer.h"
#include "compiler/passes/autotune_convolutions.h"
#include "core/cpu_features.h"
#include "compiler/passes/pipeline.h"
#include "graph_builder.h"
#include "kiln/compile.h"
#include "kiln/explain.h"
#include "ops/conv_autotune.h"
#include "scoped_cache_dir.h"
#include "testing/scoped_env.h"

namespace kiln::compiler {
namespace {

namespace fs = std::filesystem;
using testing::GraphBuilder;
using testing::ScopedCacheDir;

// graph_builder.h's conv2d_attrs(1), with an `algorithm` where given.
Attrs conv_attrs(const char* algorithm = nullptr) {
  Attrs a = testing::conv2d_attrs(1);
  if (algorithm) a.set("algorithm", std::string(algorithm));
  return a;
}

int tuned_convs(const Graph& g) {
  int n = 0;
  for (const Node& node : g.nodes)
    n += node.kind == NodeKind::Op && node.attrs.has("algorithm") && node.attrs.s("algorithm") == "tuned";
  return n;
}

TEST(AutotuneConvolutions, MarksFloat32CpuConvolutionsOnly) {
  GraphBuilder b;
  ValueId x = b.input(randn({2, 4, 6, 6}));
  ValueId w = b.input(randn({4, 4, 3, 3}));
  ValueId y = b.op(OpId::conv2d, {x, w}, conv_attrs());
  ValueId x64 = b.input(randn({2, 4, 6, 6}, TensorOptions().with_dtype(DType::Float64)));
  ValueId w64 = b.input(randn({4, 4, 3, 3}, TensorOptions().with_dtype(DType::Float64)));
  ValueId y64 = b.op(OpId::conv2d, {x64, w64}, conv_attrs());  // no oneDNN in float64: left alone
  ValueId direct = b.op(OpId::conv2d, {x, w}, conv_attrs("direct"));  // chosen by the user: left alone
  b.output(b.op(OpId::relu, {y}));
  b.output(y64);
  b.output(direct);
  EXPECT_EQ(autotune_convolutions(b.g), 1);
  EXPECT_EQ(tuned_convs(b.g), 1);
  EXPECT_NE(print(b.g).find("groups=1, algorithm=\"tuned\"}"), std::string::npos) << print(b.g);
  EXPECT_EQ(autotune_convolutions(b.g), 0);  // idempotent
}

TEST(AutotuneConvolutions, OnlyMaxAutotuneRunsThePass) {
  auto names = [](const std::vector<Pass>& ps) {
    std::vector<std::string> n;
    for (const Pass& p : ps) n.push_back(p.name);
    return n;
  };
  auto has = [](const std::vector<std::string>& v, const char* s) { return std::find(v.begin(), v.end(), s) != v.end(); };
  EXPECT_FALSE(has(names(default_passes()), "autotune_convolutions"));
  EXPECT_FALSE(has(names(default_passes("reduce-overhead")), "autotune_convolutions"));
  EXPECT_EQ(names(default_passes("max-autotune")).back(), "autotune_convolutions");
}

// The three ops with algorithm auto, direct and tuned give the same results
// (Winograd against direct: relative L2 below 5e-6); tuned records one choice
// per op kind and shape; an unknown algorithm is a kiln::Error naming it.
TEST(AutotuneConvolutions, AlgorithmsAgreeAndTunedRecordsEachKindOnce) {
  ScopedCacheDir cache;
  manual_seed(5);
  const Tensors in = {randn({8, 16, 12, 12}), randn({32, 16, 3, 3}), randn({8, 32, 12, 12})};
  GraphBuilder b;
  ValueId x = b.input(in[0]);
  ValueId w = b.input(in[1]);
  ValueId go = b.input(in[2]);
  for (const char* algo : {"auto", "direct", "tuned"}) {
    b.output(b.op(OpId::conv2d, {x, w}, conv_attrs(algo)));
    b.output(b.op(OpId::conv2d_backward_input, {go, w}, conv_attrs(algo).set("input_shape", Shape{8, 16, 12, 12})));
    b.output(b.op(OpId::conv2d_backward_weight, {go, x}, conv_attrs(algo).set("weight_shape", Shape{32, 16, 3, 3})));
  }
  Tensors out = Interpreter(b.g).run(in);
  ASSERT_EQ(out.size(), 9u);
  for (int k = 0; k < 3; ++k) {
    EXPECT_TENSOR_CLOSE(out[3 + k], out[k], 1e-4, 1e-4) << "direct, kind " << k;
    EXPECT_TENSOR_CLOSE(out[6 + k], out[k], 1e-4, 1e-4) << "tuned, kind " << k;
  }
  EXPECT_EQ(conv_autotune::stats().measured, 3);
  Interpreter(b.g).run(in);  // the choices are remembered: nothing timed again
  EXPECT_EQ(conv_autotune::stats().measured, 3);

  GraphBuilder bad;
  ValueId bx = bad.input(randn({1, 2, 4, 4}));
  ValueId bw = bad.input(randn({2, 2, 3, 3}));
  try {
    bad.op(OpId::conv2d, {bx, bw}, conv_attrs("fastest"));
    ADD_FAILURE() << "no error for algorithm \"fastest\"";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("algorithm 'fastest'"), std::string::npos) << e.what();
  }
}

// Under autocast a bfloat16 convolution times its bfloat16 and float32 paths
// on its first call (any mode); the choice goes into the same table, so the
// next process on this machine times nothing (a bf16 model's warm start).
TEST(AutotuneConvolutions, Bf16PrecisionChoicesAreKeptForTheNextProcess) {
  if (!cpu_has_avx512()) GTEST_SKIP() << "no AVX-512: bfloat16 convolutions always compute in float32 here, untimed";
  ScopedCacheDir cache;
  auto bf16 = TensorOptions().with_dtype(DType::BFloat16);
  const Tensors in = {randn({8, 16, 12, 12}, bf16), randn({32, 16, 3, 3}, bf16)};
  GraphBuilder b;
  b.output(b.op(OpId::conv2d, {b.input(in[0]), b.input(in[1])}, conv_attrs()));
  Interpreter(b.g).run(in);
  EXPECT_EQ(conv_autotune::stats().measured, 1);
  std::ifstream table(cache.table());
  std::string line;
  ASSERT_TRUE(std::getline(table, line));
  EXPECT_NE(line.find(" bf16:0:8,16,12,12:32,3,3:"), std::string::npos) << line;
  EXPECT_TRUE(line.ends_with("\tbf16") || line.ends_with("\tbf16-alone") || line.ends_with("\tfloat32")) << line;
  conv_autotune::reset_for_tests();  // a new process on the same cache
  Interpreter(b.g).run(in);
  EXPECT_EQ(conv_autotune::stats().measured, 0);
  EXPECT_EQ(conv_autotune::stats().loaded, 1);
}

// A choice measured under earlier rules (another candidate won then) is not
// this machine's: the table's line for it is ignored and the layer measured
// again; a line under the current rules is read.
TEST(AutotuneConvolutions, ChoicesOfEarlierRulesAreMeasuredAgain) {
  ScopedCacheDir cache;
  const std::string key = conv_autotune::machine_key();
  const std::string rules = "|rules" + std::to_string(conv_autotune::kChoiceRules);
  ASSERT_TRUE(key.ends_with(rules)) << key;
  const std::string before = key.substr(0, key.size() - rules.size());  // a key of rules 1
  fs::create_directories(cache.table().parent_path());
  std::ofstream(cache.table()) << before << " stale_shape\tbf16\n"
                               << before + "|rules" + std::to_string(conv_autotune::kChoiceRules - 1)
                               << " older_shape\tbf16\n"
                               << key << " current_shape\tfloat32\n";
  conv_autotune::reset_for_tests();
  EXPECT_EQ(conv_autotune::lookup("stale_shape"), std::nullopt);
  EXPECT_EQ(conv_autotune::lookup("older_shape"), std::nullopt);
  EXPECT_EQ(conv_autotune::lookup("current_shape"), "float32");
  EXPECT_EQ(conv_autotune::stats().loaded, 1);
}

// A zoo model's compiled train step in mode max-autotune (SGD with momentum
// and weight decay): three steps' losses and the state afterwards.
std::pair<std::vector<double>, nn::TensorDict> train_three_steps(const std::string& mode, int* tuned = nullptr) {
  manual_seed(12);
  auto model = models::create("airbench", 0.25);
  optim::SGD opt(model->parameters(), optim::SGDOptions(0.05).momentum(0.9).weight_decay(5e-4));
  auto step = kiln::testing::compile_train_step(model, opt,
                                                CompileOptions().fullgraph(true).backend("cpp").mode(mode).name("step"));
  manual_seed(13);
  std::vector<double> losses;
  for (int i = 0; i < 3; ++i) losses.push_back(step(randn({8, 3, 32, 32}), randint(0, 10, {8})).item());
  if (tuned) {
    const CompiledState& st = step.state();
    *tuned = 0;
    for (const auto& seg : st.variants.back()->segments) {
      *tuned += tuned_convs(seg->executable);
      if (seg->aot) *tuned += tuned_convs(seg->aot->graphs().forward) + tuned_convs(seg->aot->graphs().backward);
    }
  }
  nn::TensorDict state;
  for (const auto& [name, t] : model->state_dict()) state.emplace_back(name, t.detach().clone());
  return {losses, state};
}

TEST(AutotuneConvolutions, MaxAutotuneTrainStepMatchesDefaultAndTheNextProcessReadsItsChoices) {
  ScopedCacheDir cache;
  auto [want_losses, want_state] = train_three_steps("default");
  EXPECT_EQ(conv_autotune::stats().measured, 0);
  int tuned = 0;
  auto [got_losses, got_state] = train_three_steps("max-autotune", &tuned);
  // airbench: 7 convolutions forward, their input gradients (but the first's)
  // and weight gradients.
  EXPECT_GE(tuned, 7 + 6 + 7);
  for (size_t i = 0; i < want_losses.size(); ++i)
    EXPECT_NEAR(got_losses[i], want_losses[i], 1e-4 * std::abs(want_losses[i])) << "step " << i;
  ASSERT_EQ(got_state.size(), want_state.size());
  for (size_t i = 0; i < got_state.size(); ++i)
    EXPECT_TENSOR_CLOSE(got_state[i].second, want_state[i].second, 1e-3, 1e-4) << got_state[i].first;
  const int64_t measured = conv_autotune::stats().measured;
  EXPECT_GT(measured, 0);
  ASSERT_TRUE(fs::exists(cache.table()));
  std::ifstream in(cache.table());
  int64_t lines = 0;
  for (std::string line; std::getline(in, line);) {
    ++lines;
    EXPECT_TRUE(line.ends_with("\tauto") || line.ends_with("\tdirect")) << line;
  }
  EXPECT_EQ(lines, measured);

  conv_autotune::reset_for_tests();  // a new process on the same cache
  train_three_steps("max-autotune");
  EXPECT_EQ(conv_autotune::stats().measured, 0);
  EXPECT_EQ(conv_autotune::stats().loaded, measured);
}

// kiln explain lists each CPU convolution of the compiled step with the
// per-layer choices made while explain ran it: the tuned algorithm and
// oneDNN's kernel for it; with bfloat16 autocast, each layer's precision.
TEST(AutotuneConvolutions, ExplainListsEachConvolutionWithItsChoiceAndKernel) {
  ScopedCacheDir cache;
  manual_seed(6);
  auto conv = std::make_shared<nn::Conv2d>(nn::Conv2dOptions(3, 8, 3).padding(1));
  optim::SGD opt(conv->parameters(), optim::SGDOptions(0.1));
  Tensor x = randn({4, 3, 16, 16});
  bool bf16 = false;
  auto step = [&](const Tensor& xb) {
    Tensor loss;
    {
      std::optional<autocast> amp;
      if (bf16) amp.emplace(DType::BFloat16);
      Tensor y = conv->forward(xb);
      loss = mul(y, y).mean();
    }
    opt.zero_grad();
    loss.backward();
    opt.step();
    return loss;
  };
  ExplainReport r = explain(ExplainOptions().calls(2).compile(CompileOptions().backend("cpp").mode("max-autotune")),
                            step, x);
  // The forward and the weight gradient (the input needs none).
  ASSERT_EQ(r.convolutions.size(), 2u) << r.str();
  for (const ExplainConvolution& c : r.convolutions) {
    EXPECT_EQ(c.precision, "float32");
    EXPECT_TRUE(c.algorithm == "tuned: direct" || c.algorithm == "tuned: auto") << c.algorithm;
    EXPECT_FALSE(c.impl.empty());
    EXPECT_EQ(c.shapes.find("grad"), std::string::npos) << c.shapes;
  }
  EXPECT_NE(r.convolutions[0].node.find("conv2d("), std::string::npos) << r.convolutions[0].node;
  EXPECT_NE(r.convolutions[1].node.find("conv2d_backward_weight("), std::string::npos) << r.convolutions[1].node;
  EXPECT_NE(r.str().find("algorithm tuned: "), std::string::npos);
  EXPECT_EQ(r.json()["convolutions"].size(), 2u);

  // Default mode: oneDNN's algorithm, each layer's precision timed before
  // the graph first runs: a layer that runs bfloat16 has bf16 operands, one
  // that measured float32 faster computes on float32 values (float32_regions).
  bf16 = true;
  ExplainReport b = explain(ExplainOptions().calls(2).compile(CompileOptions().backend("cpp")), step, x);
  ASSERT_EQ(b.convolutions.size(), 2u) << b.str();
  for (const ExplainConvolution& c : b.convolutions) {
    EXPECT_EQ(c.algorithm, "auto");
    if (c.precision == "bfloat16") EXPECT_NE(c.shapes.find("bf16["), std::string::npos) << c.shapes;
    else EXPECT_TRUE(c.precision == "float32" && c.shapes.find("bf16[") == std::string::npos) << c.precision << c.shapes;
  }
}

}  // namespace
}  // namespace kiln::compiler
