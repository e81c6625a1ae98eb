// ReLU/GELU after a convolution fused into it as a oneDNN post-op:
// before/expected graphs, the cases left alone, and the zoo models' compiled
// eval forwards against eager.
#include <gtest/gtest.h>

#include <cstring>

#include "capture_checks.h"
#include "compiler/capture/compiled_state.h"
#include "compiler/graph/printer.h"
#include "compiler/passes/fuse_conv_activation.h"
#include "graph_builder.h"
#include "kiln/compile.h"
#include "ops/conv_fused.h"

namespace kiln::compiler {
namespace {

using testing::GraphBuilder;


// x -> conv2d(w, b) -> activation, float32 unless told.
struct ConvAct {
  GraphBuilder b;
  ValueId conv, act;
  // A 2x2 kernel: oneDNN has no Winograd kernel for it, so the post-op pays
  // on every CPU (3x3 kernels: FuseConvActivation.GeluStaysOutOfWinograd).
  ConvAct(OpId op, Attrs act_attrs = {}, DType dt = DType::Float32, int64_t k = 2, int64_t channels = 4) {
    manual_seed(3);
    auto o = TensorOptions().with_dtype(dt);
    ValueId x = b.input(randn({2, channels, 6, 6}, o));
    ValueId w = b.input(randn({channels, channels, k, k}, o));
    ValueId bias = b.input(randn({channels}, o));
    conv = b.op(OpId::conv2d, {x, w, bias}, testing::conv2d_attrs(1));
    act = b.op(op, {conv}, std::move(act_attrs));
    b.output(act);
  }
};

Attrs gelu(const char* approximate) { return Attrs().set("approximate", std::string(approximate)); }

int fused_convs(const Graph& g, const char* activation) {
  int n = 0;
  for (const Node& node : g.nodes)
    n += node.kind == NodeKind::Op && node.op == OpId::conv2d && node.attrs.has("activation") &&
         node.attrs.s("activation") == activation;
  return n;
}

TEST(FuseConvActivation, ReluBecomesTheConvolutionsPostOp) {
  ConvAct c(OpId::relu);
  Graph before = c.b.g;
  EXPECT_EQ(fuse_conv_activations(c.b.g), 1);
  EXPECT_EQ(print(c.b.g),
            "graph graph(%0: f32[2, 4, 6, 6], %1: f32[4, 4, 2, 2], %2: f32[4]) {\n"
            "  %3: f32[2, 4, 7, 7] = conv2d(%0, %1, %2) {stride=[1, 1], padding=[1, 1], dilation=[1, 1], groups=1, "
            "activation=\"relu\"}\n"
            "  return (%3)\n"
            "}\n");
  testing::expect_same_results(before, c.b.g, c.b.example_inputs);
}

TEST(FuseConvActivation, ErfGeluFusesAndMatchesKilnsGelu) {
  ConvAct c(OpId::gelu, gelu("none"));
  Graph before = c.b.g;
  EXPECT_EQ(fuse_conv_activations(c.b.g), 1);
  EXPECT_EQ(fused_convs(c.b.g, "gelu"), 1);
  EXPECT_EQ(c.b.g.num_ops(), 1);
  testing::expect_same_results(before, c.b.g, c.b.example_inputs);
}

Conv2dParams pad1() {
  Conv2dParams p;
  p.padding = {1, 1};
  return p;
}

// Where oneDNN would run the plain 3x3 convolution on Winograd but the GELU
// post-op only on its direct kernel (AVX-512), the GELU stays its own node;
// conv2d with the attribute is still right there (it applies the GELU after).
TEST(FuseConvActivation, GeluStaysOutOfWinograd) {
  ConvAct c(OpId::gelu, gelu("none"), DType::Float32, /*k=*/3, /*channels=*/64);
  const bool pays = conv2d_post_op_pays({2, 64, 6, 6}, {64, 64, 3, 3}, true, pad1(), "gelu");
  EXPECT_TRUE(conv2d_post_op_pays({2, 64, 6, 6}, {64, 64, 3, 3}, true, pad1(), "relu"));
  EXPECT_EQ(fuse_conv_activations(c.b.g), pays ? 1 : 0);
  manual_seed(5);
  Tensor x = randn({2, 64, 6, 6}), w = randn({64, 64, 3, 3}), b = randn({64});
  EXPECT_TENSOR_CLOSE(conv2d_fused(x, w, b, pad1(), "gelu"), kiln::gelu(conv2d(x, w, b, pad1())), 1e-5, 1e-5);
}

// bfloat16 (autocast): oneDNN's bfloat16 kernels take the post-op. ReLU
// gives eager's bits exactly (rounding to bfloat16 commutes with it); the
// fused GELU rounds once where eager rounds the convolution and the GELU.
TEST(FuseConvActivation, BFloat16ReluAndGeluFuse) {
  ConvAct relu(OpId::relu, {}, DType::BFloat16);
  Graph before = relu.b.g;
  EXPECT_EQ(fuse_conv_activations(relu.b.g), 1);
  EXPECT_EQ(fused_convs(relu.b.g, "relu"), 1);
  Tensors want = interpret(before, relu.b.example_inputs), got = interpret(relu.b.g, relu.b.example_inputs);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].dtype(), DType::BFloat16);
  Tensor a = got[0].contiguous(), w = want[0].contiguous();
  ASSERT_EQ(a.nbytes(), w.nbytes());
  EXPECT_EQ(std::memcmp(a.data_ptr(), w.data_ptr(), a.nbytes()), 0) << "bfloat16 conv + ReLU post-op differs from eager";
  ConvAct g(OpId::gelu, gelu("none"), DType::BFloat16, /*k=*/3, /*channels=*/32);
  before = g.b.g;
  EXPECT_EQ(fuse_conv_activations(g.b.g), 1);
  want = interpret(before, g.b.example_inputs), got = interpret(g.b.g, g.b.example_inputs);
  // One bfloat16 rounding apart at most: 2^-8 relative.
  EXPECT_TENSOR_CLOSE(got[0].to(DType::Float32), want[0].to(DType::Float32), 1e-2, 1e-2);
}

TEST(FuseConvActivation, LeavesTanhGeluSixteenBitAndSharedOutputsAlone) {
  ConvAct tanh_gelu(OpId::gelu, gelu("tanh"));  // oneDNN's post-op is the erf GELU only
  EXPECT_EQ(fuse_conv_activations(tanh_gelu.b.g), 0);
  ConvAct half(OpId::relu, {}, DType::Float16);  // float16 runs in float32 and applies it after anyway
  EXPECT_EQ(fuse_conv_activations(half.b.g), 0);
  // The pre-activation output is also a graph output (as a GELU's backward
  // saves it in a training forward): it must still be written.
  ConvAct shared(OpId::gelu, gelu("none"));
  shared.b.output(shared.conv);
  EXPECT_EQ(fuse_conv_activations(shared.b.g), 0);
  ConvAct twice(OpId::relu);
  twice.b.output(twice.b.op(OpId::sigmoid, {twice.conv}));
  EXPECT_EQ(fuse_conv_activations(twice.b.g), 0);
}

// The zoo models compiled for eval on both backends: every activation right
// after a convolution (after batch-norm folding) is a post-op, and outputs
// equal eager's within float32 rounding.
TEST(FuseConvActivation, ZooModelsEvalForwardsFuseAndMatchEager) {
  // tutorial: conv-relu twice; resnet18: the stem and each block's first
  // conv-bn-relu, and (fuse_conv_residual, an execution pass) each of the
  // eight blocks' second, whose relu follows the residual add; airbench:
  // the whitening conv's GELU, and each group's second conv-bn-gelu where the
  // GELU post-op keeps oneDNN's algorithm (not on AVX-512: Winograd).
  struct Case {
    const char* name;
    const char* activation;
    int fused;
  };
  int airbench_groups = 0;
  for (auto [c, hw] : {std::pair<int64_t, int64_t>{16, 15}, {64, 7}, {64, 3}})  // width 0.25
    airbench_groups += conv2d_post_op_pays({2, c, hw, hw}, {c, c, 3, 3}, false, pad1(), "gelu");
  for (const Case& k : {Case{"tutorial", "relu", 2}, Case{"resnet18", "relu", 9 + 8},
                        Case{"airbench", "gelu", 1 + airbench_groups}}) {
    for (const char* backend : {"interpreter", "cpp"}) {
      SCOPED_TRACE(std::string(k.name) + " on " + backend);
      kiln::testing::CompiledEval r = kiln::testing::compile_zoo_eval(k.name, backend, 4);
      EXPECT_TENSOR_CLOSE(r.got, r.want, 1e-4, 1e-4);
      const Graph& g = r.executable;
      EXPECT_EQ(fused_convs(g, k.activation), k.fused);
    }
  }
}

}  // namespace
}  // namespace kiln::compiler
