// nChw16c values between the convolutions: the ops' blocked forms against
// the plain ops (convolutions and pools bit for bit: values, indices, NaN and
// ties, several pool geometries; batch norm within rounding), the pass's
// before/expected graphs, the cases it leaves alone, its errors, and a zoo
// model compiled with it against eager.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "capture_checks.h"
#include "compiler/graph/interpreter.h"
#include "compiler/graph/printer.h"
#include "compiler/passes/blocked_layouts.h"
#include "compiler/passes/pipeline.h"
#include "core/cpu_features.h"
#include "graph_builder.h"
#include "kiln/compile.h"
#include "ops/blocked_layout.h"
#include "ops/conv_fused.h"
#include "testing/scoped_env.h"

namespace kiln::compiler {
namespace {

using testing::GraphBuilder;

size_t rank_of(const Graph& g, ValueId v) { return g.type(v).shape.size(); }

// Same dtype, shape and bytes (NaNs included): the blocked forms promise the
// plain ops' results exactly, not within a tolerance.
void expect_bitwise(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  ASSERT_EQ(got.shape(), want.shape()) << what;
  Tensor g = got.contiguous(), w = want.contiguous();
  EXPECT_EQ(std::memcmp(g.data_ptr(), w.data_ptr(), g.nbytes()), 0) << what << " differs";
}

// Integers in [-3, 3] (many ties inside each window) with a few NaNs.
Tensor ties_and_nans(const Shape& s, uint64_t seed) {
  manual_seed(seed);
  Tensor x = randn(s).contiguous();
  float* p = x.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) p[i] = std::nearbyint(1.5f * p[i]);
  for (int64_t i = 0; i < x.numel(); i += 37) p[i] = std::numeric_limits<float>::quiet_NaN();
  return x;
}

Attrs pool_attrs(int64_t k, int64_t s, int64_t pad, int64_t dil, bool ceil) {
  return Attrs()
      .set("kernel_size", std::vector<int64_t>{k, k})
      .set("stride", std::vector<int64_t>{s, s})
      .set("padding", std::vector<int64_t>{pad, pad})
      .set("dilation", std::vector<int64_t>{dil, dil})
      .set("ceil_mode", ceil);
}
Attrs blocked(Attrs a, const char* name) { return a.set(name, std::string(kNChw16c)); }

// ---- the ops' nChw16c forms ----

TEST(BlockedLayoutOps, MaxPoolMatchesThePlainPoolBitForBit) {
  struct Case {
    const char* name;
    Shape shape;
    Attrs attrs;
  };
  const Case cases[] = {
      {"2x2 stride 2", {2, 32, 8, 10}, pool_attrs(2, 2, 0, 1, false)},
      {"2x2 stride 2, odd planes", {1, 16, 9, 11}, pool_attrs(2, 2, 0, 1, false)},
      {"2x2 stride 2, ceil_mode", {1, 16, 9, 11}, pool_attrs(2, 2, 0, 1, true)},
      {"3x3 stride 2 padding 1", {2, 16, 7, 9}, pool_attrs(3, 2, 1, 1, false)},
      {"3x3 stride 1 padding 1 dilation 2", {1, 48, 8, 8}, pool_attrs(3, 1, 1, 2, false)},
      {"one output pixel", {1, 16, 2, 2}, pool_attrs(2, 2, 0, 1, false)},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Tensor x = ties_and_nans(c.shape, 5);
    Tensors want = dispatch(OpId::max_pool2d, {x}, c.attrs);
    Tensors got = dispatch(OpId::max_pool2d, {to_blocked(x)}, blocked(c.attrs, "input_layout"));
    expect_bitwise(got[0], want[0], "values");
    expect_bitwise(got[1], want[1], "indices");
    // Blocked out too: values and indices nChw16c.
    Tensors got_b =
        dispatch(OpId::max_pool2d, {to_blocked(x)}, blocked(blocked(c.attrs, "input_layout"), "output_layout"));
    expect_bitwise(got_b[0], to_blocked(want[0]), "blocked values");
    expect_bitwise(got_b[1], to_blocked(want[1]), "blocked indices");
    // Values only (indices=false), as eval graphs run it.
    Attrs no_idx = c.attrs;
    no_idx.set("indices", false);
    Tensors got_v = dispatch(OpId::max_pool2d, {to_blocked(x)}, blocked(no_idx, "input_layout"));
    expect_bitwise(got_v[0], want[0], "values without indices");
    EXPECT_EQ(got_v[1].numel(), 0);
  }
}

TEST(BlockedLayoutOps, MaxPoolTakesAPermutedViewToo) {
  // A non-contiguous [N, C/16, H, W, 16] view is read as its values.
  Tensor x = ties_and_nans({1, 32, 6, 6}, 6);
  Tensor b = x.view({1, 2, 16, 6, 6}).permute({0, 1, 3, 4, 2});
  Attrs a = pool_attrs(2, 2, 0, 1, false);
  expect_bitwise(dispatch(OpId::max_pool2d, {b}, blocked(a, "input_layout"))[0], dispatch(OpId::max_pool2d, {x}, a)[0],
                 "values");
}

TEST(BlockedLayoutOps, MaxPoolBackwardMatchesThePlainOneBlocked) {
  // Overlapping windows (3x3 stride 1) make several grad_out values land on
  // one input element: they must add up in the same order.
  // 2x2 stride 2 (written window by window when grad_out is blocked too) on
  // even planes, odd ones (the last row and column take no gradient) and in
  // ceil_mode (windows hang over: the scatter).
  struct Case {
    Attrs attrs;
    Shape shape;
  };
  for (const Case& c : {Case{pool_attrs(2, 2, 0, 1, false), {2, 32, 8, 8}}, Case{pool_attrs(3, 1, 1, 1, false), {2, 32, 8, 8}},
                        Case{pool_attrs(2, 2, 0, 1, false), {1, 16, 9, 11}},
                        Case{pool_attrs(2, 2, 0, 1, true), {1, 16, 9, 11}}}) {
    SCOPED_TRACE(shape_str(c.shape));
    const Attrs& a = c.attrs;
    Tensor x = ties_and_nans(c.shape, 7);
    Tensors y = dispatch(OpId::max_pool2d, {x}, a);
    manual_seed(8);
    Tensor go = randn(y[0].shape());
    Attrs b = Attrs().set("input_shape", x.shape());
    Tensor want = dispatch(OpId::max_pool2d_backward, {go, y[1]}, b)[0];
    Tensor got = dispatch(OpId::max_pool2d_backward, {go, y[1]}, blocked(b, "grad_input_layout"))[0];
    expect_bitwise(got, to_blocked(want), "grad_input");
    // grad_out and indices blocked as well, as max_pool2d's output_layout writes them.
    Tensor got_b = dispatch(OpId::max_pool2d_backward, {to_blocked(go), to_blocked(y[1])},
                            blocked(blocked(b, "grad_input_layout"), "grad_output_layout"))[0];
    expect_bitwise(got_b, to_blocked(want), "grad_input from blocked grad_out");
  }
}

TEST(BlockedLayoutOps, MaxPoolBackwardTakesIndicesOutsideTheirWindow) {
  // Indices are user data: one that points into another window (not what
  // max_pool2d writes) still lands where it points, as in the NCHW kernel.
  Tensor x = ties_and_nans({1, 16, 4, 4}, 9);
  Tensors y = dispatch(OpId::max_pool2d, {x}, pool_attrs(2, 2, 0, 1, false));
  Tensor idx = y[1].clone();
  idx.data<int64_t>()[5] = 0;  // channel 1's first window position, not its own window's
  idx.data<int64_t>()[3] = 15;  // channel 0's last output, pointing at the plane's last pixel (its own window)
  manual_seed(10);
  Tensor go = randn(y[0].shape());
  Attrs b = pool_attrs(2, 2, 0, 1, false).set("input_shape", x.shape());
  Tensor want = dispatch(OpId::max_pool2d_backward, {go, idx}, b)[0];
  Tensor got = dispatch(OpId::max_pool2d_backward, {to_blocked(go), to_blocked(idx)},
                        blocked(blocked(b, "grad_input_layout"), "grad_output_layout"))[0];
  expect_bitwise(got, to_blocked(want), "grad_input");
}

TEST(BlockedLayoutOps, BatchNormMatchesThePlainOneBlocked) {
  // Statistics summed lane by lane in another order: equal within float
  // rounding, in training (running statistics updated) and eval, and backward.
  manual_seed(12);
  Tensor x = randn({3, 32, 5, 7}).mul(2.0).add(0.5), w = randn({32}), bias = randn({32});
  for (bool training : {true, false}) {
    SCOPED_TRACE(training ? "training" : "eval");
    Tensor rm = randn({32}).mul(0.1), rv = randn({32}).abs().add(0.5);
    Tensor rm_b = rm.clone(), rv_b = rv.clone();
    Attrs a = Attrs().set("training", training).set("momentum", 0.1).set("eps", 1e-5);
    Tensors want = dispatch(OpId::batch_norm, {x, w, bias, rm, rv}, a);
    Tensors got = dispatch(OpId::batch_norm, {to_blocked(x), w, bias, rm_b, rv_b}, blocked(a, "layout"));
    EXPECT_TENSOR_CLOSE(got[0], to_blocked(want[0]), 1e-5, 1e-5);
    EXPECT_TENSOR_CLOSE(got[1], want[1], 1e-5, 1e-6);
    EXPECT_TENSOR_CLOSE(got[2], want[2], 1e-5, 1e-6);
    EXPECT_TENSOR_CLOSE(rm_b, rm, 1e-5, 1e-6);
    EXPECT_TENSOR_CLOSE(rv_b, rv, 1e-5, 1e-6);
    Tensor go = randn(x.shape());
    Attrs ba = Attrs().set("training", training).set("eps", 1e-5);
    Tensors bw = dispatch(OpId::batch_norm_backward, {go, x, w, want[1], want[2]}, ba);
    Tensors bg = dispatch(OpId::batch_norm_backward, {to_blocked(go), to_blocked(x), w, want[1], want[2]},
                          blocked(ba, "layout"));
    EXPECT_TENSOR_CLOSE(bg[0], to_blocked(bw[0]), 1e-4, 1e-5);
    EXPECT_TENSOR_CLOSE(bg[1], bw[1], 1e-4, 1e-4);
    EXPECT_TENSOR_CLOSE(bg[2], bw[2], 1e-4, 1e-4);
  }
}

TEST(BlockedLayoutOps, ConvolutionsReadAndWriteTheBlockedLayout) {
  manual_seed(9);
  Tensor x = randn({2, 16, 9, 9}), w = randn({32, 16, 3, 3}), bias = randn({32});
  Attrs a = testing::conv2d_attrs(1);
  for (const char* act : {"", "relu", "gelu"}) {
    SCOPED_TRACE(act);
    Attrs fa = a;
    if (*act != '\0') fa.set("activation", std::string(act));
    Tensor want = dispatch(OpId::conv2d, {x, w, bias}, fa)[0];
    expect_bitwise(dispatch(OpId::conv2d, {x, w, bias}, blocked(fa, "out_layout"))[0], to_blocked(want), "output");
  }
  Tensor go = randn({2, 32, 9, 9});
  Attrs di = Attrs(a).set("input_shape", x.shape()), dw = Attrs(a).set("weight_shape", w.shape());
  expect_bitwise(dispatch(OpId::conv2d_backward_input, {to_blocked(go), w}, blocked(di, "grad_out_layout"))[0],
                 dispatch(OpId::conv2d_backward_input, {go, w}, di)[0], "grad_input");
  expect_bitwise(dispatch(OpId::conv2d_backward_weight, {to_blocked(go), x}, blocked(dw, "grad_out_layout"))[0],
                 dispatch(OpId::conv2d_backward_weight, {go, x}, dw)[0], "grad_weight");
  // The input side blocked too: conv2d's input, conv2d_backward_input's
  // output, conv2d_backward_weight's input.
  Tensor xb = to_blocked(x), gob = to_blocked(go);
  for (const char* side : {"in_layout", "out_layout"}) {
    SCOPED_TRACE(side);
    Attrs both = blocked(blocked(a, "in_layout"), "out_layout");
    Attrs one = blocked(a, side);
    Tensor want = dispatch(OpId::conv2d, {x, w, bias}, a)[0];
    expect_bitwise(dispatch(OpId::conv2d, {xb, w, bias}, both)[0], to_blocked(want), "blocked both sides");
    const bool in = std::string(side) == "in_layout";
    Tensor got = dispatch(OpId::conv2d, {in ? xb : x, w, bias}, one)[0];
    expect_bitwise(got, in ? want : to_blocked(want), "one side");
  }
  expect_bitwise(dispatch(OpId::conv2d_backward_input, {gob, w},
                          blocked(blocked(di, "grad_out_layout"), "grad_input_layout"))[0],
                 to_blocked(dispatch(OpId::conv2d_backward_input, {go, w}, di)[0]), "blocked grad_input");
  expect_bitwise(dispatch(OpId::conv2d_backward_input, {go, w}, blocked(di, "grad_input_layout"))[0],
                 to_blocked(dispatch(OpId::conv2d_backward_input, {go, w}, di)[0]), "blocked grad_input only");
  expect_bitwise(dispatch(OpId::conv2d_backward_weight, {gob, xb},
                          blocked(blocked(dw, "grad_out_layout"), "input_layout"))[0],
                 dispatch(OpId::conv2d_backward_weight, {go, x}, dw)[0], "grad_weight from blocked input");
  // kiln explain describes a blocked convolution as the plain one.
  ConvRun run = describe_conv_run(OpId::conv2d, xb.shape(), w.shape(), true, DType::Float32, blocked(a, "in_layout"));
  EXPECT_EQ(run.impl, describe_conv_run(OpId::conv2d, x.shape(), w.shape(), true, DType::Float32, a).impl);
}

// x (NCHW) in oneDNN's padded nChw16c: channels rounded up to 16, zero lanes.
Tensor to_padded_blocked(const Tensor& x) {
  const int64_t c = x.shape()[1], cb = channel_blocks(c);
  Tensor p = zeros({x.shape()[0], cb * kChannelBlock, x.shape()[2], x.shape()[3]});
  p.slice(1, 0, c).copy_(x);
  return to_blocked(p);
}

TEST(BlockedLayoutOps, PaddedChannelsConvolutionsAndPoolMatchThePlainOps) {
  // 6 and 24 channels (the tutorial's and airbench's stems) in the padded
  // form: the convolution writes zeros into the padding lanes, the pool
  // reads the real channels into NCHW, a convolution reads it as it is.
  manual_seed(8);
  for (int64_t c : {6, 24}) {
    SCOPED_TRACE("channels " + std::to_string(c));
    Tensor x = randn({2, 3, 12, 12}), w = randn({c, 3, 3, 3}), bias = randn({c});
    Attrs a = testing::conv2d_attrs(0);
    a.set("activation", std::string("relu"));
    Tensor y = dispatch(OpId::conv2d, {x, w, bias}, a)[0];
    Tensor yb = to_padded_blocked(y);
    Tensor got = dispatch(OpId::conv2d, {x, w, bias}, blocked(a, "out_layout"))[0];
    ASSERT_EQ(got.shape(), (Shape{2, channel_blocks(c), 10, 10, 16}));
    expect_bitwise(got, yb, "conv2d out_layout, padded");
    Attrs pa = testing::max_pool_attrs(2, 2);
    Tensors want = dispatch(OpId::max_pool2d, {y}, pa);
    Tensors pooled = dispatch(OpId::max_pool2d, {yb}, blocked(pa, "input_layout").set("channels", c));
    expect_bitwise(pooled[0], want[0], "max_pool2d from a padded input");
    expect_bitwise(pooled[1], want[1], "max_pool2d indices from a padded input");
    Tensor w2 = randn({32, c, 3, 3});
    Attrs a2 = testing::conv2d_attrs(1);
    expect_bitwise(dispatch(OpId::conv2d, {yb, w2}, blocked(a2, "in_layout"))[0],
                   dispatch(OpId::conv2d, {y, w2}, a2)[0], "conv2d in_layout, padded");
    // The gradient of that input, padded, with zero padding lanes (what its
    // readers count on), and the weight gradient from the padded input.
    Tensor go = randn({2, 32, 10, 10});
    Attrs ga = Attrs(a2).set("input_shape", y.shape());
    Tensor gi = dispatch(OpId::conv2d_backward_input, {go, w2}, ga)[0];
    expect_bitwise(dispatch(OpId::conv2d_backward_input, {go, w2}, blocked(ga, "grad_input_layout"))[0],
                   to_padded_blocked(gi), "conv2d_backward_input grad_input_layout, padded");
    Attrs wa = Attrs(a2).set("weight_shape", w2.shape());
    expect_bitwise(dispatch(OpId::conv2d_backward_weight, {go, yb}, blocked(wa, "input_layout"))[0],
                   dispatch(OpId::conv2d_backward_weight, {go, y}, wa)[0], "conv2d_backward_weight input_layout, padded");
    // A layer of Winograd's size (airbench's 24 -> 64 at batch 8): forward
    // from a padded input into a padded output, and its backward data.
    Tensor x3 = randn({8, c, 31, 31}), w3 = randn({c, c, 3, 3});
    expect_bitwise(dispatch(OpId::conv2d, {to_padded_blocked(x3), w3}, blocked(blocked(a2, "in_layout"), "out_layout"))[0],
                   to_padded_blocked(dispatch(OpId::conv2d, {x3, w3}, a2)[0]), "conv2d 31x31, padded both sides");
    Tensor go3 = randn({8, c, 31, 31});
    Attrs ga3 = Attrs(a2).set("input_shape", x3.shape());
    expect_bitwise(
        dispatch(OpId::conv2d_backward_input, {to_padded_blocked(go3), w3},
                 blocked(blocked(ga3, "grad_out_layout"), "grad_input_layout"))[0],
        to_padded_blocked(dispatch(OpId::conv2d_backward_input, {go3, w3}, ga3)[0]), "backward data 31x31, padded");
    // kiln explain --executable describes it as the plain convolution.
    EXPECT_EQ(describe_conv_run(OpId::conv2d, yb.shape(), w2.shape(), false, DType::Float32, blocked(a2, "in_layout")).impl,
              describe_conv_run(OpId::conv2d, y.shape(), w2.shape(), false, DType::Float32, a2).impl);
  }
}

TEST(BlockedLayoutOps, MisuseIsAClearError) {
  Tensor x = randn({1, 16, 4, 4}), w = randn({16, 16, 1, 1});
  Attrs a = testing::conv2d_attrs(0);
  auto message = [](const auto& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  std::string e = message([&] { dispatch(OpId::conv2d, {x, w}, Attrs(a).set("out_layout", std::string("nhwc"))); });
  EXPECT_NE(e.find("out_layout=\"nhwc\" is not a layout kiln knows"), std::string::npos) << e;
  e = message([&] { dispatch(OpId::conv2d, {randn({1, 1, 4, 4, 16}), randn({16, 24, 1, 1})}, blocked(a, "in_layout")); });
  EXPECT_NE(e.find("an nChw16c operand of 24 channels is [N, 2, H, W, 16], got [1, 1, 4, 4, 16]"), std::string::npos)
      << e;
  e = message([&] {
    Attrs pa = blocked(blocked(testing::max_pool_attrs(2, 2), "input_layout"), "output_layout");
    dispatch(OpId::max_pool2d, {randn({1, 1, 4, 4, 16})}, pa.set("channels", int64_t{6}));
  });
  EXPECT_NE(e.find("pools into an NCHW output; leave output_layout out"), std::string::npos) << e;
  e = message([&] {
    auto o = TensorOptions().with_dtype(DType::Float64);
    dispatch(OpId::conv2d, {randn({1, 16, 4, 4}, o), randn({16, 16, 1, 1}, o)}, blocked(a, "out_layout"));
  });
  EXPECT_NE(e.find("for float32 tensors on the CPU, got float64"), std::string::npos) << e;
  e = message([&] { dispatch(OpId::max_pool2d, {x}, blocked(testing::max_pool_attrs(2, 2), "input_layout")); });
  EXPECT_NE(e.find("[N, C/16, H, W, 16], got [1, 16, 4, 4]"), std::string::npos) << e;
  e = message([&] {
    dispatch(OpId::max_pool2d, {x}, blocked(testing::max_pool_attrs(2, 2), "output_layout"));
  });
  EXPECT_NE(e.find("output_layout=nChw16c needs input_layout=nChw16c"), std::string::npos) << e;
  e = message([&] {
    auto o = TensorOptions().with_dtype(DType::Float64);
    Attrs bn = Attrs().set("training", true).set("momentum", 0.1).set("eps", 1e-5);
    dispatch(OpId::batch_norm, {randn({1, 1, 4, 4, 16}, o), Tensor(), Tensor(), Tensor(), Tensor()},
             blocked(bn, "layout"));
  });
  EXPECT_NE(e.find("batch_norm: the nChw16c layout is for float32"), std::string::npos) << e;
  // The blocked forms are made after the backward graph: no derivative.
  Tensor xr = randn({1, 16, 4, 4}).requires_grad_(true);
  e = message([&] { dispatch(OpId::conv2d, {xr, w}, blocked(a, "out_layout"))[0].sum().backward(); });
  EXPECT_NE(e.find("has no derivative"), std::string::npos) << e;
}

// ---- the pass ----

// x -> conv2d(w, bias) -> max_pool2d 2x2 -> output, with `channels` outputs.
struct ConvPool {
  GraphBuilder b;
  ValueId x, conv, pool;
  explicit ConvPool(int64_t channels = 16, DType dt = DType::Float32) {
    manual_seed(4);
    auto o = TensorOptions().with_dtype(dt);
    x = b.input(randn({2, 8, 6, 6}, o), 1);
    ValueId w = b.input(randn({channels, 8, 3, 3}, o));
    ValueId bias = b.input(randn({channels}, o));
    conv = b.op(OpId::conv2d, {x, w, bias}, testing::conv2d_attrs(1));
    pool = b.ops(OpId::max_pool2d, {conv}, testing::max_pool_attrs(2, 2))[0];
    b.output(pool);
  }
};

// Both graphs' outputs on the builder's inputs, bit for bit.
void expect_same_bits(const Graph& before, const GraphBuilder& b) {
  EXPECT_EQ(verify(b.g), std::vector<std::string>{});
  Tensors want = interpret(before, b.example_inputs), got = interpret(b.g, b.example_inputs);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) expect_bitwise(got[i], want[i], "output " + std::to_string(i));
}

TEST(BlockedLayouts, ConvolutionOutputReadByAMaxPoolBecomesBlocked) {
  ConvPool c;
  Graph before = c.b.g;
  EXPECT_EQ(keep_blocked_layouts(c.b.g), 1);
  EXPECT_EQ(print(c.b.g),
            "graph graph(%0: f32[s0, 8, 6, 6], %1: f32[16, 8, 3, 3], %2: f32[16]) {\n"
            "  %3: f32[s0, 1, 6, 6, 16] = conv2d(%0, %1, %2) {stride=[1, 1], padding=[1, 1], dilation=[1, 1], "
            "groups=1, out_layout=\"nChw16c\"}\n"
            "  %4: f32[s0, 16, 3, 3], %5: i64[s0, 16, 3, 3] = max_pool2d(%3) {kernel_size=[2, 2], stride=[2, 2], "
            "padding=[0, 0], dilation=[1, 1], ceil_mode=false, input_layout=\"nChw16c\"}\n"
            "  return (%4)\n"
            "}\n");
  expect_same_bits(before, c.b);
  // A second run finds nothing more to do.
  EXPECT_EQ(keep_blocked_layouts(c.b.g), 0);
}

TEST(BlockedLayouts, PaddedChannelsBetweenAConvolutionAndAPool) {
  // 6 output channels (the tutorial's first layer): the convolution writes
  // oneDNN's padded nChw16c as it computes it, the pool reads it and writes
  // NCHW, so no reorder of the large value runs.
  if (!cpu_has_avx512()) GTEST_SKIP() << "oneDNN blocks by 8 on this CPU";
  GraphBuilder b;
  manual_seed(4);
  ValueId x = b.input(randn({2, 8, 6, 6}));
  ValueId conv = b.op(OpId::conv2d, {x, b.input(randn({6, 8, 3, 3})), b.input(randn({6}))}, testing::conv2d_attrs(1));
  b.output(b.ops(OpId::max_pool2d, {conv}, testing::max_pool_attrs(2, 2))[0]);
  Graph before = b.g;
  EXPECT_EQ(keep_blocked_layouts(b.g), 1);
  EXPECT_EQ(print(b.g),
            "graph graph(%0: f32[2, 8, 6, 6], %1: f32[6, 8, 3, 3], %2: f32[6]) {\n"
            "  %3: f32[2, 1, 6, 6, 16] = conv2d(%0, %1, %2) {stride=[1, 1], padding=[1, 1], dilation=[1, 1], "
            "groups=1, out_layout=\"nChw16c\"}\n"
            "  %4: f32[2, 6, 3, 3], %5: i64[2, 6, 3, 3] = max_pool2d(%3) {kernel_size=[2, 2], stride=[2, 2], "
            "padding=[0, 0], dilation=[1, 1], ceil_mode=false, input_layout=\"nChw16c\", channels=6}\n"
            "  return (%4)\n"
            "}\n");
  expect_same_bits(before, b);
}

TEST(BlockedLayouts, PoolGradientReadByTheConvolutionsBackwardBecomesBlocked) {
  // The backward half of conv -> pool: the pool's gradient feeds both of the
  // convolution's backward kernels.
  GraphBuilder b;
  manual_seed(10);
  ValueId x = b.input(randn({2, 8, 6, 6}));
  ValueId w = b.input(randn({32, 8, 3, 3}));
  Attrs ca = testing::conv2d_attrs(1);
  ValueId y = b.op(OpId::conv2d, {x, w}, ca);
  std::vector<ValueId> p = b.ops(OpId::max_pool2d, {y}, testing::max_pool_attrs(2, 2));
  ValueId go = b.input(randn({2, 32, 3, 3}));
  ValueId gy = b.op(OpId::max_pool2d_backward, {go, p[1]}, Attrs().set("input_shape", Shape{2, 32, 6, 6}));
  ValueId gx = b.op(OpId::conv2d_backward_input, {gy, w}, Attrs(ca).set("input_shape", Shape{2, 8, 6, 6}));
  ValueId gw = b.op(OpId::conv2d_backward_weight, {gy, x}, Attrs(ca).set("weight_shape", Shape{32, 8, 3, 3}));
  b.output(p[0]);
  b.output(gx);
  b.output(gw);
  Graph before = b.g;
  EXPECT_EQ(keep_blocked_layouts(b.g), 2);
  const Node& pool_bwd = b.g.producer(gy);
  EXPECT_EQ(pool_bwd.attrs.s("grad_input_layout"), kNChw16c);
  EXPECT_EQ(b.g.type(gy).shape, (Shape{2, 2, 6, 6, 16}));
  int readers = 0;
  for (const Node& n : b.g.nodes)
    readers += n.attrs.has("grad_out_layout") && n.attrs.s("grad_out_layout") == kNChw16c;
  EXPECT_EQ(readers, 2);
  expect_same_bits(before, b);
}

TEST(BlockedLayouts, AConvGroupAndItsBackwardStayBlockedBetweenTheConvolutions) {
  // airbench's ConvGroup: conv -> max-pool -> batch norm -> GELU -> conv, and
  // its backward, with the graph's inputs and outputs NCHW. Everything in
  // between becomes nChw16c; nothing reorders between the layers.
  GraphBuilder b;
  manual_seed(13);
  ValueId x = b.input(randn({2, 16, 8, 8}));
  ValueId w1 = b.input(randn({32, 16, 3, 3}).mul(0.1)), w2 = b.input(randn({32, 32, 3, 3}).mul(0.1));
  ValueId gamma = b.input(randn({32})), beta = b.input(randn({32}));
  ValueId rm = b.input(zeros({32})), rv = b.input(ones({32}));
  Attrs ca = testing::conv2d_attrs(1);
  ValueId c1 = b.op(OpId::conv2d, {x, w1}, ca);
  std::vector<ValueId> p = b.ops(OpId::max_pool2d, {c1}, testing::max_pool_attrs(2, 2));
  std::vector<ValueId> bn = b.ops(OpId::batch_norm, {p[0], gamma, beta, rm, rv},
                                  Attrs().set("training", true).set("momentum", 0.1).set("eps", 1e-5));
  ValueId h = b.op(OpId::gelu, {bn[0]}, Attrs().set("approximate", std::string("none")));
  ValueId y = b.op(OpId::conv2d, {h, w2}, ca);
  ValueId go = b.input(randn({2, 32, 4, 4}));
  ValueId gh = b.op(OpId::conv2d_backward_input, {go, w2}, Attrs(ca).set("input_shape", Shape{2, 32, 4, 4}));
  ValueId gw2 = b.op(OpId::conv2d_backward_weight, {go, h}, Attrs(ca).set("weight_shape", Shape{32, 32, 3, 3}));
  ValueId gb = b.op(OpId::gelu_backward, {gh, bn[0]}, Attrs().set("approximate", std::string("none")));
  std::vector<ValueId> gbn = b.ops(OpId::batch_norm_backward, {gb, p[0], gamma, bn[1], bn[2]},
                                   Attrs().set("training", true).set("eps", 1e-5));
  ValueId gp = b.op(OpId::max_pool2d_backward, {gbn[0], p[1]}, Attrs().set("input_shape", Shape{2, 32, 8, 8}));
  ValueId gx = b.op(OpId::conv2d_backward_input, {gp, w1}, Attrs(ca).set("input_shape", Shape{2, 16, 8, 8}));
  ValueId gw1 = b.op(OpId::conv2d_backward_weight, {gp, x}, Attrs(ca).set("weight_shape", Shape{32, 16, 3, 3}));
  for (ValueId o : {y, gx, gw1, gw2, gbn[1], gbn[2]}) b.output(o);
  Graph before = b.g;
  // conv1's output, the pool's output and indices, batch norm's output, the
  // GELU, conv2's input gradient, the GELU's and batch norm's gradients and
  // the pool's: 9 values.
  EXPECT_EQ(keep_blocked_layouts(b.g), 9);
  for (ValueId v : {c1, p[0], p[1], bn[0], h, gh, gb, gbn[0], gp}) EXPECT_EQ(b.g.type(v).shape.size(), 5u) << v;
  for (ValueId v : {x, y, go, gx, gw1, gw2}) EXPECT_EQ(b.g.type(v).shape.size(), 4u) << v;
  auto attrs_of = [&](ValueId v) {
    std::string r;
    for (const auto& [k, val] : b.g.producer(v).attrs.items())
      if (k.find("layout") != std::string::npos) r += std::string(k) + " ";
    return r;
  };
  EXPECT_EQ(attrs_of(c1), "out_layout ");
  EXPECT_EQ(attrs_of(p[0]), "input_layout output_layout ");
  EXPECT_EQ(attrs_of(bn[0]), "layout ");
  EXPECT_EQ(attrs_of(y), "in_layout ");
  EXPECT_EQ(attrs_of(gh), "grad_input_layout ");
  EXPECT_EQ(attrs_of(gw2), "input_layout ");
  EXPECT_EQ(attrs_of(gbn[0]), "layout ");
  EXPECT_EQ(attrs_of(gp), "grad_input_layout grad_output_layout ");
  EXPECT_EQ(attrs_of(gx), "grad_out_layout ");
  EXPECT_EQ(attrs_of(gw1), "grad_out_layout ");
  // Batch norm sums in another order: equal within float rounding (which the
  // weight gradients, sums over every pixel, carry to ~1e-6 of their scale).
  testing::expect_same_results(before, b.g, b.example_inputs, 1e-4, 1e-4);
}

TEST(BlockedLayouts, LeavesAloneWhatTheLayoutCannotHoldOrSomeoneElseReads) {
  {
    SCOPED_TRACE("24 channels and a symbolic batch: oneDNN is asked about padding at static shapes only");
    ConvPool c(24);
    EXPECT_EQ(keep_blocked_layouts(c.b.g), 0);
  }
  {
    SCOPED_TRACE("6 channels read by a pointwise kernel: 16 lanes would be 2.7x its work");
    GraphBuilder b;
    manual_seed(4);
    ValueId conv = b.op(OpId::conv2d, {b.input(randn({2, 8, 6, 6})), b.input(randn({6, 8, 3, 3}))},
                        testing::conv2d_attrs(1));
    b.output(b.ops(OpId::max_pool2d, {b.op(OpId::relu, {conv})}, testing::max_pool_attrs(2, 2))[0]);
    EXPECT_EQ(keep_blocked_layouts(b.g), 0);
  }
  {
    SCOPED_TRACE("float64");
    ConvPool c(16, DType::Float64);
    EXPECT_EQ(keep_blocked_layouts(c.b.g), 0);
  }
  {
    SCOPED_TRACE("the convolution's output is also a graph output");
    ConvPool c;
    c.b.output(c.conv);
    EXPECT_EQ(keep_blocked_layouts(c.b.g), 0);
  }
  {
    SCOPED_TRACE("another op reads the convolution's output");
    ConvPool c;
    c.b.output(c.b.op(OpId::relu, {c.conv}));
    EXPECT_EQ(keep_blocked_layouts(c.b.g), 0);
  }
  {
    SCOPED_TRACE("max_pool2d_backward's output also read by something else");
    GraphBuilder b;
    manual_seed(11);
    ValueId x = b.input(randn({1, 16, 4, 4}));
    std::vector<ValueId> p = b.ops(OpId::max_pool2d, {x}, testing::max_pool_attrs(2, 2));
    ValueId go = b.input(randn({1, 16, 2, 2}));
    ValueId gy = b.op(OpId::max_pool2d_backward, {go, p[1]}, Attrs().set("input_shape", Shape{1, 16, 4, 4}));
    b.output(gy);
    EXPECT_EQ(keep_blocked_layouts(b.g), 0);
  }
}

TEST(BlockedLayouts, RunsInTheLayoutPassesOnlyWhereOneDnnBlocksBy16) {
  // On an AVX2 host oneDNN computes float32 in nChw8c: a 16c value would add
  // a reorder, so the pipeline leaves the graph plain there.
  ConvPool avx2;
  set_cpu_isa_override(CpuIsa::Avx2);
  run_passes(avx2.b.g, execution_passes());
  clear_cpu_isa_override();
  for (const Node& n : avx2.b.g.nodes) EXPECT_FALSE(n.attrs.has("out_layout"));
  if (!cpu_has_avx512()) GTEST_SKIP() << "this CPU has no AVX-512: the pipeline never blocks here";
  ConvPool c;
  run_passes(c.b.g, execution_passes());
  int blocked_convs = 0;
  for (const Node& n : c.b.g.nodes) blocked_convs += n.attrs.has("out_layout");
  EXPECT_EQ(blocked_convs, 1);
  kiln::testing::ScopedEnv off("KILN_DISABLE_PASSES", "blocked_layouts");
  ConvPool d;
  run_passes(d.b.g, execution_passes());
  for (const Node& n : d.b.g.nodes) EXPECT_FALSE(n.attrs.has("out_layout"));
}

TEST(BlockedLayouts, CompiledAirbenchEvalUsesItAndMatchesEager) {
  // airbench (width 0.25: 16 and 64 channels) pools after three of its
  // convolutions; the compiled forward keeps those outputs nChw16c.
  kiln::testing::CompiledEval r = kiln::testing::compile_zoo_eval("airbench", "cpp", 21);
  EXPECT_TENSOR_CLOSE(r.got, r.want, 1e-4, 1e-5);
  // Every convolution after the 6-channel stem's reads nChw16c, every one
  // but the last writes it (the global max-pool reads NCHW).
  int blocked_out = 0, blocked_in = 0;
  for (const Node& n : r.executable.nodes) {
    blocked_out += n.kind == NodeKind::Op && n.attrs.has("out_layout");
    blocked_in += n.kind == NodeKind::Op && n.attrs.has("in_layout");
  }
  EXPECT_EQ(blocked_out, cpu_has_avx512() ? 5 : 0);
  EXPECT_EQ(blocked_in, cpu_has_avx512() ? 5 : 0);
}

// Whole compiled train steps (cpp backend, SGD with momentum) against eager.
// airbench's 24-channel stem keeps its value and gradients padded nChw16c
// (32 lanes: the convolution's backward-data output, GELU and its backward,
// the bias gradient's lane sums); the tutorial's 6 channels in 16 lanes stay
// NCHW in the train step (relu's backward, the pool's backward and the bias
// sum would work on 2.7x the elements), while its 16-channel gradient is
// blocked through its bias sum. Losses and weights agree with eager.
TEST(BlockedLayouts, CompiledTrainStepsPadAirbenchsStemAndMatchEager) {
  struct Case {
    const char* name;
    int padded_gradients, channel_sums;
  };
  for (const Case& k : {Case{"tutorial", 0, 1}, Case{"airbench", 1, 1}}) {
    SCOPED_TRACE(k.name);
    const Graph executable = kiln::testing::expect_compiled_train_steps_match_eager(k.name, 1.0, 61);
    int padded_gradients = 0, channel_sums = 0;
    for (const Node& n : executable.nodes) {
      if (n.kind != NodeKind::Op) continue;
      padded_gradients += n.attrs.has("grad_input_layout") && n.attrs.ints("input_shape")[1] % kChannelBlock != 0;
      channel_sums += n.op == OpId::sum && rank_of(executable, n.inputs[0]) == 5;
    }
    EXPECT_EQ(padded_gradients, cpu_has_avx512() ? k.padded_gradients : 0);
    EXPECT_EQ(channel_sums, cpu_has_avx512() ? k.channel_sums : 0);
  }
}

}  // namespace
}  // namespace kiln::compiler
