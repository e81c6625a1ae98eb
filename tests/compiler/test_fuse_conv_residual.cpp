// A residual add (and its ReLU) fused into the convolution before it: conv2d
// with a residual input against the convolution, the add and the activation
// apart (NCHW and nChw16c, Winograd and direct kernels), in place into a
// residual nothing else holds, its derivative, its errors, and the pass's
// before/expected graphs and the cases it leaves alone. ResNet-18's compiled
// eval forward against eager: FuseConvActivation.ZooModelsEvalForwardsFuseAndMatchEager.
#include <gtest/gtest.h>

#include <string>

#include "capture_checks.h"
#include "compiler/backend/cpp_executable.h"
#include "compiler/graph/printer.h"
#include "compiler/passes/fuse_conv_residual.h"
#include "graph_builder.h"
#include "ops/blocked_layout.h"
#include "ops/conv_fused.h"
#include "testing/errors.h"

namespace kiln::compiler {
namespace {

using testing::GraphBuilder;

Attrs pad1() { return testing::conv2d_attrs(1); }

// act(conv(x, w, b) + r) as separate ops.
Tensor apart(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& r, const std::string& act,
             const Attrs& a) {
  Tensor y = dispatch1(OpId::add, {dispatch1(OpId::conv2d, {x, w, b}, a), r});
  if (act == "relu") return dispatch1(OpId::relu, {y});
  if (act == "gelu") return dispatch1(OpId::gelu, {y}, Attrs().set("approximate", std::string("none")));
  return y;
}

// ---- the op ----

TEST(FuseConvResidualOps, ConvolutionPlusResidualMatchesTheOpsApart) {
  struct Case {
    int64_t channels, k;  // 16 channels 3x3: Winograd on AVX-512; 2x2: direct everywhere
    bool blocked;
  };
  for (const Case& c : {Case{16, 3, false}, Case{16, 3, true}, Case{4, 2, false}, Case{32, 3, true}})
    for (const std::string act : {"", "relu", "gelu"}) {
      SCOPED_TRACE(std::to_string(c.channels) + " channels " + std::to_string(c.k) + "x" + std::to_string(c.k) +
                   (c.blocked ? " nChw16c " : " NCHW ") + (act.empty() ? "no activation" : act));
      manual_seed(41);
      const int64_t C = c.channels;
      Tensor x = randn({2, C, 9, 9}), w = randn({C, C, c.k, c.k}).mul(0.2), b = randn({C});
      Attrs a = pad1();
      Tensor r = randn(dispatch1(OpId::conv2d, {x, w, b}, a).shape());
      Tensor want = apart(x, w, b, r, act, a);
      if (!act.empty()) a.set("activation", act);
      Tensor xin = x, rin = r;
      if (c.blocked) {
        xin = to_blocked(x), rin = to_blocked(r);
        a.set("in_layout", std::string(kNChw16c)).set("out_layout", std::string(kNChw16c));
      }
      const Tensor r_before = rin.clone();
      Tensor got = dispatch1(OpId::conv2d, {xin, w, b, rin}, a);
      EXPECT_TENSOR_CLOSE(got, c.blocked ? to_blocked(want) : want, 1e-5, 1e-5);
      // The caller still holds the residual: it is read, never written.
      EXPECT_TENSOR_CLOSE(rin, r_before, 0, 0);
    }
}

TEST(FuseConvResidualOps, AResidualNothingElseHoldsBecomesTheOutput) {
  // Handed over as the compiled graph hands a value over on its last read:
  // the output takes its storage, and the convolution adds into it.
  manual_seed(42);
  Tensor x = randn({2, 16, 8, 8}), w = randn({16, 16, 3, 3}).mul(0.2), b = randn({16}), r = randn({2, 16, 8, 8});
  const Tensor want = apart(x, w, b, r, "relu", pad1());
  Tensor r_copy = r.clone();
  const void* storage = r_copy.data_ptr();
  Tensors ins{x, w, b};
  ins.push_back(std::move(r_copy));
  Tensor got = dispatch(OpId::conv2d, std::move(ins), Attrs(pad1()).set("activation", "relu"))[0];
  EXPECT_EQ(got.data_ptr(), storage);
  EXPECT_TENSOR_CLOSE(got, want, 1e-5, 1e-5);
  // A view of the residual alive elsewhere: its storage is shared, so it is copied.
  Tensor r2 = r.clone();
  Tensor view = r2.view({2, 16, 64});
  Tensors ins2{x, w, b};
  ins2.push_back(std::move(r2));
  Tensor got2 = dispatch(OpId::conv2d, std::move(ins2), Attrs(pad1()).set("activation", "relu"))[0];
  EXPECT_NE(got2.data_ptr(), view.data_ptr());
  EXPECT_TENSOR_CLOSE(view.view({2, 16, 8, 8}), r, 0, 0);
  EXPECT_TENSOR_CLOSE(got2, want, 1e-5, 1e-5);
}

TEST(FuseConvResidualOps, TheDerivativeIsTheOpsApartOnes) {
  for (const char* act : {"", "relu"}) {
    SCOPED_TRACE(act);
    manual_seed(43);
    Tensor x = randn({2, 4, 5, 5}).requires_grad_(), w = randn({4, 4, 3, 3}).requires_grad_();
    Tensor b = randn({4}).requires_grad_(), r = randn({2, 4, 5, 5}).requires_grad_();
    Tensor g = randn({2, 4, 5, 5});
    Attrs a = pad1();
    if (act[0] != '\0') a.set("activation", std::string(act));
    // The residual requires grad: it is kept for the derivative, not written.
    const Tensor r_before = r.detach().clone();
    sum(mul(dispatch1(OpId::conv2d, {x, w, b, r}, a), g)).backward();
    EXPECT_TENSOR_CLOSE(r.detach(), r_before, 0, 0);
    Tensors fused{x.grad(), w.grad(), b.grad(), r.grad()};
    Tensor x2 = x.detach().requires_grad_(), w2 = w.detach().requires_grad_();
    Tensor b2 = b.detach().requires_grad_(), r2 = r.detach().requires_grad_();
    sum(mul(apart(x2, w2, b2, r2, act, pad1()), g)).backward();
    Tensors want{x2.grad(), w2.grad(), b2.grad(), r2.grad()};
    for (size_t i = 0; i < want.size(); ++i) EXPECT_TENSOR_CLOSE(fused[i], want[i], 1e-4, 1e-5) << "input " << i;
  }
}

TEST(FuseConvResidualOps, AResidualOfAnotherShapeIsAClearError) {
  Tensor x = randn({2, 4, 5, 5}), w = randn({4, 4, 3, 3});
  EXPECT_TRUE(kiln::testing::error_says(
      [&] { dispatch1(OpId::conv2d, {x, w, Tensor(), randn({2, 4, 3, 3})}, pad1()); },
      {"conv2d: the residual added to the output must have the output's shape [2, 4, 5, 5]"}));
}

// ---- the pass ----

// x -> conv2d(w, b) -> add(r) [-> relu]; r an input of the conv's output shape.
struct ConvAdd {
  GraphBuilder b;
  ValueId x, w, bias, r, conv, add;
  explicit ConvAdd(int64_t channels = 16, Shape r_shape = {}) {
    manual_seed(44);
    x = b.input(randn({2, channels, 6, 6}));
    w = b.input(randn({channels, channels, 3, 3}).mul(0.2));
    bias = b.input(randn({channels}));
    r = b.input(randn(r_shape.empty() ? Shape{2, channels, 6, 6} : r_shape));
    conv = b.op(OpId::conv2d, {x, w, bias}, pad1());
    add = b.op(OpId::add, {conv, r});
  }
};

TEST(FuseConvResidual, AddAndReluBecomeTheConvolutionsEpilogue) {
  ConvAdd c;
  c.b.output(c.b.op(OpId::relu, {c.add}));
  Graph before = c.b.g;
  EXPECT_EQ(fuse_conv_residuals(c.b.g), 1);
  EXPECT_EQ(print(c.b.g),
            "graph graph(%0: f32[2, 16, 6, 6], %1: f32[16, 16, 3, 3], %2: f32[16], %3: f32[2, 16, 6, 6]) {\n"
            "  %4: f32[2, 16, 6, 6] = conv2d(%0, %1, %2, %3) {stride=[1, 1], padding=[1, 1], dilation=[1, 1], "
            "groups=1, activation=\"relu\"}\n"
            "  return (%4)\n"
            "}\n");
  testing::expect_same_results(before, c.b.g, c.b.example_inputs);
  // The residual as the add's first operand, and no relu: the add alone.
  GraphBuilder b;
  manual_seed(45);
  ValueId x = b.input(randn({2, 16, 6, 6})), w = b.input(randn({16, 16, 3, 3}).mul(0.2));
  ValueId r = b.input(randn({2, 16, 6, 6}));
  ValueId s = b.op(OpId::add, {r, b.op(OpId::conv2d, {x, w}, pad1())});
  b.output(b.op(OpId::sigmoid, {s}));
  Graph before2 = b.g;
  EXPECT_EQ(fuse_conv_residuals(b.g), 1);
  EXPECT_EQ(print(b.g),
            "graph graph(%0: f32[2, 16, 6, 6], %1: f32[16, 16, 3, 3], %2: f32[2, 16, 6, 6]) {\n"
            "  %3: f32[2, 16, 6, 6] = conv2d(%0, %1, None, %2) {stride=[1, 1], padding=[1, 1], dilation=[1, 1], "
            "groups=1}\n"
            "  %4: f32[2, 16, 6, 6] = sigmoid(%3)\n"
            "  return (%4)\n"
            "}\n");
  testing::expect_same_results(before2, b.g, b.example_inputs);
}

TEST(FuseConvResidual, LeavesAloneWhatItCannotFuse) {
  {  // the convolution's output is also a graph output
    ConvAdd c;
    c.b.output(c.b.op(OpId::relu, {c.add}));
    c.b.output(c.conv);
    EXPECT_EQ(fuse_conv_residuals(c.b.g), 0);
  }
  {  // a broadcast residual (one value per channel): not the output's shape
    ConvAdd c(16, {1, 16, 1, 1});
    c.b.output(c.add);
    EXPECT_EQ(fuse_conv_residuals(c.b.g), 0);
  }
  {  // an add with alpha
    GraphBuilder b;
    manual_seed(48);
    ValueId x = b.input(randn({2, 16, 6, 6})), w = b.input(randn({16, 16, 3, 3}));
    ValueId r = b.input(randn({2, 16, 6, 6}));
    b.output(b.op(OpId::add, {b.op(OpId::conv2d, {x, w}, pad1()), r}, Attrs().set("alpha", 2.0)));
    EXPECT_EQ(fuse_conv_residuals(b.g), 0);
  }
  {  // a convolution with an activation: its activation comes before the add
    GraphBuilder b;
    manual_seed(46);
    ValueId x = b.input(randn({2, 16, 6, 6})), w = b.input(randn({16, 16, 3, 3}));
    ValueId r = b.input(randn({2, 16, 6, 6}));
    ValueId conv = b.op(OpId::conv2d, {x, w}, Attrs(pad1()).set("activation", "relu"));
    b.output(b.op(OpId::add, {conv, r}));
    EXPECT_EQ(fuse_conv_residuals(b.g), 0);
  }
  {  // GELU after the add stays its own op (Winograd takes sum then ReLU only); the add fuses
    ConvAdd c;
    ValueId gelu = c.b.op(OpId::gelu, {c.add}, Attrs().set("approximate", std::string("none")));
    c.b.output(gelu);
    EXPECT_EQ(fuse_conv_residuals(c.b.g), 1);
    int gelus = 0;
    for (const Node& n : c.b.g.nodes) gelus += n.kind == NodeKind::Op && n.op == OpId::gelu;
    EXPECT_EQ(gelus, 1);
  }
}

TEST(FuseConvResidual, TheCppBackendRunsTheFusedGraphAsTheUnfusedOne) {
  // The residual is another convolution's output read for the last time by
  // the fused node (a ResNet downsampling block's tail): the executable hands
  // it over and the convolution adds into it.
  GraphBuilder b;
  manual_seed(47);
  ValueId x = b.input(randn({2, 16, 8, 8}));
  ValueId w1 = b.input(randn({16, 16, 3, 3}).mul(0.2)), w2 = b.input(randn({16, 16, 1, 1}).mul(0.2));
  ValueId y = b.op(OpId::conv2d, {x, w1}, pad1());
  ValueId shortcut = b.op(OpId::conv2d, {x, w2}, testing::conv2d_attrs(0));
  b.output(b.op(OpId::relu, {b.op(OpId::add, {y, shortcut})}));
  Graph before = b.g;
  ASSERT_EQ(fuse_conv_residuals(b.g), 1);
  CppExecutable exe(b.g);
  Tensors want = interpret(before, b.example_inputs);
  for (int run = 0; run < 2; ++run) EXPECT_TENSOR_CLOSE(exe.run(b.example_inputs, {})[0], want[0], 1e-5, 1e-5);
}

}  // namespace
}  // namespace kiln::compiler
