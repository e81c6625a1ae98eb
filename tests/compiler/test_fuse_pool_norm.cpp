// An eval max-pool and the batch norm after it as plain graph ops that fuse
// into one kernel: before/expected graphs, the cases left alone, and the
// generated kernel against the unfused graph.
#include <gtest/gtest.h>

#include "compiler/backend/cpp_executable.h"
#include "compiler/graph/printer.h"
#include "compiler/passes/dead_code.h"
#include "compiler/passes/fuse_pool_norm.h"
#include "graph_builder.h"

namespace kiln::compiler {
namespace {

using testing::GraphBuilder;

Attrs pool_attrs(bool indices) {
  return Attrs()
      .set("kernel_size", std::vector<int64_t>{2, 2})
      .set("stride", std::vector<int64_t>{2, 2})
      .set("padding", std::vector<int64_t>{0, 0})
      .set("dilation", std::vector<int64_t>{1, 1})
      .set("ceil_mode", false)
      .set("indices", indices)
      .set("input_layout", std::string("nChw16c"))
      .set("output_layout", std::string("nChw16c"));
}

// x [2, 2, 7, 9, 16] (32 channels, nChw16c; odd H and W: the last row and
// column fall outside every window) -> max_pool2d -> batch_norm -> (activation).
struct PoolNorm {
  GraphBuilder b;
  explicit PoolNorm(const std::string& activation, bool training = false, bool indices = false) {
    manual_seed(3);
    ValueId x = b.input(randn({2, 2, 7, 9, 16}));
    ValueId pooled = b.ops(OpId::max_pool2d, {x}, pool_attrs(indices))[0];
    ValueId gamma = b.input(randn({32})), beta = b.input(randn({32}));
    ValueId mean = b.input(randn({32})), var = b.input(add(rand({32}), 0.5));
    Attrs a = Attrs().set("training", training).set("momentum", 0.1).set("eps", 1e-5)
                  .set("layout", std::string("nChw16c"));
    if (!activation.empty()) a.set("activation", activation);
    b.output(b.ops(OpId::batch_norm, {pooled, gamma, beta, mean, var}, a)[0]);
  }
};

int count(const Graph& g, OpId op) {
  int n = 0;
  for (const Node& node : g.nodes) n += node.kind == NodeKind::Op && node.op == op;
  return n;
}

TEST(FusePoolNorm, PoolAndEvalNormBecomeTheMaxOfFourViewsScaledAndShifted) {
  PoolNorm c("gelu");
  Graph before = c.b.g;
  EXPECT_EQ(fuse_pool_norms(c.b.g), 1);
  eliminate_dead_code(c.b.g);
  EXPECT_EQ(print(c.b.g),
            "graph graph(%0: f32[2, 2, 7, 9, 16], %1: f32[32], %2: f32[32], %3: f32[32], %4: f32[32]) {\n"
            "  %5: f32[2, 2, 3, 9, 16]{strides=[2016, 1008, 288, 16, 1]} = slice(%0) {dim=2, start=0, end=5, step=2}\n"
            "  %6: f32[2, 2, 3, 4, 16]{strides=[2016, 1008, 288, 32, 1]} = slice(%5) {dim=3, start=0, end=7, step=2}\n"
            "  %7: f32[2, 2, 3, 9, 16]{strides=[2016, 1008, 288, 16, 1]} = slice(%0) {dim=2, start=0, end=5, step=2}\n"
            "  %8: f32[2, 2, 3, 4, 16]{strides=[2016, 1008, 288, 32, 1]} = slice(%7) {dim=3, start=1, end=8, step=2}\n"
            "  %9: f32[2, 2, 3, 4, 16] = maximum(%6, %8)\n"
            "  %10: f32[2, 2, 3, 9, 16]{strides=[2016, 1008, 288, 16, 1]} = slice(%0) {dim=2, start=1, end=6, step=2}\n"
            "  %11: f32[2, 2, 3, 4, 16]{strides=[2016, 1008, 288, 32, 1]} = "
            "slice(%10) {dim=3, start=0, end=7, step=2}\n"
            "  %12: f32[2, 2, 3, 9, 16]{strides=[2016, 1008, 288, 16, 1]} = slice(%0) {dim=2, start=1, end=6, step=2}\n"
            "  %13: f32[2, 2, 3, 4, 16]{strides=[2016, 1008, 288, 32, 1]} = "
            "slice(%12) {dim=3, start=1, end=8, step=2}\n"
            "  %14: f32[2, 2, 3, 4, 16] = maximum(%11, %13)\n"
            "  %15: f32[2, 2, 3, 4, 16] = maximum(%9, %14)\n"
            "  %16: f32[] = full() {shape=[], dtype=float32, device=\"cpu\", value=1e-05}\n"
            "  %17: f32[32] = add(%4, %16)\n"
            "  %18: f32[32] = rsqrt(%17)\n"
            "  %19: f32[32] = mul(%1, %18)\n"
            "  %20: f32[32] = neg(%3)\n"
            "  %21: f32[32] = mul(%20, %19)\n"
            "  %22: f32[32] = add(%21, %2)\n"
            "  %23: f32[1, 2, 1, 1, 16] = view(%19) {shape=[1, 2, 1, 1, 16]}\n"
            "  %24: f32[2, 2, 3, 4, 16] = mul(%15, %23)\n"
            "  %25: f32[1, 2, 1, 1, 16] = view(%22) {shape=[1, 2, 1, 1, 16]}\n"
            "  %26: f32[2, 2, 3, 4, 16] = add(%24, %25)\n"
            "  %27: f32[2, 2, 3, 4, 16] = gelu(%26) {approximate=\"none\"}\n"
            "  return (%27)\n"
            "}\n");
  testing::expect_same_results(before, c.b.g, c.b.example_inputs);
}

TEST(FusePoolNorm, EachActivationMatchesTheUnfusedGraphInOneGeneratedKernel) {
  for (std::string act : {"", "relu", "gelu"}) {
    SCOPED_TRACE("activation " + act);
    PoolNorm c(act);
    Graph before = c.b.g;
    ASSERT_EQ(fuse_pool_norms(c.b.g), 1);
    eliminate_dead_code(c.b.g);
    testing::expect_same_results(before, c.b.g, c.b.example_inputs);
    CppExecutable exe(c.b.g);
    int big = 0;  // kernels over the pooled value (the channel scale and shift are a kernel of 32)
    for (const lower::Kernel& k : exe.program().kernels) big += k.loops.size() == 5;
    EXPECT_EQ(big, 1) << print(exe.program());
    EXPECT_TENSOR_CLOSE(exe.run(c.b.example_inputs)[0], interpret(before, c.b.example_inputs)[0], 1e-5,
                        1e-5);
  }
}

TEST(FusePoolNorm, TrainingNormsAndPoolsWithIndicesStayExterns) {
  PoolNorm training("gelu", /*training=*/true);
  EXPECT_EQ(fuse_pool_norms(training.b.g), 0);
  PoolNorm indices("gelu", /*training=*/false, /*indices=*/true);
  EXPECT_EQ(fuse_pool_norms(indices.b.g), 0);
  EXPECT_EQ(count(indices.b.g, OpId::max_pool2d), 1);
}

}  // namespace
}  // namespace kiln::compiler
