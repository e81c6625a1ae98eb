// ReLU/GELU fused into batch norm, forward and backward: the ops' fused forms
// against batch norm and the activation apart (NCHW and nChw16c, short and
// long rows, training and eval), their errors, the pass's before/expected
// graphs and the cases it leaves alone, and zoo train steps compiled with it
// against eager.
#include <gtest/gtest.h>

#include <string>

#include "capture_checks.h"
#include "compiler/graph/printer.h"
#include "compiler/passes/fuse_norm_activation.h"
#include "graph_builder.h"
#include "kiln/compile.h"
#include "ops/blocked_layout.h"
#include "testing/errors.h"

namespace kiln::compiler {
namespace {

using testing::GraphBuilder;

Attrs gelu_attrs() { return Attrs().set("approximate", std::string("none")); }
Attrs bn_attrs(bool training) { return Attrs().set("training", training).set("momentum", 0.1).set("eps", 1e-5); }
Attrs bn_bwd_attrs(bool training) { return Attrs().set("training", training).set("eps", 1e-5); }

// The activation and its backward as separate ops (what the fused forms replace).
Tensor activation(const std::string& act, const Tensor& y) {
  return act == "relu" ? dispatch(OpId::relu, {y})[0] : dispatch(OpId::gelu, {y}, gelu_attrs())[0];
}
Tensor activation_backward(const std::string& act, const Tensor& gz, const Tensor& y) {
  return act == "relu" ? dispatch(OpId::relu_backward, {gz, activation("relu", y)})[0]
                       : dispatch(OpId::gelu_backward, {gz, y}, gelu_attrs())[0];
}

// ---- the ops' fused forms ----

TEST(FuseNormActivationOps, ForwardAndBackwardMatchBatchNormAndTheActivationApart) {
  struct Case {
    Shape shape;
    bool blocked;
  };
  // 3x3 rows take the per-span path (shorter than a kernel call pays for),
  // 16x20 rows the per-row one; nChw16c runs are (n, block) pairs.
  const Case cases[] = {
      {{4, 32, 3, 3}, false}, {{2, 16, 16, 20}, false}, {{4, 32, 3, 3}, true}, {{2, 16, 9, 11}, true}};
  for (const Case& c : cases)
    for (const std::string act : {"relu", "gelu"})
      for (bool training : {true, false})
        for (bool affine : {true, false}) {
          SCOPED_TRACE(shape_str(c.shape) + (c.blocked ? " nChw16c " : " NCHW ") + act +
                       (training ? " training" : " eval") + (affine ? "" : " without weight and bias"));
          manual_seed(31);
          const int64_t C = c.shape[1];
          Tensor x = randn(c.shape).mul(1.5).add(0.25), gz = randn(c.shape);
          Tensor w = affine ? randn({C}) : Tensor(), bias = affine ? randn({C}) : Tensor();
          Tensor rm = randn({C}).mul(0.1), rv = rand({C}).add(0.5);
          Tensor rm2 = rm.clone(), rv2 = rv.clone();
          auto lay = [&](const Tensor& t) { return c.blocked ? to_blocked(t) : t; };
          Attrs a = bn_attrs(training), ba = bn_bwd_attrs(training);
          if (c.blocked) a.set("layout", std::string(kNChw16c)), ba.set("layout", std::string(kNChw16c));
          // Apart: y = batch_norm(x), z = act(y); grad_y = act'(y) * gz, then batch norm's backward.
          Tensors bn = dispatch(OpId::batch_norm, {lay(x), w, bias, rm, rv}, a);
          Tensor z = activation(act, bn[0]);
          Tensors want = dispatch(OpId::batch_norm_backward,
                                  {activation_backward(act, lay(gz), bn[0]), lay(x), w, bn[1], bn[2]}, ba);
          // Fused.
          Tensors fz = dispatch(OpId::batch_norm, {lay(x), w, bias, rm2, rv2}, Attrs(a).set("activation", act));
          EXPECT_TENSOR_CLOSE(fz[0], z, 1e-6, 1e-6);
          EXPECT_TENSOR_CLOSE(fz[1], bn[1], 0, 0);
          EXPECT_TENSOR_CLOSE(fz[2], bn[2], 0, 0);
          EXPECT_TENSOR_CLOSE(rm2, rm, 0, 0);
          EXPECT_TENSOR_CLOSE(rv2, rv, 0, 0);
          Tensors got = dispatch(OpId::batch_norm_backward, {lay(gz), lay(x), w, fz[1], fz[2], bias},
                                 Attrs(ba).set("activation", act));
          // y is recomputed from the saved (float) statistics: the activation's
          // derivative sees it within float rounding.
          EXPECT_TENSOR_CLOSE(got[0], want[0], 1e-4, 1e-5);
          EXPECT_TENSOR_CLOSE(got[1], want[1], 1e-4, 1e-4);
          EXPECT_TENSOR_CLOSE(got[2], want[2], 1e-4, 1e-4);
        }
}

TEST(FuseNormActivationOps, AResidualIsAddedBeforeTheActivation) {
  for (bool blocked : {false, true})
    for (const Shape& shape : {Shape{4, 32, 3, 3}, Shape{2, 16, 16, 20}}) {
      SCOPED_TRACE(shape_str(shape) + (blocked ? " nChw16c" : " NCHW"));
      manual_seed(33);
      const int64_t C = shape[1];
      auto lay = [&](const Tensor& t) { return blocked ? to_blocked(t) : t; };
      Tensor x = lay(randn(shape)), r = lay(randn(shape)), w = randn({C}), bias = randn({C});
      Attrs a = bn_attrs(true);
      if (blocked) a.set("layout", std::string(kNChw16c));
      Tensors bn = dispatch(OpId::batch_norm, {x, w, bias, Tensor(), Tensor()}, a);
      Tensor want = activation("relu", dispatch1(OpId::add, {bn[0], r}));
      Tensors got = dispatch(OpId::batch_norm, {x, w, bias, Tensor(), Tensor(), r}, Attrs(a).set("activation", "relu"));
      EXPECT_TENSOR_CLOSE(got[0], want, 1e-6, 1e-6);
      EXPECT_TENSOR_CLOSE(got[1], bn[1], 0, 0);
    }
}

TEST(FuseNormActivationOps, MisuseIsAClearError) {
  // f throws a kiln::Error (not an internal one) whose message says `what`.
  auto throws_with = [](auto f, const char* what) { EXPECT_TRUE(kiln::testing::error_says(f, {what})) << what; };
  Tensor x = randn({2, 4, 3, 3}), w = randn({4}), b = randn({4});
  Attrs a = bn_attrs(true);
  throws_with([&] { dispatch(OpId::batch_norm, {x, w, b, Tensor(), Tensor()}, Attrs(a).set("activation", "tanh")); },
              "batch_norm: activation=\"tanh\" is not an activation kiln fuses");
  throws_with(
      [&] {
        dispatch(OpId::batch_norm, {x.to(DType::Float64), w, b, Tensor(), Tensor()},
                 Attrs(a).set("activation", "relu"));
      },
      "a fused activation is for float32 tensors on the CPU, got float64");
  Tensors bn = dispatch(OpId::batch_norm, {x, w, b, Tensor(), Tensor()}, a);
  throws_with([&] { dispatch(OpId::batch_norm_backward, {x, x, w, bn[1], bn[2], b}, bn_bwd_attrs(true)); },
              "the sixth, bias, only with a fused activation");
  throws_with([&] { dispatch(OpId::batch_norm, {x, w, b, Tensor(), Tensor(), randn({2, 4, 3, 4})}, a); },
              "batch_norm: the residual must have the input's shape and dtype");
  // The fused forms are the compiler's, made after the backward graph.
  Tensor xg = randn({2, 4, 3, 3}).requires_grad_(true);
  Tensor z = dispatch(OpId::batch_norm, {xg, w, b, Tensor(), Tensor()}, Attrs(a).set("activation", "relu"))[0];
  throws_with([&] { z.sum().backward(); }, "with a fused activation has no derivative");
  Tensor zr = dispatch(OpId::batch_norm, {xg, w, b, Tensor(), Tensor(), randn({2, 4, 3, 3})}, a)[0];
  throws_with([&] { zr.sum().backward(); }, "with a fused residual has no derivative");
}

// ---- the pass ----

// x -> batch_norm -> act, and (with `backward`) act's backward into batch
// norm's backward, as AOT autograd writes a train step.
struct NormAct {
  GraphBuilder b;
  std::vector<ValueId> bn;
  ValueId z = kNoValue, gz = kNoValue;
  std::vector<ValueId> bb;
  NormAct(OpId act, bool backward, DType dt = DType::Float32) {
    manual_seed(41);
    auto o = TensorOptions().with_dtype(dt);
    ValueId x = b.input(randn({2, 16, 4, 4}, o));
    ValueId w = b.input(randn({16}, o)), bias = b.input(randn({16}, o));
    ValueId rm = b.input(zeros({16}, o)), rv = b.input(ones({16}, o));
    bn = b.ops(OpId::batch_norm, {x, w, bias, rm, rv}, bn_attrs(true));
    z = b.op(act, {bn[0]}, act == OpId::gelu ? gelu_attrs() : Attrs());
    b.output(z);
    if (!backward) return;
    gz = b.input(randn({2, 16, 4, 4}, o));
    const ValueId gy = act == OpId::gelu ? b.op(OpId::gelu_backward, {gz, bn[0]}, gelu_attrs())
                                         : b.op(OpId::relu_backward, {gz, z});
    bb = b.ops(OpId::batch_norm_backward, {gy, x, w, bn[1], bn[2]}, bn_bwd_attrs(true));
    for (ValueId v : bb) b.output(v);
  }
};

TEST(FuseNormActivation, GeluAndItsBackwardBecomeBatchNormsEpilogueAndPrologue) {
  NormAct c(OpId::gelu, /*backward=*/true);
  Graph before = c.b.g;
  EXPECT_EQ(fuse_norm_activations(c.b.g), 1);
  EXPECT_EQ(print(c.b.g),
            "graph graph(%0: f32[2, 16, 4, 4], %1: f32[16], %2: f32[16], %3: f32[16], %4: f32[16], "
            "%8: f32[2, 16, 4, 4]) {\n"
            "  %5: f32[2, 16, 4, 4], %6: f32[16], %7: f32[16] = batch_norm(%0, %1, %2, %3, %4) {training=true, "
            "momentum=0.1, eps=1e-05, activation=\"gelu\"}\n"
            "  %9: f32[2, 16, 4, 4], %10: f32[16], %11: f32[16] = batch_norm_backward(%8, %0, %1, %6, %7, %2) "
            "{training=true, eps=1e-05, activation=\"gelu\"}\n"
            "  return (%5, %9, %10, %11)\n"
            "}\n");
  testing::expect_same_results(before, c.b.g, c.b.example_inputs, 1e-4, 1e-5);
  EXPECT_EQ(fuse_norm_activations(c.b.g), 0);  // nothing left to fuse
}

TEST(FuseNormActivation, ReluFusesWithTheBackwardThatReadsItsOutput) {
  NormAct c(OpId::relu, /*backward=*/true);
  Graph before = c.b.g;
  EXPECT_EQ(fuse_norm_activations(c.b.g), 1);
  int fused = 0, ops = 0;
  for (const Node& n : c.b.g.nodes) {
    ops += n.kind == NodeKind::Op;
    fused += n.kind == NodeKind::Op && n.attrs.has("activation") && n.attrs.s("activation") == "relu";
  }
  EXPECT_EQ(ops, 2);
  EXPECT_EQ(fused, 2);
  testing::expect_same_results(before, c.b.g, c.b.example_inputs, 1e-4, 1e-5);
}

TEST(FuseNormActivation, ForwardAloneFusesToo) {
  NormAct c(OpId::gelu, /*backward=*/false);
  Graph before = c.b.g;
  EXPECT_EQ(fuse_norm_activations(c.b.g), 1);
  EXPECT_EQ(c.b.g.num_ops(), 1);
  testing::expect_same_results(before, c.b.g, c.b.example_inputs, 1e-6, 1e-6);
}

// ResNet's block tail: batch norm -> add(shortcut) -> relu, and the relu's
// backward (from its output) feeding both the norm's backward and the shortcut.
struct ResidualTail {
  GraphBuilder b;
  std::vector<ValueId> bn, shortcut_bn;
  ValueId y_sum = kNoValue;
  // With `downsample`, the shortcut is a second batch norm (of another input).
  explicit ResidualTail(bool downsample) {
    manual_seed(43);
    ValueId x = b.input(randn({2, 16, 4, 4})), r = b.input(randn({2, 16, 4, 4}));
    ValueId w = b.input(rand({16}).add(0.5)), bias = b.input(randn({16}));
    bn = b.ops(OpId::batch_norm, {x, w, bias, kNoValue, kNoValue}, bn_attrs(true));
    ValueId shortcut = r;
    if (downsample) {
      shortcut_bn = b.ops(OpId::batch_norm, {r, w, bias, kNoValue, kNoValue}, bn_attrs(true));
      shortcut = shortcut_bn[0];
    }
    y_sum = b.op(OpId::add, {bn[0], shortcut});
    const ValueId z = b.op(OpId::relu, {y_sum});
    b.output(z);
    const ValueId gz = b.input(randn({2, 16, 4, 4}));
    const ValueId gs = b.op(OpId::relu_backward, {gz, z});
    for (ValueId v : b.ops(OpId::batch_norm_backward, {gs, x, w, bn[1], bn[2]}, bn_bwd_attrs(true))) b.output(v);
    b.output(gs);  // the shortcut's gradient
  }
};

int residual_norms(const Graph& g) {
  int n = 0;
  for (const Node& node : g.nodes) n += node.op == OpId::batch_norm && node.inputs.size() == 6;
  return n;
}

TEST(FuseNormActivation, ResidualAddAndReluBecomeTheBatchNormsEpilogue) {
  ResidualTail c(/*downsample=*/false);
  Graph before = c.b.g;
  EXPECT_EQ(fuse_norm_activations(c.b.g), 1);
  EXPECT_EQ(residual_norms(c.b.g), 1);
  int ops = 0;
  for (const Node& n : c.b.g.nodes) ops += n.kind == NodeKind::Op;
  EXPECT_EQ(ops, 3);  // batch_norm (+ add + relu), relu_backward, batch_norm_backward
  testing::expect_same_results(before, c.b.g, c.b.example_inputs, 1e-5, 1e-6);
}

TEST(FuseNormActivation, OfTwoBatchNormsIntoOneAddTheFirstTakesIt) {
  // The fused node goes where the add was, after the shortcut's batch norm.
  ResidualTail c(/*downsample=*/true);
  Graph before = c.b.g;
  EXPECT_EQ(fuse_norm_activations(c.b.g), 1);
  EXPECT_EQ(residual_norms(c.b.g), 1);
  testing::expect_same_results(before, c.b.g, c.b.example_inputs, 1e-5, 1e-6);
}

TEST(FuseNormActivation, LeavesAloneWhatStillNeedsTheNormsOutput) {
  {  // y is a graph output too
    NormAct c(OpId::gelu, true);
    c.b.output(c.bn[0]);
    EXPECT_EQ(fuse_norm_activations(c.b.g), 0);
  }
  {  // y has another reader
    NormAct c(OpId::relu, false);
    c.b.output(c.b.op(OpId::sigmoid, {c.bn[0]}));
    EXPECT_EQ(fuse_norm_activations(c.b.g), 0);
  }
  {  // gelu's gradient is read by someone besides batch norm's backward
    NormAct c(OpId::gelu, true);
    c.b.output(c.b.g.nodes[c.b.g.values[static_cast<size_t>(c.bb[0])].node].inputs[0]);
    EXPECT_EQ(fuse_norm_activations(c.b.g), 0);
  }
  {  // the tanh GELU and float64 have no fused form
    NormAct t(OpId::gelu, false);
    t.b.g.nodes.back().attrs.set("approximate", std::string("tanh"));
    EXPECT_EQ(fuse_norm_activations(t.b.g), 0);
    NormAct d(OpId::relu, true, DType::Float64);
    EXPECT_EQ(fuse_norm_activations(d.b.g), 0);
  }
  {  // the sum before the relu has another reader
    ResidualTail c(false);
    c.b.output(c.y_sum);
    EXPECT_EQ(fuse_norm_activations(c.b.g), 0);
  }
  {  // relu's backward whose gradient goes elsewhere: the forward fuses, the backward stays
    NormAct c(OpId::relu, true);
    const ValueId gy = c.b.g.nodes[c.b.g.values[static_cast<size_t>(c.bb[0])].node].inputs[0];
    c.b.output(gy);
    Graph before = c.b.g;
    EXPECT_EQ(fuse_norm_activations(c.b.g), 1);
    int fused_backward = 0;
    for (const Node& n : c.b.g.nodes) fused_backward += n.op == OpId::batch_norm_backward && n.attrs.has("activation");
    EXPECT_EQ(fused_backward, 0);
    testing::expect_same_results(before, c.b.g, c.b.example_inputs, 1e-5, 1e-6);
  }
}

// Whole compiled train steps (cpp backend, SGD with momentum) against the
// same model trained eagerly: every batch norm followed by its activation
// fuses (airbench at width 0.25: the six GELUs after a batch norm; ResNet-18:
// the stem's and each block's first ReLU with their backward, and each
// block's batch norm -> add -> ReLU tail forward), and losses and weights agree.
TEST(FuseNormActivation, ZooTrainStepsFuseAndMatchEager) {
  struct Case {
    const char* name;
    int fused_forward, fused_backward;
  };
  for (const Case& k : {Case{"airbench", 6, 6}, Case{"resnet18", 17, 9}}) {
    SCOPED_TRACE(k.name);
    const double width = std::string(k.name) == "airbench" ? 0.25 : 1.0;
    const Graph executable = kiln::testing::expect_compiled_train_steps_match_eager(k.name, width, 51);
    int fwd = 0, bwd = 0;
    for (const Node& n : executable.nodes) {
      if (n.kind != NodeKind::Op || !n.attrs.has("activation")) continue;
      fwd += n.op == OpId::batch_norm;
      bwd += n.op == OpId::batch_norm_backward;
    }
    EXPECT_EQ(fwd, k.fused_forward);
    EXPECT_EQ(bwd, k.fused_backward);
  }
}

}  // namespace
}  // namespace kiln::compiler
