// matmul, linear and addmm against PyTorch goldens (tools/goldens/gen_nn.py)
// and finite-difference gradients in float64.
#include "testing/golden.h"
#include "testing/gradcheck.h"

namespace kiln {
namespace {

using testing::randn_input;

Tensor gold(const std::string& c, const char* t) { return testing::goldens("nn")[c + "." + t]; }

// oneDNN's sgemm blocks the K loop differently from torch's; sums of up to
// 128 products differ in the last bits.
constexpr double kRtol = 1e-5, kAtol = 1e-5;

const std::vector<std::string>& mm_cases() {
  static const std::vector<std::string> c = {"mm_2d",          "mm_batched", "mm_bcast_b2d", "mm_bcast_a2d",
                                             "mm_bcast_batch", "mm_bcast_4d", "mm_vec_mat",  "mm_mat_vec",
                                             "mm_dot",         "mm_batched_vec", "mm_vec_batched", "mm_large"};
  return c;
}

TEST(Matmul, GoldenForward) {
  for (const std::string& c : mm_cases()) {
    SCOPED_TRACE(c);
    EXPECT_TENSOR_CLOSE(matmul(gold(c, "a"), gold(c, "b")), gold(c, "y"), kRtol, kAtol);
  }
}

TEST(Matmul, GoldenAutograd) {
  for (const std::string& c : mm_cases()) {
    SCOPED_TRACE(c);
    Tensor a = gold(c, "a").detach().requires_grad_(), b = gold(c, "b").detach().requires_grad_();
    Tensor y = matmul(a, b);
    y.backward(gold(c, "gy"));
    EXPECT_TENSOR_CLOSE(a.grad(), gold(c, "ga"), kRtol, kAtol);
    EXPECT_TENSOR_CLOSE(b.grad(), gold(c, "gb"), kRtol, kAtol);
  }
}

// Transposed and sliced operands (handed to oneDNN with strides, or copied).
TEST(Matmul, StridedOperands) {
  Tensor a = gold("mm_large", "a"), b = gold("mm_large", "b"), y = gold("mm_large", "y");
  Tensor at = a.t().contiguous().t(), bt = b.t().contiguous().t();
  ASSERT_FALSE(at.is_contiguous());
  EXPECT_TENSOR_CLOSE(matmul(at, b), y, kRtol, kAtol);
  EXPECT_TENSOR_CLOSE(matmul(a, bt), y, kRtol, kAtol);
  EXPECT_TENSOR_CLOSE(matmul(at, bt), y, kRtol, kAtol);
  // every other row/column
  Tensor as = a.slice(0, 0, 64, 2), bs = b.slice(1, 0, 96, 3);
  EXPECT_TENSOR_CLOSE(matmul(as, bs), matmul(as.contiguous(), bs.contiguous()), kRtol, kAtol);
  // batched transposed
  Tensor a3 = gold("mm_batched", "a"), b3 = gold("mm_batched", "b");
  Tensor b3t = b3.transpose(1, 2).contiguous().transpose(1, 2);
  EXPECT_TENSOR_CLOSE(matmul(a3, b3t), gold("mm_batched", "y"), kRtol, kAtol);
}

TEST(Matmul, Float64MatchesGoldens) {
  for (const std::string& c : mm_cases()) {
    SCOPED_TRACE(c);
    Tensor y = matmul(gold(c, "a").to(DType::Float64), gold(c, "b").to(DType::Float64));
    EXPECT_EQ(y.dtype(), DType::Float64);
    EXPECT_TENSOR_CLOSE(y.to(DType::Float32), gold(c, "y"), kRtol, kAtol);
  }
}

TEST(Matmul, IntegerOperands) {
  Tensor a = arange(6).reshape({2, 3}), b = arange(12).reshape({3, 4});
  Tensor y = matmul(a, b);
  EXPECT_EQ(y.dtype(), DType::Int64);
  std::vector<int64_t> expect = {20, 23, 26, 29, 56, 68, 80, 92};
  EXPECT_EQ(y.to_vector<int64_t>(), expect);
}

TEST(Matmul, EmptyInnerDimGivesZeros) {
  Tensor y = matmul(zeros({3, 0}), zeros({0, 4}));
  EXPECT_EQ(y.shape(), (Shape{3, 4}));
  EXPECT_TENSOR_CLOSE(y, zeros({3, 4}), 0, 0);
}

TEST(Matmul, LinearAndAddmmGoldens) {
  for (const char* c : {"linear_2d", "linear_3d"}) {
    SCOPED_TRACE(c);
    Tensor x = gold(c, "x").detach().requires_grad_(), w = gold(c, "w").detach().requires_grad_();
    Tensor b = gold(c, "b").detach().requires_grad_();
    Tensor y = linear(x, w, b);
    EXPECT_TENSOR_CLOSE(y, gold(c, "y"), kRtol, kAtol);
    y.backward(gold(c, "gy"));
    EXPECT_TENSOR_CLOSE(x.grad(), gold(c, "gx"), kRtol, kAtol);
    EXPECT_TENSOR_CLOSE(w.grad(), gold(c, "gw"), kRtol, kAtol);
    EXPECT_TENSOR_CLOSE(b.grad(), gold(c, "gb"), kRtol, kAtol);
  }
  Tensor s = gold("addmm", "self").detach().requires_grad_();
  Tensor m1 = gold("addmm", "m1").detach().requires_grad_(), m2 = gold("addmm", "m2").detach().requires_grad_();
  Tensor y = addmm(s, m1, m2, 0.5, 2.0);
  EXPECT_TENSOR_CLOSE(y, gold("addmm", "y"), kRtol, kAtol);
  y.backward(gold("addmm", "gy"));
  EXPECT_TENSOR_CLOSE(s.grad(), gold("addmm", "gself"), kRtol, kAtol);
  EXPECT_TENSOR_CLOSE(m1.grad(), gold("addmm", "gm1"), kRtol, kAtol);
  EXPECT_TENSOR_CLOSE(m2.grad(), gold("addmm", "gm2"), kRtol, kAtol);
}

TEST(Matmul, GradcheckFloat64) {
  std::vector<std::pair<Shape, Shape>> shapes = {
      {{3, 4}, {4, 2}}, {{2, 3, 4}, {2, 4, 2}}, {{2, 3, 4}, {4, 2}}, {{3, 4}, {2, 4, 2}}, {{1, 3, 4}, {2, 4, 2}},
      {{4}, {4, 2}},    {{3, 4}, {4}},          {{4}, {4}},          {{2, 3, 4}, {4}}};
  uint64_t seed = 1;
  auto f = [](const std::vector<Tensor>& v) { return matmul(v[0], v[1]); };
  for (const auto& [sa, sb] : shapes) {
    SCOPED_TRACE(shape_str(sa) + " @ " + shape_str(sb));
    EXPECT_GRADCHECK(f, (std::vector<Tensor>{randn_input(sa, seed++), randn_input(sb, seed++)}));
  }
  auto fl = [](const std::vector<Tensor>& v) { return linear(v[0], v[1], v[2]); };
  EXPECT_GRADCHECK(fl, (std::vector<Tensor>{randn_input({2, 3, 4}, 50), randn_input({5, 4}, 51), randn_input({5}, 52)}));
  auto fa = [](const std::vector<Tensor>& v) { return addmm(v[0], v[1], v[2], 0.5, 2.0); };
  EXPECT_GRADCHECK(fa, (std::vector<Tensor>{randn_input({3, 1}, 60), randn_input({3, 4}, 61), randn_input({4, 2}, 62)}));
}

TEST(Matmul, ErrorsAreClear) {
  EXPECT_THROW(matmul(zeros({3, 4}), zeros({5, 2})), Error);
  EXPECT_THROW(matmul(zeros({2, 3, 4}), zeros({3, 4, 2})), Error);  // batch 2 vs 3
  EXPECT_THROW(matmul(zeros({3}), zeros({4})), Error);
  EXPECT_THROW(matmul(zeros({3, 4}), zeros({4, 2}, dtype(DType::Float64))), Error);
  EXPECT_THROW(matmul(zeros({}), zeros({4, 2})), Error);
  EXPECT_THROW(linear(zeros({2, 3}), zeros({4, 5})), Error);
  try {
    matmul(zeros({3, 4}), zeros({5, 2}));
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[3, 4]"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kiln
