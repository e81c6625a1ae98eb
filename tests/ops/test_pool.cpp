// max/avg/adaptive pooling against PyTorch goldens (tools/goldens/gen_nn.py)
// and finite-difference gradients in float64.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "testing/errors.h"
#include "testing/golden.h"
#include "testing/gradcheck.h"

namespace kiln {
namespace {

using testing::randn_input;

Tensor gold(const std::string& c, const char* t) { return testing::goldens("nn")[c + "." + t]; }

struct MaxCase {
  const char* name;
  std::vector<int64_t> k, s, p, d;
  bool ceil;
};
const std::vector<MaxCase>& max_cases() {
  static const std::vector<MaxCase> c = {
      {"maxpool_k2", {2, 2}, {2, 2}, {0, 0}, {1, 1}, false},
      {"maxpool_k2_odd", {2, 2}, {2, 2}, {0, 0}, {1, 1}, false},
      {"maxpool_k3s2p1", {3, 3}, {2, 2}, {1, 1}, {1, 1}, false},
      {"maxpool_dil2", {3, 3}, {1, 1}, {1, 1}, {2, 2}, false},
      {"maxpool_ceil", {2, 2}, {2, 2}, {0, 0}, {1, 1}, true},
      {"maxpool_ceil_k3s2p1", {3, 3}, {2, 2}, {1, 1}, {1, 1}, true},
      {"maxpool_rect", {3, 2}, {2, 1}, {1, 0}, {1, 1}, false},
      {"maxpool_overlap", {3, 3}, {1, 1}, {0, 0}, {1, 1}, false},
  };
  return c;
}

struct AvgCase {
  const char* name;
  std::vector<int64_t> k, s, p;
  bool ceil, include_pad;
};
const std::vector<AvgCase>& avg_cases() {
  static const std::vector<AvgCase> c = {
      {"avgpool_k2", {2, 2}, {2, 2}, {0, 0}, false, true},
      {"avgpool_k3s2p1", {3, 3}, {2, 2}, {1, 1}, false, true},
      {"avgpool_k3s2p1_nopad", {3, 3}, {2, 2}, {1, 1}, false, false},
      {"avgpool_ceil", {3, 3}, {2, 2}, {1, 1}, true, true},
      {"avgpool_ceil_nopad", {3, 3}, {2, 2}, {1, 1}, true, false},
      {"avgpool_rect", {3, 2}, {2, 1}, {1, 0}, false, true},
  };
  return c;
}

TEST(Pool, MaxGoldenValuesAndIndices) {
  for (const MaxCase& c : max_cases()) {
    SCOPED_TRACE(c.name);
    auto [y, idx] = max_pool2d_with_indices(gold(c.name, "x"), c.k, c.s, c.p, c.d, c.ceil);
    EXPECT_TENSOR_CLOSE(y, gold(c.name, "y"), 0, 0);
    EXPECT_EQ(idx.dtype(), DType::Int64);
    EXPECT_EQ(idx.to_vector<int64_t>(), gold(c.name, "idx").to_vector<int64_t>());
  }
}

TEST(Pool, MaxGoldenBackward) {
  for (const MaxCase& c : max_cases()) {
    SCOPED_TRACE(c.name);
    Tensor x = gold(c.name, "x");
    EXPECT_TENSOR_CLOSE(max_pool2d_backward(gold(c.name, "gy"), gold(c.name, "idx"), x.shape()), gold(c.name, "gx"));
    Tensor xg = x.detach().requires_grad_();
    max_pool2d(xg, c.k, c.s, c.p, c.d, c.ceil).backward(gold(c.name, "gy"));
    EXPECT_TENSOR_CLOSE(xg.grad(), gold(c.name, "gx"));
  }
}

TEST(Pool, AvgGolden) {
  for (const AvgCase& c : avg_cases()) {
    SCOPED_TRACE(c.name);
    Tensor x = gold(c.name, "x").detach().requires_grad_();
    Tensor y = avg_pool2d(x, c.k, c.s, c.p, c.ceil, c.include_pad);
    EXPECT_TENSOR_CLOSE(y, gold(c.name, "y"));
    y.backward(gold(c.name, "gy"));
    EXPECT_TENSOR_CLOSE(x.grad(), gold(c.name, "gx"));
  }
}

TEST(Pool, AdaptiveGolden) {
  struct A {
    const char* name;
    std::vector<int64_t> os;
    bool max;
  };
  for (const A& c : {A{"adaptive_avg_4", {4, 4}, false}, A{"adaptive_avg_1", {1, 1}, false},
                     A{"adaptive_avg_rect", {2, 3}, false}, A{"adaptive_max_2", {2, 2}, true},
                     A{"adaptive_max_1", {1, 1}, true}}) {
    SCOPED_TRACE(c.name);
    Tensor x = gold(c.name, "x").detach().requires_grad_();
    Tensor y = c.max ? adaptive_max_pool2d(x, c.os) : adaptive_avg_pool2d(x, c.os);
    EXPECT_TENSOR_CLOSE(y, gold(c.name, "y"));
    y.backward(gold(c.name, "gy"));
    EXPECT_TENSOR_CLOSE(x.grad(), gold(c.name, "gx"));
  }
}

TEST(Pool, UnbatchedInput) {
  Tensor x = gold("maxpool_k2", "x");
  Tensor y3 = max_pool2d(x.select(0, 1), {2, 2});
  EXPECT_EQ(y3.shape(), (Shape{3, 4, 4}));
  EXPECT_TENSOR_CLOSE(y3, gold("maxpool_k2", "y").select(0, 1), 0, 0);
  Tensor a3 = avg_pool2d(x.select(0, 0), {2, 2});
  EXPECT_EQ(a3.shape(), (Shape{3, 4, 4}));
}

TEST(Pool, MaxPropagatesNaN) {
  std::vector<float> v(16, 1.0f);
  v[5] = std::numeric_limits<float>::quiet_NaN();
  Tensor x = from_vector(v, {1, 1, 4, 4});
  auto [y, idx] = max_pool2d_with_indices(x, {2, 2});
  std::vector<float> yv = y.to_vector<float>();
  EXPECT_TRUE(std::isnan(yv[0]));
  EXPECT_EQ(idx.to_vector<int64_t>()[0], 5);
  auto [y3, idx3] = max_pool2d_with_indices(x, {3, 3}, {1, 1});  // general loop
  EXPECT_TRUE(std::isnan(y3.to_vector<float>()[0]));
  EXPECT_EQ(idx3.to_vector<int64_t>()[0], 5);
}

TEST(Pool, GradcheckFloat64) {
  Tensor x = randn_input({2, 2, 7, 7}, 3);
  auto fmax = [](const std::vector<Tensor>& v) { return max_pool2d(v[0], {3, 3}, {2, 2}, {1, 1}, {1, 1}, true); };
  EXPECT_GRADCHECK(fmax, (std::vector<Tensor>{x}));
  auto fmax2 = [](const std::vector<Tensor>& v) { return max_pool2d(v[0], {2, 2}); };
  EXPECT_GRADCHECK(fmax2, (std::vector<Tensor>{x}));
  auto favg = [](const std::vector<Tensor>& v) { return avg_pool2d(v[0], {3, 3}, {2, 2}, {1, 1}, true, false); };
  EXPECT_GRADCHECK(favg, (std::vector<Tensor>{x}));
  auto favg2 = [](const std::vector<Tensor>& v) { return avg_pool2d(v[0], {2, 3}, {1, 2}, {1, 1}, false, true); };
  EXPECT_GRADCHECK(favg2, (std::vector<Tensor>{x}));
  Tensor x8 = randn_input({1, 2, 4, 6}, 4);
  auto fad = [](const std::vector<Tensor>& v) { return adaptive_avg_pool2d(v[0], {2, 3}); };
  EXPECT_GRADCHECK(fad, (std::vector<Tensor>{x8}));
  auto fam = [](const std::vector<Tensor>& v) { return adaptive_max_pool2d(v[0], {1, 1}); };
  EXPECT_GRADCHECK(fam, (std::vector<Tensor>{x8}));
  // double backward of the backward ops
  Tensor idx;
  {
    NoGradGuard ng;
    idx = std::get<1>(max_pool2d_with_indices(x.detach(), {3, 3}, {2, 2}, {1, 1}, {1, 1}, true));
  }
  auto fmaxb = [&](const std::vector<Tensor>& v) { return max_pool2d_backward(v[0], idx, Shape{2, 2, 7, 7}); };
  EXPECT_GRADCHECK(fmaxb, (std::vector<Tensor>{randn_input(idx.shape(), 6)}));
  Tensor gy = randn_input({2, 2, 4, 4}, 5);
  Shape xs{2, 2, 7, 7};
  auto favgb = [&](const std::vector<Tensor>& v) {
    return avg_pool2d_backward(v[0], xs, {3, 3}, {2, 2}, {1, 1}, true, false);
  };
  EXPECT_GRADCHECK(favgb, (std::vector<Tensor>{gy}));
}

// Indices are user data: an out-of-range one is a kiln::Error raised after the
// parallel loop (it used to abort the process from inside the OpenMP region),
// for every dtype path and whether the bad index is first, last or negative.
TEST(Pool, MaxBackwardRejectsOutOfRangeIndex) {
  for (DType dt : {DType::Float32, DType::Float64, DType::BFloat16}) {
    for (int64_t bad : {int64_t{16}, int64_t{-1}, int64_t{1} << 40}) {
      for (int64_t pos : {int64_t{0}, int64_t{7}}) {
        Tensor go = ones({2, 1, 2, 2}, dtype(dt));
        Tensor idx = zeros({2, 1, 2, 2}, dtype(DType::Int64));
        idx.data<int64_t>()[pos] = bad;
        EXPECT_KILN_ERROR(max_pool2d_backward(go, idx, {2, 1, 4, 4}), "max_pool2d_backward: index",
                          std::to_string(bad).c_str(), "outside the input plane of 4x4");
      }
    }
  }
  // Enough planes (4096 of 4x4) that the loop runs in an OpenMP parallel
  // region (with 2+ threads): the error still comes out as a kiln::Error.
  int prev = omp_get_max_threads();
  omp_set_num_threads(std::max(2, prev));
  Tensor big_go = ones({64, 64, 2, 2});
  Tensor big_idx = zeros({64, 64, 2, 2}, dtype(DType::Int64));
  big_idx.data<int64_t>()[big_idx.numel() - 1] = 99;
  EXPECT_KILN_ERROR(max_pool2d_backward(big_go, big_idx, {64, 64, 4, 4}), "index 99", "outside the input plane");
  omp_set_num_threads(prev);

  // In-range indices still scatter.
  Tensor go = from_vector(std::vector<float>{1, 2, 3, 4}, {1, 1, 2, 2});
  Tensor idx = from_vector(std::vector<int64_t>{0, 3, 3, 15}, {1, 1, 2, 2});
  std::vector<float> gx = max_pool2d_backward(go, idx, {1, 1, 4, 4}).to_vector<float>();
  EXPECT_EQ(gx[0], 1);
  EXPECT_EQ(gx[3], 5);
  EXPECT_EQ(gx[15], 4);
}

TEST(Pool, ErrorsAreClear) {
  Tensor x = zeros({2, 3, 8, 8});
  EXPECT_THROW(max_pool2d(zeros({8, 8}), {2, 2}), Error);
  EXPECT_THROW(max_pool2d(x, {2, 2}, {2, 2}, {2, 2}), Error);  // padding > kernel / 2
  EXPECT_THROW(max_pool2d(x, {0, 2}), Error);
  EXPECT_THROW(max_pool2d(x, {9, 9}), Error);  // larger than the input
  EXPECT_THROW(avg_pool2d(x, {2, 2}, {0, 1}), Error);
  EXPECT_THROW(max_pool2d(zeros({1, 1, 4, 4}, dtype(DType::Int64)), {2, 2}), Error);
  try {
    adaptive_avg_pool2d(zeros({1, 1, 7, 7}), {3, 3});
    ADD_FAILURE() << "uneven adaptive pool should throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("divide"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {
// The vectorized 2x2/stride-2 path (8 outputs at a time, then a scalar tail):
// values equal the window maxima and indices point at them, for widths with
// and without a tail and with NaNs present.
TEST(Pool, MaxPool2x2VectorPathMatchesWindowMax) {
  for (int64_t w : {16, 31, 37, 64}) {
    Generator gen(static_cast<uint64_t>(w));
    Tensor x = randn({2, 3, 6, w}, {}, &gen);
    x.data<float>()[5] = std::nanf("");
    auto [y, idx] = max_pool2d_with_indices(x, {2, 2});
    int64_t ow = w / 2;
    Tensor even = x.slice(3, 0, 2 * ow);
    Tensor expected = amax(even.reshape({2, 3, 3, 2, ow, 2}), {3, 5});
    EXPECT_TENSOR_CLOSE(y, expected, 0, 0);
    Tensor picked = gather(x.flatten(2), 2, idx.flatten(2)).reshape(y.shape());
    EXPECT_TENSOR_CLOSE(picked, y, 0, 0);
  }
}

// The 2x2 kernels (contiguous rows for output rows of 4 and more, gathers
// below that) and the general loop, with and without indices (attribute
// indices=false: what max_pool2d asks for when no gradient will be
// recorded), against a scalar walk of each window in PyTorch's order (a
// later value replaces the max when greater or NaN): the same values bit for
// bit and the same indices, NaNs and signed-zero ties included. With a
// gradient to record, indices are kept and backward works.
TEST(Pool, MaxKernelsMatchScalarWindowWalk) {
  for (int64_t w : {6, 9, 10, 14, 16, 22, 37, 64}) {  // output rows of 3 (gathers), 4, 5, 7 (masked rows), 8+
    for (int64_t kk : {2, 3}) {
      SCOPED_TRACE("width " + std::to_string(w) + ", kernel " + std::to_string(kk));
      Generator gen(static_cast<uint64_t>(w));
      const int64_t H = 6, planes = 6;
      Tensor x = randn({2, 3, H, w}, {}, &gen);
      float* p = x.data<float>();
      p[5] = std::nanf("");
      p[w + 2] = -0.0f, p[w + 3] = 0.0f, p[2] = -0.0f, p[3] = 0.0f;  // a window of signed zeros
      p[4 * w + 6] = p[4 * w + 7] = p[5 * w + 6] = 1.5f;             // a tie
      auto [y_idx, idx] = max_pool2d_with_indices(x, {kk, kk});
      Tensor y;
      {
        NoGradGuard ng;
        y = max_pool2d(x, {kk, kk});
      }
      const int64_t OH = (H - kk) / kk + 1, OW = (w - kk) / kk + 1;
      ASSERT_EQ(y.shape(), (Shape{2, 3, OH, OW}));
      std::vector<float> want(static_cast<size_t>(planes * OH * OW));
      std::vector<int64_t> want_idx(want.size());
      for (int64_t pl = 0; pl < planes; ++pl)
        for (int64_t oh = 0; oh < OH; ++oh)
          for (int64_t ow = 0; ow < OW; ++ow) {
            const float* plane = p + pl * H * w;
            float m = -std::numeric_limits<float>::infinity();
            int64_t best = oh * kk * w + ow * kk;
            for (int64_t h = oh * kk; h < oh * kk + kk; ++h)
              for (int64_t c = ow * kk; c < ow * kk + kk; ++c)
                if (plane[h * w + c] > m || std::isnan(plane[h * w + c])) m = plane[h * w + c], best = h * w + c;
            want[static_cast<size_t>((pl * OH + oh) * OW + ow)] = m;
            want_idx[static_cast<size_t>((pl * OH + oh) * OW + ow)] = best;
          }
      std::vector<float> a = y.to_vector<float>(), b = y_idx.to_vector<float>();
      EXPECT_EQ(0, std::memcmp(a.data(), want.data(), a.size() * sizeof(float)));
      EXPECT_EQ(0, std::memcmp(b.data(), want.data(), b.size() * sizeof(float)));
      EXPECT_EQ(idx.to_vector<int64_t>(), want_idx);
    }
  }
  Tensor x = randn({1, 2, 8, 8}).requires_grad_(true);
  Tensor y = max_pool2d(x, {2, 2});
  y.sum().backward();
  EXPECT_DOUBLE_EQ(x.grad().sum().item<double>(), 32.0);  // one 1 per window
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// 16-bit pooling widens each plane to float32 inside its task and rounds the
// result once: the same values as pooling the widened tensor in float32 and
// rounding after (a max is exact; an average rounds once), for a
// non-contiguous input too, on enough planes to run in parallel.
TEST(Pool, SixteenBitPlanesMatchFloat32RoundedOnce) {
  for (DType dt : {DType::BFloat16, DType::Float16}) {
    Tensor x = randn({4, 64, 7, 9}).to(dt).transpose(2, 3);  // [4, 64, 9, 7], not contiguous
    Tensor x32 = x.to(DType::Float32);
    SCOPED_TRACE(dtype_name(dt));
    Tensor mx = max_pool2d(x, {3, 3}, {2, 2}, {1, 1});
    EXPECT_EQ(mx.dtype(), dt);
    EXPECT_TENSOR_CLOSE(mx.to(DType::Float32), max_pool2d(x32, {3, 3}, {2, 2}, {1, 1}).to(dt).to(DType::Float32), 0.0,
                        0.0);
    Tensor av = avg_pool2d(x, {2, 3}, {1, 2}, {1, 1}, true, false);
    EXPECT_TENSOR_CLOSE(av.to(DType::Float32),
                        avg_pool2d(x32, {2, 3}, {1, 2}, {1, 1}, true, false).to(dt).to(DType::Float32), 0.0, 0.0);
  }
}

}  // namespace
}  // namespace kiln
