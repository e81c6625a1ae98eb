// Eval batch norm folded into the convolution before it: before/expected
// graphs, the cases left alone, and the zoo models' compiled eval forwards
// against eager.
#include <gtest/gtest.h>

#include "capture_checks.h"
#include "compiler/capture/compiled_state.h"
#include "compiler/graph/printer.h"
#include "compiler/passes/dead_code.h"
#include "compiler/passes/fold_batch_norm.h"
#include "core/cpu_features.h"
#include "graph_builder.h"
#include "kiln/compile.h"

namespace kiln::compiler {
namespace {

using testing::GraphBuilder;

Attrs bn_attrs(bool training) { return Attrs().set("training", training).set("momentum", 0.1).set("eps", 1e-5); }

// x -> conv2d(w, bias?) -> batch_norm(eval) -> relu, with every batch-norm
// parameter given (positive running variances).
struct ConvBn {
  GraphBuilder b;
  ValueId conv, bn;
  explicit ConvBn(bool conv_bias, bool training = false, DType dt = DType::Float32) {
    manual_seed(1);
    auto o = TensorOptions().with_dtype(dt);
    ValueId x = b.input(randn({2, 3, 6, 6}, o));
    ValueId w = b.input(randn({4, 3, 3, 3}, o));
    std::vector<ValueId> cin{x, w};
    if (conv_bias) cin.push_back(b.input(randn({4}, o)));
    conv = b.op(OpId::conv2d, cin, testing::conv2d_attrs(1));
    ValueId gamma = b.input(randn({4})), beta = b.input(randn({4}));
    ValueId mean = b.input(randn({4})), var = b.input(add(rand({4}), 0.5));
    bn = b.ops(OpId::batch_norm, {conv, gamma, beta, mean, var}, bn_attrs(training))[0];
    b.output(b.op(OpId::relu, {bn}));
  }
};

int count(const Graph& g, OpId op) {
  int n = 0;
  for (const Node& node : g.nodes) n += node.kind == NodeKind::Op && node.op == op;
  return n;
}

TEST(FoldBatchNorm, EvalBatchNormBecomesScaledWeightsAndAShiftedBias) {
  ConvBn c(/*conv_bias=*/true);
  Graph before = c.b.g;
  EXPECT_EQ(fold_batch_norms(c.b.g), 1);
  eliminate_dead_code(c.b.g);
  EXPECT_EQ(print(c.b.g),
            "graph graph(%0: f32[2, 3, 6, 6], %1: f32[4, 3, 3, 3], %2: f32[4], %3: f32[4], %4: f32[4], %5: f32[4], "
            "%6: f32[4]) {\n"
            "  %7: f32[] = full() {shape=[], dtype=float32, device=\"cpu\", value=1e-05}\n"
            "  %8: f32[4] = add(%6, %7)\n"
            "  %9: f32[4] = rsqrt(%8)\n"
            "  %10: f32[4] = mul(%3, %9)\n"
            "  %11: f32[4, 1, 1, 1] = view(%10) {shape=[4, 1, 1, 1]}\n"
            "  %12: f32[4, 3, 3, 3] = mul(%1, %11)\n"
            "  %13: f32[4] = sub(%2, %5)\n"
            "  %14: f32[4] = mul(%13, %10)\n"
            "  %15: f32[4] = add(%14, %4)\n"
            "  %16: f32[2, 4, 6, 6] = conv2d(%0, %12, %15) {stride=[1, 1], padding=[1, 1], dilation=[1, 1], groups=1}\n"
            "  %17: f32[2, 4, 6, 6] = relu(%16)\n"
            "  return (%17)\n"
            "}\n");
  testing::expect_same_results(before, c.b.g, c.b.example_inputs);
}

TEST(FoldBatchNorm, AConvWithoutBiasGetsOne) {
  ConvBn c(/*conv_bias=*/false);
  Graph before = c.b.g;
  EXPECT_EQ(fold_batch_norms(c.b.g), 1);
  eliminate_dead_code(c.b.g);
  EXPECT_EQ(count(c.b.g, OpId::batch_norm), 0);
  EXPECT_EQ(count(c.b.g, OpId::neg), 1);  // (0 - mean) * s + beta
  testing::expect_same_results(before, c.b.g, c.b.example_inputs);
}

TEST(FoldBatchNorm, BfloatConvolutionsFoldInFloat32AndCastOnce) {
  for (bool conv_bias : {false, true}) {
    ConvBn c(conv_bias, false, DType::BFloat16);
    Graph before = c.b.g;
    ASSERT_EQ(fold_batch_norms(c.b.g), 1);
    eliminate_dead_code(c.b.g);
    EXPECT_EQ(count(c.b.g, OpId::batch_norm), 0);
    EXPECT_EQ(count(c.b.g, OpId::cast), conv_bias ? 4 : 3);  // weight (and bias) to float32, both back
    // bfloat16 rounding of the folded weights: within a few bfloat16 ulps of the unfolded graph.
    testing::expect_same_results(before, c.b.g, c.b.example_inputs, 5e-2, 5e-2);
  }
}

TEST(FoldBatchNorm, LeavesTrainingHalfAndSharedConvolutionsAlone) {
  ConvBn training(true, /*training=*/true);
  EXPECT_EQ(fold_batch_norms(training.b.g), 0);
  ConvBn half(true, false, DType::Float16);
  EXPECT_EQ(fold_batch_norms(half.b.g), 0);
  // The convolution's output is also a graph output: the unnormalized values
  // must still exist.
  ConvBn shared(true);
  shared.b.output(shared.conv);
  EXPECT_EQ(fold_batch_norms(shared.b.g), 0);
}

// The zoo models compiled for eval: every batch norm right after a
// convolution folded, outputs equal eager's within float32 rounding, on the
// interpreter and generated kernels.
TEST(FoldBatchNorm, ZooModelsEvalForwardsFoldEveryBatchNormAndMatchEager) {
  for (const char* name : {"resnet18", "airbench"}) {
    for (const char* backend : {"interpreter", "cpp"}) {
      SCOPED_TRACE(std::string(name) + " on " + backend);
      kiln::testing::CompiledEval r = kiln::testing::compile_zoo_eval(name, backend, 2);
      EXPECT_TENSOR_CLOSE(r.got, r.want, 1e-4, 1e-4);
      const Graph& g = r.executable;
      // airbench normalizes after its max-pools: those batch norms stay, or
      // on AVX-512 (nChw16c values) join their pools as generated kernels
      // (fuse_pool_norm.h).
      for (const Node& n : g.nodes) {
        if (n.kind == NodeKind::Op && n.op == OpId::batch_norm) {
          EXPECT_NE(g.producer(n.inputs[0]).op, OpId::conv2d);
        }
      }
      EXPECT_EQ(count(g, OpId::batch_norm), std::string(name) == "airbench" && !cpu_has_avx512() ? 3 : 0);
    }
  }
}

}  // namespace
}  // namespace kiln::compiler
