// Factories and random ops: values, dtypes, seeded determinism (independent of
// the thread count) and the statistics of the draws.
#include <omp.h>

#include <cmath>
#include <cstring>

#include "testing/golden.h"
#include "testing/gradcheck.h"

namespace kiln {
namespace {

TEST(Factory, FullZerosOnes) {
  Tensor z = zeros({2, 3});
  EXPECT_EQ(z.shape(), (Shape{2, 3}));
  EXPECT_EQ(z.dtype(), DType::Float32);
  EXPECT_EQ(z.to_vector<float>(), std::vector<float>(6, 0.0f));
  EXPECT_EQ(ones({4}, dtype(DType::Int64)).to_vector<int64_t>(), std::vector<int64_t>(4, 1));
  EXPECT_EQ(full({2}, 2.5, dtype(DType::Float64)).to_vector<double>(), (std::vector<double>{2.5, 2.5}));
  EXPECT_EQ(full({3}, 7, dtype(DType::Int32)).to_vector<int64_t>(), (std::vector<int64_t>{7, 7, 7}));
  EXPECT_EQ(full({2}, 1, dtype(DType::Bool)).to_vector<int64_t>(), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(full({}, 3.0).dim(), 0);
  EXPECT_EQ(zeros({0, 5}).numel(), 0);
  Tensor big = full({100000}, 0.25);
  EXPECT_EQ(sum(big).item(), 25000.0);
  EXPECT_THROW(zeros({-1}), Error);
}

TEST(Factory, Like) {
  Tensor x = ones({2, 3}, dtype(DType::Float64));
  Tensor z = zeros_like(x);
  EXPECT_EQ(z.dtype(), DType::Float64);
  EXPECT_EQ(z.shape(), x.shape());
  EXPECT_EQ(ones_like(x).to_vector<double>(), std::vector<double>(6, 1.0));
  EXPECT_EQ(full_like(x, -2).to_vector<double>(), std::vector<double>(6, -2.0));
}

TEST(Factory, RequiresGradOption) {
  Tensor w = zeros({3}, TensorOptions().with_requires_grad());
  EXPECT_TRUE(w.requires_grad());
  EXPECT_TRUE(w.is_leaf());
  EXPECT_THROW(zeros({3}, dtype(DType::Int64).with_requires_grad()), Error);
}

TEST(Factory, Arange) {
  Tensor a = arange(5);
  EXPECT_EQ(a.dtype(), DType::Int64);
  EXPECT_EQ(a.to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(arange(0, 10, 3).to_vector<int64_t>(), (std::vector<int64_t>{0, 3, 6, 9}));
  EXPECT_EQ(arange(5, 0, -2).to_vector<int64_t>(), (std::vector<int64_t>{5, 3, 1}));
  Tensor f = arange(0, 1, 0.1);  // fractional step: float32 like torch.arange(0, 1, 0.1)
  EXPECT_EQ(f.dtype(), DType::Float32);
  EXPECT_EQ(f.numel(), 10);
  EXPECT_FLOAT_EQ(f.to_vector<float>()[3], 0.3f);
  Tensor d = arange(1, 2.5, 0.5, dtype(DType::Float64));
  EXPECT_EQ(d.to_vector<double>(), (std::vector<double>{1.0, 1.5, 2.0}));
  EXPECT_EQ(arange(4, dtype(DType::Float32)).to_vector<float>(), (std::vector<float>{0, 1, 2, 3}));
  EXPECT_EQ(arange(0).numel(), 0);
  EXPECT_THROW(arange(0, 5, 0), Error);
  EXPECT_THROW(arange(5, 0, 1), Error);
}

TEST(Factory, ScalarTensorIsAWrappedNumber) {
  Tensor s = scalar_tensor(2.5);
  EXPECT_EQ(s.dim(), 0);
  EXPECT_TRUE(s.impl()->wrapped_number);
  EXPECT_EQ(s.item(), 2.5);
  // promotes like a Python number: int64 tensor * 2.5 -> float32
  EXPECT_EQ(mul(arange(3), s).dtype(), DType::Float32);
  EXPECT_EQ(mul(ones({2}, dtype(DType::Float16)), scalar_tensor(2.0, DType::Float64)).dtype(), DType::Float16);
}

TEST(Factory, FromVectorAndBlob) {
  Tensor t = from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(t.shape(), (Shape{2, 3}));
  EXPECT_EQ(t.to_vector<float>()[5], 6.0f);
  Tensor d = from_vector(std::vector<double>{1.5}, {});
  EXPECT_EQ(d.dtype(), DType::Float64);
  Tensor i = from_vector(std::vector<int64_t>{3, 4}, {2});
  EXPECT_EQ(i.dtype(), DType::Int64);
  Tensor c = from_vector(std::vector<float>{1.7f, -2.2f}, {2}, dtype(DType::Int64));
  EXPECT_EQ(c.to_vector<int64_t>(), (std::vector<int64_t>{1, -2}));
  EXPECT_THROW(from_vector(std::vector<float>{1, 2, 3}, {2, 2}), Error);
  int32_t raw[3] = {7, 8, 9};
  Tensor b = from_blob(raw, {3}, DType::Int32);
  raw[0] = 0;  // copied
  EXPECT_EQ(b.to_vector<int64_t>(), (std::vector<int64_t>{7, 8, 9}));
}

// ---- random ----
std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

TEST(Factory, RandomSameSeedSameNumbers) {
  for (DType dt : {DType::Float32, DType::Float64}) {
    Generator g1(42), g2(42), g3(43);
    EXPECT_EQ(values(rand({1000}, dtype(dt), &g1)), values(rand({1000}, dtype(dt), &g2)));
    EXPECT_EQ(values(randn({1001}, dtype(dt), &g1)), values(randn({1001}, dtype(dt), &g2)));
    EXPECT_NE(values(rand({1000}, dtype(dt), &g3)), values(rand({1000}, dtype(dt), &g1)));
  }
  // consecutive draws differ; a reseed restarts the stream
  Generator g(5);
  Tensor a = rand({100}, {}, &g), b = rand({100}, {}, &g);
  EXPECT_NE(values(a), values(b));
  g.manual_seed(5);
  EXPECT_EQ(values(rand({100}, {}, &g)), values(a));
  // the default generator
  manual_seed(9);
  Tensor d1 = randn({50});
  manual_seed(9);
  EXPECT_EQ(values(randn({50})), values(d1));
}

TEST(Factory, RandomIndependentOfThreadCount) {
  int prev = omp_get_max_threads();
  std::vector<std::vector<double>> r;
  for (int nt : {1, 2}) {
    omp_set_num_threads(nt);
    Generator g(77);
    std::vector<double> v = values(randn({300001}, {}, &g));
    std::vector<double> u = values(rand({300001}, dtype(DType::Float64), &g));
    std::vector<double> k = values(randint(0, 10, {300001}, dtype(DType::Int64), &g));
    std::vector<double> m = values(dropout(ones({300001}), 0.3, true, &g));
    v.insert(v.end(), u.begin(), u.end());
    v.insert(v.end(), k.begin(), k.end());
    v.insert(v.end(), m.begin(), m.end());
    r.push_back(v);
  }
  omp_set_num_threads(prev);
  EXPECT_EQ(r[0], r[1]);
}

// The random streams, pinned: FNV-1a of the raw bytes of every random op for
// each dtype path, sizes that end mid-counter and cross a parallel block
// (16384 elements). The hashes are those of the
// kernels before they shared one Philox walker: a change here silently
// changes every seeded result (initial weights, augmentation, goldens).
uint64_t fnv1a(const Tensor& t) {
  Tensor c = t.contiguous();
  const auto* p = static_cast<const unsigned char*>(c.data_ptr());
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < c.nbytes(); ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}
TEST(Factory, RandomStreamsAreFixed) {
  uint64_t h = 0;
  for (int64_t n : {int64_t{1}, int64_t{3}, int64_t{6}, int64_t{16387}, int64_t{40001}}) {
    for (DType dt : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}) {
      Generator g(static_cast<uint64_t>(n) * 31 + static_cast<uint64_t>(dt));
      h = h * 31 + fnv1a(rand({n}, dtype(dt), &g));
      h = h * 31 + fnv1a(randn({n}, dtype(dt), &g));
      Tensor x = randn({n}, dtype(dt), &g);
      h = h * 31 + fnv1a(dropout(x, 0.3, true, &g));
      h = h * 31 + fnv1a(bernoulli(full({n}, 0.4, dtype(dt)), &g));
    }
    for (DType dt : {DType::Int64, DType::Int32, DType::Float64}) {
      Generator g(static_cast<uint64_t>(n) + 5);
      h = h * 31 + fnv1a(randint(-3, 1000, {n}, dtype(dt), &g));
    }
  }
  EXPECT_EQ(h, 17465111631206992790ull);
}

void expect_moments(const Tensor& t, double mean_want, double std_want, double tol) {
  std::vector<double> v = values(t);
  double m = 0, q = 0;
  for (double x : v) m += x;
  m /= static_cast<double>(v.size());
  for (double x : v) q += (x - m) * (x - m);
  double sd = std::sqrt(q / static_cast<double>(v.size() - 1));
  EXPECT_NEAR(m, mean_want, tol);
  EXPECT_NEAR(sd, std_want, tol);
}

TEST(Factory, RandomStatistics) {
  Generator g(2024);
  Tensor u = rand({100000}, {}, &g);
  expect_moments(u, 0.5, std::sqrt(1.0 / 12.0), 0.01);
  EXPECT_GE(amin(u).item(), 0.0);
  EXPECT_LT(amax(u).item(), 1.0);
  expect_moments(randn({100000}, {}, &g), 0.0, 1.0, 0.02);
  expect_moments(randn({100000}, dtype(DType::Float64), &g), 0.0, 1.0, 0.02);
  Tensor k = randint(-3, 4, {100000}, dtype(DType::Int64), &g);
  EXPECT_EQ(k.dtype(), DType::Int64);
  EXPECT_EQ(amin(k).item(), -3);
  EXPECT_EQ(amax(k).item(), 3);
  expect_moments(k.to(DType::Float64), 0.0, 2.0, 0.05);
  Tensor p = full({100000}, 0.3);
  Tensor b = bernoulli(p, &g);
  EXPECT_EQ(b.dtype(), DType::Float32);
  EXPECT_NEAR(mean(b).item(), 0.3, 0.01);
  EXPECT_THROW(randint(3, 3, {2}), Error);
  EXPECT_THROW(rand({2}, dtype(DType::Int64)), Error);
  EXPECT_THROW(bernoulli(full({2}, 1.5)), Error);
}

TEST(Factory, Dropout) {
  Generator g(11);
  Tensor x = full({100000}, 2.0);
  Tensor y = dropout(x, 0.25, true, &g);
  std::vector<float> v = y.to_vector<float>();
  int64_t kept = 0;
  for (float e : v) {
    ASSERT_TRUE(e == 0.0f || std::abs(e - 2.0f / 0.75f) < 1e-6f) << e;
    kept += e != 0.0f;
  }
  EXPECT_NEAR(static_cast<double>(kept) / 100000.0, 0.75, 0.01);
  // eval mode and p = 0 are the identity
  EXPECT_EQ(dropout(x, 0.5, false).impl(), x.impl());
  EXPECT_EQ(dropout(x, 0.0, true).impl(), x.impl());
  // p = 1 zeroes everything (and its gradient)
  Tensor xr = ones({10}).requires_grad_();
  Tensor y1 = dropout(xr, 1.0, true, &g);
  EXPECT_EQ(sum(y1).item(), 0.0);
  sum(y1).backward();
  EXPECT_EQ(sum(xr.grad()).item(), 0.0);
  EXPECT_THROW(dropout(x, 1.5), Error);
  // non-contiguous input
  Tensor m = randn({40, 30}, {}, &g);
  Generator g1(3), g2(3);
  EXPECT_EQ(values(dropout(m.t(), 0.5, true, &g1)), values(dropout(m.t().contiguous(), 0.5, true, &g2)));
}

TEST(Factory, DropoutBackwardUsesTheMask) {
  Generator gx(1);
  Tensor x = randn({6, 7}, dtype(DType::Float64), &gx).requires_grad_();
  auto f = [](const std::vector<Tensor>& v) {
    Generator g(99);  // same mask on every call
    return dropout(v[0], 0.4, true, &g);
  };
  EXPECT_GRADCHECK(f, std::vector<Tensor>{x});
  Tensor xf = ones({1000}).requires_grad_();
  Generator g(5);
  Tensor y = dropout(xf, 0.5, true, &g);
  y.backward(ones({1000}));
  EXPECT_EQ(values(xf.grad()), values(y));  // x = 1, g = 1: grad = mask / (1 - p) = y
}

}  // namespace
}  // namespace kiln
