// bf16 autocast chosen for whole graphs (compiler/capture/precision_trial.h):
// the trial's order and verdict, float32_regions' Everywhere mode against
// the graph autocast wrote, and a compiled bf16 forward that times both
// graphs, keeps the faster, records it and reads it back in a new process.
#include <gtest/gtest.h>

#include <string>

#include "capture_checks.h"
#include "compiler/capture/compiled_state.h"
#include "compiler/capture/precision_trial.h"
#include "compiler/graph/printer.h"
#include "compiler/passes/float32_regions.h"
#include "graph_builder.h"
#include "kiln/autocast.h"
#include "kiln/compile.h"
#include "ops/conv_autotune.h"
#include "ops/conv_fused.h"
#include "scoped_cache_dir.h"

namespace kiln::compiler {
namespace {

using testing::GraphBuilder;
using testing::ScopedCacheDir;

// One untimed run of each, then three timed of each, alternating; the
// smaller median wins, autocast's graph only by 3% or more.
TEST(PrecisionTrial, AlternatesAndKeepsTheSmallerMedian) {
  PrecisionTrial t("k");
  // Autocast's runs 9, 5, 5, 5 ms (the first untimed); float32's 100 (untimed), 4, 6, 30.
  const double times[] = {9e-3, 100e-3, 5e-3, 4e-3, 5e-3, 6e-3, 5e-3, 30e-3};
  for (int i = 0; i < PrecisionTrial::kRuns; ++i) {
    EXPECT_FALSE(t.decided());
    EXPECT_EQ(t.next(), i % 2 == 0 ? GraphPrecision::Autocast : GraphPrecision::Float32) << i;
    t.ran(times[i]);
  }
  EXPECT_TRUE(t.decided());
  EXPECT_EQ(t.winner(), GraphPrecision::Autocast);  // medians 5 ms against 6 ms
  EXPECT_EQ(t.summary(),
            "bfloat16 where autocast asks (whole graph timed in place: 5.00 ms as autocast wrote it, 6.00 ms in "
            "float32; medians of 3 runs each)");

  // A dynamic graph's run at another size than the first timed one's does
  // not count (the untimed first runs' sizes do not matter).
  PrecisionTrial f("k");
  f.ran(1.0, 7);
  f.ran(1.0, 8);
  for (double s : {0.5, 0.4, 0.5}) f.ran(s, 9);
  EXPECT_EQ(f.next(), GraphPrecision::Float32);
  f.ran(0.01, 10);  // a last, smaller batch
  EXPECT_EQ(f.next(), GraphPrecision::Float32) << "the same graph runs again";
  EXPECT_FALSE(f.decided());
  for (double s : {0.4, 0.5, 0.6}) f.ran(s, 9);
  EXPECT_TRUE(f.decided());
  EXPECT_EQ(f.winner(), GraphPrecision::Float32);  // 0.4 s against 0.5 s

  // Autocast's graph stays only 3% faster or more: float32 on a near tie.
  PrecisionTrial tie("k");
  for (double s : {1.0, 1.0, 0.99, 1.0, 0.99, 1.0, 0.99, 1.0}) tie.ran(s);
  EXPECT_EQ(tie.winner(), GraphPrecision::Float32);
  EXPECT_EQ(f.summary().rfind("float32 (whole graph timed in place: 500.00 ms", 0), 0u) << f.summary();
}

// Every bfloat16 layer computes in float32 in Everywhere mode, also one
// whose own timing chose bfloat16; its results are autocast's within
// bfloat16 rounding, and the float32 layer's exactly.
TEST(PrecisionTrial, Float32EverywhereWidensLayersThatChoseBfloat16) {
  ScopedCacheDir cache;
  const Shape x{2, 3, 12, 12}, w{8, 3, 3, 3};
  const Attrs conv = testing::conv2d_attrs(1).set("activation", std::string("relu"));
  record_conv_bf16_choice(OpId::conv2d, x, w, /*bias=*/true, conv, "bf16");
  GraphBuilder b;
  manual_seed(5);
  ValueId in = b.input(randn(x)), wt = b.input(randn(w).mul(0.3)), bias = b.input(randn({8}));
  auto bf16 = [&](ValueId v) { return b.op(OpId::cast, {v}, Attrs().set("dtype", DType::BFloat16)); };
  ValueId y = b.op(OpId::conv2d, {bf16(in), bf16(wt), bf16(bias)}, conv);
  b.output(b.op(OpId::cast, {y}, Attrs().set("dtype", DType::Float32)));
  Graph before = b.g;
  EXPECT_EQ(count_bfloat16_layers(b.g), 1);
  EXPECT_EQ(compute_float32_regions(b.g), conv_bf16_runs_float32(OpId::conv2d, x, w, true, conv) ? 1 : 0);
  b.g = before;
  EXPECT_EQ(compute_float32_regions(b.g, Float32Regions::Everywhere), 1);
  EXPECT_EQ(count_bfloat16_layers(b.g), 0);
  EXPECT_EQ(print(b.g),
            "graph graph(%0: f32[2, 3, 12, 12], %1: f32[8, 3, 3, 3], %2: f32[8]) {\n"
            "  %3: f32[2, 8, 12, 12] = conv2d(%0, %1, %2) {stride=[1, 1], padding=[1, 1], dilation=[1, 1], "
            "groups=1, activation=\"relu\"}\n"
            "  return (%3)\n"
            "}\n");
  testing::expect_same_results(before, b.g, b.example_inputs, 3e-2, 3e-2);
}

// A small CNN's eval forward under bf16 autocast whose convolutions chose
// bfloat16 (recorded, as their first calls would on a CPU where they win:
// construct it inside the test's ScopedCacheDir), and its input.
struct BfloatForward {
  std::shared_ptr<nn::Sequential> model;
  Tensor x;
  BfloatForward() {
    const Attrs conv = testing::conv2d_attrs(1);
    record_conv_bf16_choice(OpId::conv2d, {4, 3, 16, 16}, {16, 3, 3, 3}, true, conv, "bf16");
    record_conv_bf16_choice(OpId::conv2d, {4, 16, 16, 16}, {16, 16, 3, 3}, true, conv, "bf16");
    manual_seed(17);
    model = std::make_shared<nn::Sequential>();
    model->push_back(std::make_shared<nn::Conv2d>(nn::Conv2dOptions(3, 16, 3).padding(1)));
    model->push_back(std::make_shared<nn::ReLU>());
    model->push_back(std::make_shared<nn::Conv2d>(nn::Conv2dOptions(16, 16, 3).padding(1)));
    model->eval();
    manual_seed(3);
    x = randn({4, 3, 16, 16});
  }
  Tensor operator()(const Tensor& in) const {
    autocast amp(DType::BFloat16);
    return model->forward(in).to(DType::Float32);
  }
  // The forward compiled on the cpp backend (a new capture each call, as a new process would make).
  auto compiled() const {
    return compile([this](const Tensor& in) { return (*this)(in); }, CompileOptions().fullgraph(true).backend("cpp"));
  }
};

Tensor forward_float32(const BfloatForward& f) { return f.model->forward(f.x); }

TEST(PrecisionTrial, ACompiledBf16GraphKeepsTheFasterWholeGraphAndRecordsIt) {
  if (!conv_bf16_chosen_by_timing()) GTEST_SKIP() << "this CPU has no AVX-512: bfloat16 layers are not timed";
  ScopedCacheDir cache;
  NoGradGuard eval;  // a forward with gradients is split for the eager tape: no whole graph to time
  BfloatForward f;
  const Tensor& x = f.x;
  const Tensor want = forward_float32(f);

  auto run = f.compiled();
  auto segment = [&]() -> const Segment& { return *run.state().variants.at(0)->segments.at(0); };
  for (int i = 0; i < PrecisionTrial::kRuns; ++i) {
    // Either graph: float32's result within bfloat16 rounding.
    EXPECT_TENSOR_CLOSE(run(x), want, 3e-2, 3e-2) << "run " << i;
    if (i == 0) {
      ASSERT_NE(segment().precision_trial, nullptr) << "a graph with bfloat16 layers is timed both ways";
      EXPECT_EQ(count_bfloat16_layers(segment().executable), 2);
      EXPECT_EQ(count_bfloat16_layers(segment().precision_trial->float32_graph), 0);
    }
  }
  ASSERT_EQ(segment().precision_trial, nullptr) << "decided after " << PrecisionTrial::kRuns << " runs";
  const std::string& chose = segment().precision;
  const bool float32 = chose.rfind("float32 (whole graph timed in place", 0) == 0;
  EXPECT_TRUE(float32 || chose.rfind("bfloat16 where autocast asks (whole graph timed in place", 0) == 0) << chose;
  EXPECT_EQ(count_bfloat16_layers(segment().executable), float32 ? 0 : 2);
  const std::string key = precision_key(segment().differentiable);
  EXPECT_EQ(conv_autotune::lookup(key), float32 ? "float32" : "bf16");
  EXPECT_TENSOR_CLOSE(run(x), want, 3e-2, 3e-2);

  // A new process reads the choice: no trial. Recorded float32, it builds
  // only the float32 graph, whose result is float32's within float32 rounding.
  conv_autotune::reset_for_tests();
  conv_autotune::record(key, "float32");
  auto again = f.compiled();
  EXPECT_TENSOR_CLOSE(again(x), want, 1e-4, 1e-4);
  const Segment& s = *again.state().variants.at(0)->segments.at(0);
  EXPECT_EQ(s.precision_trial, nullptr);
  EXPECT_EQ(count_bfloat16_layers(s.executable), 0);
  EXPECT_EQ(s.precision, "float32 (recorded: faster than the graph as autocast wrote it on this machine)");

  // KILN_DISABLE_PASSES=precision_trial: autocast's graph, untimed.
  kiln::testing::ScopedEnv off("KILN_DISABLE_PASSES", "precision_trial");
  auto plain = f.compiled();
  EXPECT_TENSOR_CLOSE(plain(x), want, 3e-2, 3e-2);
  const Segment& p = *plain.state().variants.at(0)->segments.at(0);
  EXPECT_EQ(p.precision_trial, nullptr);
  EXPECT_EQ(p.precision, "");
  EXPECT_EQ(count_bfloat16_layers(p.executable), 2);
}

// A forward with gradients runs the forward and backward graphs split ahead
// of time (each with the per-layer choices), never the whole graph: no trial.
TEST(PrecisionTrial, AForwardSplitForTheEagerTapeIsNotTimed) {
  if (!conv_bf16_chosen_by_timing()) GTEST_SKIP() << "this CPU has no AVX-512: bfloat16 layers are not timed";
  ScopedCacheDir cache;
  BfloatForward f;
  const Tensor& x = f.x;
  auto run = f.compiled();
  Tensor y = run(x);
  y.sum().backward();
  const Segment& s = *run.state().variants.at(0)->segments.at(0);
  ASSERT_NE(s.aot, nullptr) << s.aot_refused;
  EXPECT_EQ(s.precision_trial, nullptr);
  EXPECT_EQ(s.precision, "");
  EXPECT_TENSOR_CLOSE(y.detach(), forward_float32(f).detach(), 3e-2, 3e-2);
}

}  // namespace
}  // namespace kiln::compiler
