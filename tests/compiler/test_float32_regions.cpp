// bfloat16 convolutions and products that run in float32 anyway, computed in
// float32: the pass's before/expected graph with its results against float32
// eager, the layers and sources it leaves alone, a fused GELU whose post-op
// would cost the float32 algorithm, a product's precision chosen once per
// shape, and the tutorial CNN's bf16 train step compiled against eager bf16
// autocast.
#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "capture_checks.h"
#include "compiler/graph/interpreter.h"
#include "compiler/graph/printer.h"
#include "compiler/passes/float32_regions.h"
#include "graph_builder.h"
#include "kiln/compile.h"
#include "ops/conv_autotune.h"
#include "ops/conv_fused.h"
#include "ops/matmul_precision.h"
#include "scoped_cache_dir.h"

namespace kiln::compiler {
namespace {

using testing::GraphBuilder;
using testing::ScopedCacheDir;

const Shape kX{2, 3, 12, 12}, kW{8, 3, 3, 3};

Attrs to(DType t) { return Attrs().set("dtype", t); }
Attrs conv_attrs(const char* activation) {
  return testing::conv2d_attrs(1).set("activation", std::string(activation));
}
// What the layer's first call would have decided: bfloat16 or float32.
void choose(const Shape& x, const Shape& w, const char* activation, const char* choice) {
  record_conv_bf16_choice(OpId::conv2d, x, w, /*bias=*/true, conv_attrs(activation), choice);
}

// Autocast's forward of conv(bias) -> ReLU -> max-pool: float32 sources cast
// down, the pooled value cast up (as softmax would), the convolution's
// output also a graph output (read as bf16 there).
struct ConvPool {
  GraphBuilder b;
  ConvPool() {
    manual_seed(3);
    ValueId x = b.input(randn(kX)), w = b.input(randn(kW).mul(0.3)), bias = b.input(randn({8}));
    ValueId xb = b.op(OpId::cast, {x}, to(DType::BFloat16)), wb = b.op(OpId::cast, {w}, to(DType::BFloat16));
    ValueId bb = b.op(OpId::cast, {bias}, to(DType::BFloat16));
    ValueId y = b.op(OpId::conv2d, {xb, wb, bb}, conv_attrs("relu"));
    std::vector<ValueId> p = b.ops(OpId::max_pool2d, {y}, testing::max_pool_attrs(2, 2));
    b.output(b.op(OpId::cast, {p[0]}, to(DType::Float32)));
    b.output(y);
    b.output(p[1]);
  }
};

TEST(Float32Regions, AConvolutionThatRunsFloat32ReadsItsFloat32Sources) {
  ScopedCacheDir cache;
  choose(kX, kW, "relu", "float32");
  ConvPool c;
  Graph before = c.b.g;
  EXPECT_EQ(compute_float32_regions(c.b.g), 2);  // the convolution and the pool
  EXPECT_EQ(print(c.b.g),
            "graph graph(%0: f32[2, 3, 12, 12], %1: f32[8, 3, 3, 3], %2: f32[8]) {\n"
            "  %3: f32[2, 8, 12, 12] = conv2d(%0, %1, %2) {stride=[1, 1], padding=[1, 1], dilation=[1, 1], "
            "groups=1, activation=\"relu\"}\n"
            "  %4: bf16[2, 8, 12, 12] = cast(%3) {dtype=bfloat16}\n"
            "  %5: f32[2, 8, 6, 6], %6: i64[2, 8, 6, 6] = max_pool2d(%3) {kernel_size=[2, 2], stride=[2, 2], "
            "padding=[0, 0], dilation=[1, 1], ceil_mode=false}\n"
            "  return (%5, %4, %6)\n"
            "}\n");
  // Within bfloat16 rounding of the graph as autocast wrote it...
  testing::expect_same_results(before, c.b.g, c.b.example_inputs, 3e-2, 3e-2);
  // ...and the float32 layer's result exactly: nothing rounded in between.
  const Tensors& in = c.b.example_inputs;
  Tensor y32 = conv2d_fused(in[0], in[1], in[2], Conv2dParams{.padding = {1, 1}}, "relu");
  Tensor want = max_pool2d(y32, {2, 2}, {2, 2});
  EXPECT_TENSOR_CLOSE(Interpreter(c.b.g).run(in)[0], want, 0.0, 0.0);
  EXPECT_EQ(compute_float32_regions(c.b.g), 0);  // nothing left in bfloat16 that runs float32
}

TEST(Float32Regions, LeavesAloneALayerThatRunsBfloat16) {
  ScopedCacheDir cache;
  choose(kX, kW, "relu", "bf16");
  ConvPool c;
  const Node& conv = c.b.g.producer(c.b.g.outputs[1]);
  ASSERT_EQ(conv.op, OpId::conv2d);
  const std::string before = print(c.b.g);
  // Where this CPU has no bfloat16 kernel for the layer, it runs float32 whatever was recorded.
  const bool float32 =
      conv_bf16_runs_float32(OpId::conv2d, c.b.g.type(conv.inputs[0]).shape, kW, true, conv.attrs);
  EXPECT_EQ(compute_float32_regions(c.b.g), float32 ? 2 : 0);
  if (!float32) {
    EXPECT_EQ(print(c.b.g), before);
  }
}

// A layer whose bfloat16 kernel won its timing only by saving its own casts
// ("bf16-alone") computes in float32 where its operands are float32 values
// (here casts of float32 inputs), and stays bfloat16 where one is not (a
// bfloat16 input: float32 would need a cast up).
TEST(Float32Regions, ALayerThatWinsOnlyByItsCastsJoinsAFloat32Region) {
  ScopedCacheDir cache;
  choose(kX, kW, "relu", "bf16-alone");
  ConvPool c;
  EXPECT_EQ(compute_float32_regions(c.b.g), 2);  // as for a float32 layer
  EXPECT_EQ(c.b.g.type(c.b.g.producer(c.b.g.outputs[0]).inputs[0]).dtype, DType::Float32);

  manual_seed(8);
  GraphBuilder b;
  ValueId x = b.input(randn(kX).to(DType::BFloat16)), w = b.input(randn(kW));
  ValueId bias = b.input(randn({8}));
  ValueId wb = b.op(OpId::cast, {w}, to(DType::BFloat16)), bb = b.op(OpId::cast, {bias}, to(DType::BFloat16));
  b.output(b.op(OpId::conv2d, {x, wb, bb}, conv_attrs("relu")));
  const std::string before = print(b.g);
  compute_float32_regions(b.g);
  EXPECT_EQ(print(b.g), before);
}

// A float32 source written in place after its cast (an optimizer update)
// is not what the cast read: the convolution casts the bfloat16 value up.
TEST(Float32Regions, ASourceWrittenInPlaceAfterItsCastIsNotReadAgain) {
  ScopedCacheDir cache;
  choose(kX, kW, "relu", "float32");
  manual_seed(4);
  GraphBuilder b;
  ValueId x = b.input(randn(kX)), w = b.input(randn(kW)), bias = b.input(randn({8}));
  ValueId xb = b.op(OpId::cast, {x}, to(DType::BFloat16)), wb = b.op(OpId::cast, {w}, to(DType::BFloat16));
  ValueId bb = b.op(OpId::cast, {bias}, to(DType::BFloat16));
  ValueId ones = b.constant(ones_like(randn(kX)));
  b.output(b.op(OpId::add_, {x, ones}, Attrs().set("alpha", 1.0)));
  b.output(b.op(OpId::conv2d, {xb, wb, bb}, conv_attrs("relu")));
  Graph before = b.g;
  EXPECT_EQ(compute_float32_regions(b.g), 1);
  const Node* found = nullptr;
  for (const Node& n : b.g.nodes)
    if (n.kind == NodeKind::Op && n.op == OpId::conv2d) found = &n;
  ASSERT_NE(found, nullptr) << print(b.g);
  const Node& conv = *found;
  const Node& up = b.g.producer(conv.inputs[0]);  // x's bfloat16 copy cast up, not x
  EXPECT_EQ(up.op, OpId::cast);
  EXPECT_EQ(b.g.type(up.inputs[0]).dtype, DType::BFloat16);
  EXPECT_EQ(b.g.producer(conv.inputs[1]).kind, NodeKind::Input);  // w is never written: read as it is
  Tensors in = {randn(kX), randn(kW), randn({8})};
  Tensors want = Interpreter(before).run(Tensors{in[0].clone(), in[1], in[2]});
  Tensors got = Interpreter(b.g).run(Tensors{in[0].clone(), in[1], in[2]});
  EXPECT_TENSOR_CLOSE(got[1], want[1], 3e-2, 5e-2);  // x + 1 would be off by far more
}

// GELU as a post-op costs a 3x3 layer its float32 Winograd kernel where
// oneDNN has one (ops/conv_fused.h): the float32 layer runs it apart, as the
// bfloat16 op running in float32 did.
TEST(Float32Regions, AGeluWhosePostOpCostsTheAlgorithmRunsApart) {
  ScopedCacheDir cache;
  const Shape x{2, 16, 12, 12}, w{16, 16, 3, 3};
  choose(x, w, "gelu", "float32");
  manual_seed(5);
  GraphBuilder b;
  ValueId xi = b.input(randn(x)), wi = b.input(randn(w).mul(0.1)), bi = b.input(randn({16}));
  std::vector<ValueId> casts;
  for (ValueId v : {xi, wi, bi}) casts.push_back(b.op(OpId::cast, {v}, to(DType::BFloat16)));
  b.output(b.op(OpId::cast, {b.op(OpId::conv2d, casts, conv_attrs("gelu"))}, to(DType::Float32)));
  EXPECT_EQ(compute_float32_regions(b.g), 1);
  const bool pays = conv2d_post_op_pays(x, w, true, Conv2dParams{.padding = {1, 1}}, "gelu");
  const Node& last = b.g.producer(b.g.outputs[0]);
  if (pays) {
    EXPECT_EQ(last.op, OpId::conv2d);
    EXPECT_EQ(last.attrs.s("activation"), "gelu");
  } else {
    ASSERT_EQ(last.op, OpId::gelu);
    const Node& conv = b.g.producer(last.inputs[0]);
    EXPECT_EQ(conv.op, OpId::conv2d);
    EXPECT_FALSE(conv.attrs.has("activation"));
  }
  const Tensors& in = b.example_inputs;
  Tensor want = gelu(conv2d(in[0], in[1], in[2], Conv2dParams{.padding = {1, 1}}));
  EXPECT_TENSOR_CLOSE(Interpreter(b.g).run(in)[0], want, 1e-5, 1e-5);
}

// A bfloat16 product's precision is timed once per shape and transpose, by
// whichever comes first: its first call (eager or compiled), or the
// compiler's question about a node. A linear's question reads the choice its
// kernel recorded (the same key: x times w's transpose); a shape not seen yet
// is timed on the spot, once, and recorded for the kernel. Where this CPU has
// no bfloat16 matmul nothing is timed and every answer is float32.
TEST(Float32Regions, AProductsPrecisionIsChosenOncePerShape) {
  ScopedCacheDir cache;
  manual_seed(7);
  const Tensor x = randn({16, 40}).to(DType::BFloat16), w = randn({24, 40}).to(DType::BFloat16);
  const Tensor y = linear(x, w, Tensor());
  EXPECT_TENSOR_CLOSE(y.to(DType::Float32), linear(x.to(DType::Float32), w.to(DType::Float32), Tensor()), 2e-2,
                      5e-2);
  const int64_t timed = conv_autotune::stats().measured;  // 1, or 0 without a bfloat16 matmul
  EXPECT_LE(timed, 1);
  const bool f32 = matmul_bf16_runs_float32(OpId::linear, x.shape(), x.strides(), w.shape(), w.strides());
  EXPECT_EQ(conv_autotune::stats().measured, timed);  // the kernel's choice, read
  EXPECT_TRUE(f32 || timed == 1);
  const Shape a{8, 40}, a_strides{40, 1}, b{40, 24}, b_strides{1, 40};  // b transposed
  const bool first = matmul_bf16_runs_float32(OpId::matmul, a, a_strides, b, b_strides);
  EXPECT_EQ(conv_autotune::stats().measured, 2 * timed);  // timed now
  EXPECT_EQ(matmul_bf16_runs_float32(OpId::matmul, a, a_strides, b, b_strides), first);
  EXPECT_EQ(conv_autotune::stats().measured, 2 * timed);  // and only once
  // The kernel of that shape runs the recorded choice: nothing timed again.
  const Tensor m = randn({8, 40}).to(DType::BFloat16), n = randn({24, 40}).to(DType::BFloat16).t();
  const Tensor mn = matmul(m, n);
  EXPECT_EQ(conv_autotune::stats().measured, 2 * timed);
  EXPECT_TENSOR_CLOSE(mn.to(DType::Float32), matmul(m.to(DType::Float32), n.to(DType::Float32)), 2e-2, 5e-2);
}

// A product whose bfloat16 matmul won its timing only by saving its own
// casts ("bf16-alone": the tutorial CNN's linears on AVX-512 BF16 without
// AMX) computes in float32 where its operands are float32 values; one that
// won by more ("bf16") stays bfloat16 where this CPU has the matmul.
TEST(Float32Regions, AProductThatWinsOnlyByItsCastsJoinsAFloat32Region) {
  const Shape xs{16, 40}, ws{24, 40}, strides{40, 1};
  for (const char* choice : {"bf16-alone", "bf16"}) {
    SCOPED_TRACE(choice);
    ScopedCacheDir cache;
    record_matmul_bf16_choice(OpId::linear, xs, strides, ws, strides, choice);
    manual_seed(9);
    GraphBuilder b;
    ValueId x = b.input(randn(xs)), w = b.input(randn(ws));
    ValueId xb = b.op(OpId::cast, {x}, to(DType::BFloat16)), wb = b.op(OpId::cast, {w}, to(DType::BFloat16));
    b.output(b.op(OpId::cast, {b.op(OpId::linear, {xb, wb})}, to(DType::Float32)));
    Graph before = b.g;
    const bool float32 = matmul_bf16_runs_float32(OpId::linear, xs, strides, ws, strides);  // no bf16 matmul here
    const bool widen = float32 || std::string(choice) == "bf16-alone";
    EXPECT_EQ(matmul_bf16_loses_among_float32(OpId::linear, xs, strides, ws, strides), widen);
    EXPECT_EQ(compute_float32_regions(b.g), widen ? 1 : 0) << print(b.g);
    const Node* linear = nullptr;
    for (const Node& n : b.g.nodes)
      if (n.kind == NodeKind::Op && n.op == OpId::linear) linear = &n;
    ASSERT_NE(linear, nullptr);
    EXPECT_EQ(b.g.type(linear->inputs[0]).dtype, widen ? DType::Float32 : DType::BFloat16) << print(b.g);
    testing::expect_same_results(before, b.g, b.example_inputs, 3e-2, 3e-2);
  }
}

// The tutorial CNN's train step under bf16 autocast, compiled, against the
// same step eager: losses and weights within bfloat16's tolerance, and no
// convolution of the executed graph has bfloat16 operands while it runs in
// float32 (each layer's choice made on its first call, as in training).
TEST(Float32Regions, TutorialBf16TrainStepMatchesEagerAutocast) {
  ScopedCacheDir cache;
  manual_seed(61);
  auto eager = models::create("tutorial");
  manual_seed(61);
  auto compiled = models::create("tutorial");
  optim::SGD opt_e(eager->parameters(), optim::SGDOptions(0.05).momentum(0.9));
  optim::SGD opt_c(compiled->parameters(), optim::SGDOptions(0.05).momentum(0.9));
  auto train_step = [](const std::shared_ptr<nn::Module>& model, optim::SGD& opt, const Tensor& x, const Tensor& y) {
    Tensor loss;
    {
      autocast amp(DType::BFloat16);
      loss = cross_entropy(model->forward(x), y);
    }
    opt.zero_grad();
    loss.backward();
    opt.step();
    return loss;
  };
  auto step = compile([&](const Tensor& x, const Tensor& y) { return train_step(compiled, opt_c, x, y); },
                      CompileOptions().fullgraph(true).backend("cpp"));
  manual_seed(62);
  for (int i = 0; i < 3; ++i) {
    Tensor x = randn({8, 3, 32, 32}), y = randint(0, 10, {8});
    Tensor loss_e = train_step(eager, opt_e, x, y);
    EXPECT_NEAR(step(x, y).item(), loss_e.item(), 2e-2 * std::abs(loss_e.item())) << "step " << i;
  }
  auto pe = eager->state_dict(), pc = compiled->state_dict();
  ASSERT_EQ(pe.size(), pc.size());
  for (size_t i = 0; i < pe.size(); ++i) EXPECT_TENSOR_CLOSE(pc[i].second, pe[i].second, 5e-2, 5e-3) << pe[i].first;
  int convs = 0;
  const Graph& g = step.state().variants.back()->segments.at(0)->executable;
  for (const Node& n : g.nodes) {
    if (n.kind != NodeKind::Op ||
        (n.op != OpId::conv2d && n.op != OpId::conv2d_backward_input && n.op != OpId::conv2d_backward_weight))
      continue;
    ++convs;
    if (g.type(n.outputs[0]).dtype != DType::BFloat16) continue;
    const bool bias = n.op == OpId::conv2d && n.inputs.size() > 2 && n.inputs[2] != kNoValue;
    EXPECT_FALSE(conv_bf16_runs_float32(n.op, g.type(n.inputs[0]).shape, g.type(n.inputs[1]).shape, bias, n.attrs))
        << print(g);
  }
  EXPECT_EQ(convs, 5);  // two forward, conv2's input gradient, both weight gradients
}

}  // namespace
}  // namespace kiln::compiler
