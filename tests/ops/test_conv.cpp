// conv2d and its backward ops against PyTorch goldens (tools/goldens/gen_nn.py)
// and finite-difference gradients in float64.
//
// Tolerances: float32 convolution runs on oneDNN, which picks Winograd 4x3
// for 3x3 layers; Winograd's error against direct convolution is ~1e-6
// relative L2 (see the team notes, shared/notes/cpu-convolution.md), so goldens are
// compared with rtol 1e-4 / atol 1e-4 rather than the default 1e-5 / 1e-6.
#include "core/cpu_features.h"
#include "ops/dnnl/dnnl_utils.h"
#include "testing/golden.h"
#include "testing/gradcheck.h"

namespace kiln {
namespace {

using testing::randn_input;

constexpr double kConvRtol = 1e-4, kConvAtol = 1e-4;

struct ConvCase {
  const char* name;
  Conv2dParams p;
  bool bias;
};

Conv2dParams params(std::vector<int64_t> s, std::vector<int64_t> pad, std::vector<int64_t> d, int64_t groups) {
  Conv2dParams p;
  p.stride = std::move(s);
  p.padding = std::move(pad);
  p.dilation = std::move(d);
  p.groups = groups;
  return p;
}

const std::vector<ConvCase>& cases() {
  static const std::vector<ConvCase> c = {
      {"conv_basic", params({1, 1}, {1, 1}, {1, 1}, 1), true},
      {"conv_stride2", params({2, 2}, {1, 1}, {1, 1}, 1), false},
      {"conv_dil2", params({1, 1}, {2, 2}, {2, 2}, 1), true},
      {"conv_groups2", params({1, 1}, {1, 1}, {1, 1}, 2), true},
      {"conv_rect", params({2, 1}, {1, 0}, {1, 1}, 1), false},
      {"conv_1x1", params({1, 1}, {0, 0}, {1, 1}, 1), true},
      {"conv_wide", params({1, 1}, {1, 1}, {1, 1}, 1), false},
      {"conv_deep", params({1, 1}, {1, 1}, {1, 1}, 1), true},
  };
  return c;
}

Tensor gold(const std::string& c, const char* t) { return testing::goldens("nn")[c + "." + t]; }

TEST(Conv, GoldenForward) {
  for (const ConvCase& c : cases()) {
    SCOPED_TRACE(c.name);
    Tensor b = c.bias ? gold(c.name, "b") : Tensor();
    Tensor y = conv2d(gold(c.name, "x"), gold(c.name, "w"), b, c.p);
    EXPECT_TENSOR_CLOSE(y, gold(c.name, "y"), kConvRtol, kConvAtol);
  }
}

TEST(Conv, GoldenBackwardOps) {
  for (const ConvCase& c : cases()) {
    SCOPED_TRACE(c.name);
    Tensor x = gold(c.name, "x"), w = gold(c.name, "w"), gy = gold(c.name, "gy");
    EXPECT_TENSOR_CLOSE(conv2d_backward_input(gy, w, x.shape(), c.p), gold(c.name, "gx"), kConvRtol, kConvAtol);
    EXPECT_TENSOR_CLOSE(conv2d_backward_weight(gy, x, w.shape(), c.p), gold(c.name, "gw"), kConvRtol, kConvAtol);
  }
}

TEST(Conv, GoldenAutograd) {
  for (const ConvCase& c : cases()) {
    SCOPED_TRACE(c.name);
    Tensor x = gold(c.name, "x").detach().requires_grad_();
    Tensor w = gold(c.name, "w").detach().requires_grad_();
    Tensor b = c.bias ? gold(c.name, "b").detach().requires_grad_() : Tensor();
    Tensor y = conv2d(x, w, b, c.p);
    y.backward(gold(c.name, "gy"));
    EXPECT_TENSOR_CLOSE(x.grad(), gold(c.name, "gx"), kConvRtol, kConvAtol);
    EXPECT_TENSOR_CLOSE(w.grad(), gold(c.name, "gw"), kConvRtol, kConvAtol);
    if (c.bias) {
      EXPECT_TENSOR_CLOSE(b.grad(), gold(c.name, "gb"), kConvRtol, kConvAtol);
    }
  }
}

// Strided (non-contiguous) inputs give the same result as their contiguous copies.
TEST(Conv, NonContiguousInputs) {
  Tensor x = gold("conv_basic", "x"), w = gold("conv_basic", "w"), b = gold("conv_basic", "b");
  Conv2dParams p = params({1, 1}, {1, 1}, {1, 1}, 1);
  Tensor xt = x.transpose(2, 3).contiguous().transpose(2, 3);  // same values, column-major planes
  ASSERT_FALSE(xt.is_contiguous());
  EXPECT_TENSOR_CLOSE(conv2d(xt, w, b, p), gold("conv_basic", "y"), kConvRtol, kConvAtol);
}

// The float64 reference path agrees with torch's float32 result.
TEST(Conv, Float64ReferenceMatchesGoldens) {
  for (const ConvCase& c : cases()) {
    SCOPED_TRACE(c.name);
    Tensor b = c.bias ? gold(c.name, "b").to(DType::Float64) : Tensor();
    Tensor x = gold(c.name, "x").to(DType::Float64), w = gold(c.name, "w").to(DType::Float64);
    Tensor gy = gold(c.name, "gy").to(DType::Float64);
    EXPECT_TENSOR_CLOSE(conv2d(x, w, b, c.p).to(DType::Float32), gold(c.name, "y"), 1e-4, 1e-5);
    EXPECT_TENSOR_CLOSE(conv2d_backward_input(gy, w, x.shape(), c.p).to(DType::Float32), gold(c.name, "gx"), 1e-4,
                        1e-5);
    EXPECT_TENSOR_CLOSE(conv2d_backward_weight(gy, x, w.shape(), c.p).to(DType::Float32), gold(c.name, "gw"), 1e-4,
                        1e-4);
  }
}

TEST(Conv, GradcheckFloat64) {
  struct Small {
    Shape x, w;
    Conv2dParams p;
    bool bias;
  };
  std::vector<Small> smalls = {
      {{2, 2, 5, 5}, {3, 2, 3, 3}, params({1, 1}, {1, 1}, {1, 1}, 1), true},
      {{1, 2, 6, 5}, {2, 2, 3, 3}, params({2, 2}, {1, 1}, {1, 1}, 1), false},
      {{1, 2, 7, 7}, {2, 2, 3, 3}, params({1, 1}, {2, 2}, {2, 2}, 1), true},
      {{1, 4, 4, 4}, {4, 2, 2, 3}, params({1, 2}, {1, 0}, {1, 1}, 2), true},
  };
  uint64_t seed = 10;
  for (const Small& s : smalls) {
    SCOPED_TRACE(shape_str(s.x) + " * " + shape_str(s.w));
    std::vector<Tensor> in{randn_input(s.x, seed++), randn_input(s.w, seed++)};
    if (s.bias) in.push_back(randn_input({s.w[0]}, seed++));
    Conv2dParams p = s.p;
    auto f = [p](const std::vector<Tensor>& v) { return conv2d(v[0], v[1], v.size() > 2 ? v[2] : Tensor(), p); };
    EXPECT_GRADCHECK(f, in);
  }
}

// The backward ops are differentiable too (double backward), through each other.
TEST(Conv, GradcheckBackwardOps) {
  Conv2dParams p = params({2, 1}, {1, 1}, {1, 1}, 1);
  Shape xs{1, 2, 5, 4}, ws{3, 2, 3, 3};
  Tensor gy = randn_input({1, 3, 3, 4}, 1), w = randn_input(ws, 2), x = randn_input(xs, 3);
  auto fin = [&](const std::vector<Tensor>& v) { return conv2d_backward_input(v[0], v[1], xs, p); };
  EXPECT_GRADCHECK(fin, (std::vector<Tensor>{gy, w}));
  auto fw = [&](const std::vector<Tensor>& v) { return conv2d_backward_weight(v[0], v[1], ws, p); };
  EXPECT_GRADCHECK(fw, (std::vector<Tensor>{gy, x}));
}

// oneDNN (float32) against the float64 reference loops over many geometries,
// including ones where the last window ends before the padded edge.
TEST(Conv, OneDnnMatchesReferenceLoops) {
  struct Geo {
    Shape x, w;
    Conv2dParams p;
  };
  std::vector<Geo> geos = {
      {{2, 3, 8, 8}, {4, 3, 3, 3}, params({2, 2}, {0, 0}, {1, 1}, 1)},
      {{1, 4, 9, 10}, {6, 2, 3, 3}, params({2, 3}, {1, 0}, {1, 1}, 2)},
      {{2, 4, 11, 9}, {4, 1, 3, 3}, params({2, 2}, {1, 1}, {1, 1}, 4)},  // depthwise
      {{1, 3, 12, 12}, {5, 3, 5, 5}, params({3, 3}, {2, 2}, {1, 1}, 1)},
      {{2, 8, 10, 10}, {8, 8, 3, 3}, params({1, 1}, {0, 0}, {3, 2}, 1)},
      {{1, 2, 6, 6}, {3, 2, 4, 4}, params({1, 1}, {2, 2}, {1, 1}, 1)},
      {{3, 16, 7, 7}, {16, 16, 1, 1}, params({2, 2}, {0, 0}, {1, 1}, 1)},
      {{2, 32, 9, 9}, {32, 32, 3, 3}, params({1, 1}, {1, 1}, {1, 1}, 1)},
  };
  uint64_t seed = 100;
  for (const Geo& g : geos) {
    SCOPED_TRACE(shape_str(g.x) + " * " + shape_str(g.w));
    Generator gen(seed++);
    Tensor x = randn(g.x, {}, &gen), w = randn(g.w, {}, &gen), b = randn({g.w[0]}, {}, &gen);
    Tensor y = conv2d(x, w, b, g.p);
    Tensor gy = randn(y.shape(), {}, &gen);
    auto f64 = [](const Tensor& t) { return t.to(DType::Float64); };
    auto f32 = [](const Tensor& t) { return t.to(DType::Float32); };
    EXPECT_TENSOR_CLOSE(y, f32(conv2d(f64(x), f64(w), f64(b), g.p)), kConvRtol, kConvAtol);
    EXPECT_TENSOR_CLOSE(conv2d_backward_input(gy, w, g.x, g.p),
                        f32(conv2d_backward_input(f64(gy), f64(w), g.x, g.p)), kConvRtol, kConvAtol);
    EXPECT_TENSOR_CLOSE(conv2d_backward_weight(gy, x, g.w, g.p),
                        f32(conv2d_backward_weight(f64(gy), f64(x), g.w, g.p)), kConvRtol, kConvAtol);
  }
}

TEST(Conv, PrimitiveCacheIsReused) {
  Tensor x = gold("conv_deep", "x"), w = gold("conv_deep", "w");
  Conv2dParams p = params({1, 1}, {1, 1}, {1, 1}, 1);
  Tensor y1 = conv2d(x, w, Tensor(), p);
  size_t n = onednn::cache_size();
  Tensor y2 = conv2d(x, w, Tensor(), p);
  EXPECT_EQ(onednn::cache_size(), n);
  EXPECT_TENSOR_CLOSE(y1, y2, 0, 0);
}

// bfloat16 runs oneDNN's bfloat16 convolutions on AVX-512 (no casts) where
// they are faster for the layer, else float32 with casts (always on AVX2): forward with bias, both backward ops, a
// strided and a grouped layer, against float32 on the bfloat16-rounded
// operands (oneDNN accumulates in float32; the output is rounded once).
TEST(Conv, Bfloat16ForwardAndBackwardMatchFloat32OnRoundedOperandsOnEveryIsa) {
  struct Case {
    Shape x, w;
    Conv2dParams p;
  };
  Conv2dParams strided = params({2, 2}, {1, 1}, {1, 1}, 1), grouped = params({1, 1}, {1, 1}, {1, 1}, 2);
  const std::vector<Case> cases = {{{4, 16, 12, 12}, {32, 16, 3, 3}, params({1, 1}, {1, 1}, {1, 1}, 1)},
                                   {{2, 8, 11, 11}, {16, 8, 3, 3}, strided},
                                   {{2, 8, 9, 9}, {16, 4, 3, 3}, grouped}};
  auto bf = [](const Tensor& t) { return t.to(DType::BFloat16); };
  auto rounded = [](const Tensor& t) { return t.to(DType::BFloat16).to(DType::Float32); };
  for (CpuIsa isa : {CpuIsa::Avx512, CpuIsa::Avx2}) {
    if (isa == CpuIsa::Avx512 && !cpu_has_avx512()) continue;
    set_cpu_isa_override(isa);
    for (const Case& c : cases) {
      SCOPED_TRACE(std::string(cpu_isa_name(isa)) + " x " + shape_str(c.x) + " w " + shape_str(c.w));
      manual_seed(3);
      Tensor x = randn(c.x), w = randn(c.w), b = randn({c.w[0]});
      Tensor y = conv2d(bf(x), bf(w), bf(b), c.p);
      ASSERT_EQ(y.dtype(), DType::BFloat16);
      Tensor ref = conv2d(rounded(x), rounded(w), rounded(b), c.p);
      EXPECT_TENSOR_CLOSE(y.to(DType::Float32), ref, 2e-2, 2e-2);
      Tensor gy = randn(ref.shape());
      Tensor gx = conv2d_backward_input(bf(gy), bf(w), x.shape(), c.p);
      ASSERT_EQ(gx.dtype(), DType::BFloat16);
      EXPECT_TENSOR_CLOSE(gx.to(DType::Float32), conv2d_backward_input(rounded(gy), rounded(w), x.shape(), c.p), 2e-2,
                          2e-2);
      Tensor gw = conv2d_backward_weight(bf(gy), bf(x), w.shape(), c.p);
      ASSERT_EQ(gw.dtype(), DType::BFloat16);
      // A weight gradient sums over batch and space: compare relative to its scale.
      Tensor gw_ref = conv2d_backward_weight(rounded(gy), rounded(x), w.shape(), c.p);
      double scale = amax(abs(gw_ref)).item();
      EXPECT_LT(amax(abs(sub(gw.to(DType::Float32), gw_ref))).item(), 2e-2 * scale);
    }
    clear_cpu_isa_override();
  }
}

TEST(Conv, EmptyBatch) {
  Tensor y = conv2d(zeros({0, 3, 8, 8}), zeros({4, 3, 3, 3}), zeros({4}), params({1, 1}, {1, 1}, {1, 1}, 1));
  EXPECT_EQ(y.shape(), (Shape{0, 4, 8, 8}));
}

TEST(Conv, ErrorsAreClear) {
  Tensor x = zeros({2, 3, 8, 8}), w = zeros({4, 3, 3, 3});
  EXPECT_THROW(conv2d(zeros({2, 5, 8, 8}), w), Error);  // channel mismatch
  EXPECT_THROW(conv2d(zeros({3, 8, 8}), w), Error);     // 3-D input
  EXPECT_THROW(conv2d(x, w, zeros({5})), Error);        // bias size
  EXPECT_THROW(conv2d(zeros({2, 3, 2, 2}), w), Error);  // too small
  EXPECT_THROW(conv2d(x, zeros({4, 3, 3, 3}, dtype(DType::Float64))), Error);  // dtype mismatch
  Conv2dParams g3;
  g3.groups = 2;
  EXPECT_THROW(conv2d(zeros({2, 6, 8, 8}), zeros({5, 3, 3, 3}), Tensor(), g3), Error);  // 5 % 2
  Conv2dParams bad;
  bad.stride = {0, 1};
  EXPECT_THROW(conv2d(x, w, Tensor(), bad), Error);
  try {
    conv2d(zeros({2, 5, 8, 8}), w);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("conv2d"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kiln
