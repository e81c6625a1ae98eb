// User mistakes give a kiln::Error (never a crash, an InternalError or a
// silent wrong answer) whose message names the op, the shapes/dtypes involved
// and what to do about it.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>

#include <gtest/gtest.h>

#include "kiln/kiln.h"
#include "testing/errors.h"

namespace kiln {
namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

// Words that show the message tells the user what to do.
bool gives_advice(const std::string& msg) {
  static const char* kHints[] = {"use ",     "pass ",   "call ",     "make ",  "give ",   "move ",   "cast",
                                 "rebuild",  "reduce",  "index ",    "wrap",   "check",   "convert", "choose",
                                 "set ",     "try ",    "reshape",   "first",  ".to(",    "must",    "should",
                                 "expected", "expects", "need",      "only",   "instead", "provide", "keep",
                                 "select ",  "squeeze", "unsqueeze", "permute", "transpose", "a dim in", "in ["};
  std::string m = lower(msg);
  for (const char* h : kHints)
    if (m.find(h) != std::string::npos) return true;
  return false;
}

// The statement throws kiln::Error (not InternalError: that is a kiln bug or
// an op with no definition yet) whose message contains every part
// (case-insensitive) and gives advice.
template <typename F>
::testing::AssertionResult error_says_and_advises(F&& f, std::initializer_list<const char*> parts) {
  std::string msg;
  if (::testing::AssertionResult r = testing::throws_user_error(f, msg); !r) return r;
  for (const char* p : parts)
    if (lower(msg).find(lower(p)) == std::string::npos)
      return ::testing::AssertionFailure() << "message lacks \"" << p << "\": " << msg;
  if (!gives_advice(msg)) return ::testing::AssertionFailure() << "message does not say what to do: " << msg;
  if (std::getenv("KILN_SHOW_ERRORS")) std::printf("  %s\n", msg.c_str());  // for reviewing the wording
  return ::testing::AssertionSuccess() << msg;
}
// Stricter than the shared EXPECT_KILN_ERROR.
#undef EXPECT_KILN_ERROR
#define EXPECT_KILN_ERROR(stmt, ...) EXPECT_KILN_ERROR_WITH(error_says_and_advises, stmt, __VA_ARGS__)

Tensor f32(const Shape& s) { return ones(s); }
Tensor i64(std::vector<int64_t> v, const Shape& s) { return from_vector(v, s); }

// ---- shapes ----
TEST(Errors, AddMismatchedShapes) {
  EXPECT_KILN_ERROR(add(f32({2, 3}), f32({4})), "add", "[2, 3]", "[4]");
  EXPECT_KILN_ERROR(f32({2, 3}) + f32({3, 2}), "add", "[2, 3]", "[3, 2]");
  EXPECT_KILN_ERROR(mul(f32({5}), f32({6})), "mul", "[5]", "[6]");
}

TEST(Errors, MatmulMismatchedShapes) {
  EXPECT_KILN_ERROR(matmul(f32({2, 3}), f32({4, 5})), "matmul", "[2, 3]", "[4, 5]");
  EXPECT_KILN_ERROR(matmul(f32({2, 2, 3}), f32({3, 2, 4})), "matmul", "[2, 2, 3]", "[3, 2, 4]");
  EXPECT_KILN_ERROR(linear(f32({2, 3}), f32({4, 5})), "[2, 3]", "[4, 5]");
}

TEST(Errors, Conv2dMismatchedShapes) {
  // 3 input channels, weight expects 2
  EXPECT_KILN_ERROR(conv2d(f32({1, 3, 8, 8}), f32({4, 2, 3, 3})), "conv2d", "[1, 3, 8, 8]", "[4, 2, 3, 3]");
  // input not 4-D
  EXPECT_KILN_ERROR(conv2d(f32({3, 8, 8}), f32({4, 3, 3, 3})), "conv2d", "[3, 8, 8]");
  // kernel larger than the padded input
  EXPECT_KILN_ERROR(conv2d(f32({1, 3, 2, 2}), f32({4, 3, 3, 3})), "conv2d", "[1, 3, 2, 2]", "3");
  // bias of the wrong size
  EXPECT_KILN_ERROR(conv2d(f32({1, 3, 8, 8}), f32({4, 3, 3, 3}), f32({5})), "conv2d", "[5]");
}

// ---- dims ----
TEST(Errors, SumOverMissingDim) {
  EXPECT_KILN_ERROR(sum(f32({2, 3}), {5}), "sum", "5", "2");
  EXPECT_KILN_ERROR(mean(f32({2, 3}), {-3}), "mean", "-3");
}

TEST(Errors, SoftmaxDimOutOfRange) {
  EXPECT_KILN_ERROR(softmax(f32({2, 3}), 2), "softmax", "2");
  EXPECT_KILN_ERROR(log_softmax(f32({2, 3}), -3), "log_softmax", "-3");
}

TEST(Errors, CatMismatchedShapes) {
  EXPECT_KILN_ERROR(cat({f32({2, 3}), f32({2, 4})}, 0), "cat", "[2, 3]", "[2, 4]");
  EXPECT_KILN_ERROR(cat({f32({2, 3}), f32({2, 3, 1})}, 0), "cat", "[2, 3]", "[2, 3, 1]");
  EXPECT_KILN_ERROR(cat({f32({2, 3}), f32({2, 3})}, 2), "cat", "2");
  EXPECT_KILN_ERROR(cat({}, 0), "cat");
  EXPECT_KILN_ERROR(stack({f32({2, 3}), f32({3, 2})}, 0), "stack", "[2, 3]", "[3, 2]");
}

// ---- dtypes ----
TEST(Errors, LossWithFloatTargets) {
  Tensor logp = f32({2, 3});
  EXPECT_KILN_ERROR(nll_loss(logp, f32({2})), "nll_loss", "float32", "int64");
  EXPECT_KILN_ERROR(cross_entropy(logp, f32({2})), "cross_entropy", "float32");
  // class index out of range
  EXPECT_KILN_ERROR(nll_loss(logp, i64({0, 3}, {2})), "nll_loss", "3");
  // batch sizes differ
  EXPECT_KILN_ERROR(nll_loss(logp, i64({0, 1, 2}, {3})), "nll_loss", "[2, 3]", "[3]");
}

TEST(Errors, IndexSelectWithFloatIndex) {
  EXPECT_KILN_ERROR(index_select(f32({4, 3}), 0, f32({2})), "index_select", "float32");
  EXPECT_KILN_ERROR(gather(f32({4, 3}), 1, f32({4, 1})), "gather", "float32");
}

TEST(Errors, DataOfWrongType) {
  Tensor i = i64({1, 2}, {2});
  EXPECT_KILN_ERROR(i.data<float>(), "data", "float32", "int64");
}

TEST(Errors, MeanOfIntTensor) {
  EXPECT_KILN_ERROR(mean(i64({1, 2}, {2})), "mean", "int64");
  EXPECT_KILN_ERROR(i64({1, 2}, {2}).mean(), "mean", "int64");
}

TEST(Errors, RequiresGradOnIntTensor) {
  Tensor i = i64({1, 2}, {2});
  EXPECT_KILN_ERROR(i.requires_grad_(), "requires_grad", "int64");
}

// ---- devices (CUDA tensors where no GPU is present) ----
TEST(Errors, CudaTensorWithoutADevice) {
  EXPECT_KILN_ERROR(Device::parse("gpu0"), "gpu0", "cpu");
  // On a GPU host these succeed; tests/backend covers them there.
  if (cuda::is_available()) GTEST_SKIP() << "a CUDA device is present";
  EXPECT_KILN_ERROR(Tensor::empty({2, 3}, DType::Float32, Device::cuda()), "empty", "float32[2, 3]", "cuda");
  EXPECT_KILN_ERROR(zeros({2}, TensorOptions().with_device(Device::cuda())), "cuda");
  EXPECT_KILN_ERROR(f32({2}).to(Device::cuda()), "to(", "float32[2]", "cuda");
}

// ---- layouts and sizes ----
TEST(Errors, ViewOfNonViewableLayout) {
  Tensor t = f32({3, 4}).t();
  EXPECT_KILN_ERROR(t.view({12}), "view", "[4, 3]", "[12]", "reshape", "contiguous");
  EXPECT_KILN_ERROR(f32({2, 3}).view({4, 2}), "view", "[2, 3]", "[4, 2]");
  EXPECT_KILN_ERROR(f32({2, 3}).reshape({7}), "reshape", "[2, 3]", "[7]");
  EXPECT_KILN_ERROR(f32({2, 3}).expand({4, 3}), "expand", "[2, 3]", "[4, 3]");
}

TEST(Errors, NegativeSizes) {
  EXPECT_KILN_ERROR(Tensor::empty({2, -1}), "empty", "[2, -1]");
  EXPECT_KILN_ERROR(zeros({-3}), "[-3]");
  EXPECT_KILN_ERROR(full({2, -2}, 1.0), "[2, -2]");
  EXPECT_KILN_ERROR(f32({6}).view({-2, -3}), "view", "-2");
}

TEST(Errors, ItemOfManyElements) {
  EXPECT_KILN_ERROR(f32({2, 3}).item(), "item", "[2, 3]", "6");
  EXPECT_KILN_ERROR(f32({0}).item(), "item", "[0]");
}

TEST(Errors, OutOfRangeIndices) {
  Tensor x = f32({2, 3});
  EXPECT_KILN_ERROR(x.select(1, 3), "select", "3", "[2, 3]");
  EXPECT_KILN_ERROR(x[2], "select", "2", "[2, 3]");
  EXPECT_KILN_ERROR(gather(x, 1, i64({0, 5, 1, 1}, {2, 2})), "gather", "5");
  // kiln wraps negative indices (unlike torch.gather); below -size is out of range
  EXPECT_KILN_ERROR(gather(x, 1, i64({0, -4, 1, 1}, {2, 2})), "gather", "-4");
  EXPECT_KILN_ERROR(index_select(x, 0, i64({0, 2}, {2})), "index_select", "2");
  EXPECT_KILN_ERROR(index_select(x, 3, i64({0}, {1})), "index_select", "3");
  EXPECT_KILN_ERROR(one_hot(i64({0, 4}, {2}), 3), "one_hot", "4");
  EXPECT_KILN_ERROR(x.slice(2, 0, 1), "slice", "2");
}

// ---- autograd misuse ----
TEST(Errors, BackwardMisuse) {
  Tensor x = ones({3}, dtype(DType::Float64).with_requires_grad());
  Tensor y = mul(x, 2.0);
  EXPECT_KILN_ERROR(y.backward(), "backward", "[3]");
  Tensor s = sum(y);
  s.backward();
  EXPECT_KILN_ERROR(s.backward(), "retain_graph");
  EXPECT_KILN_ERROR(sum(f32({2})).backward(), "backward", "requires");
  EXPECT_KILN_ERROR(x.add_(ones({3}, dtype(DType::Float64))), "add_", "[3]", "requires grad");
}

// ---- other ops with common misuse ----
TEST(Errors, PoolingAndNormShapes) {
  EXPECT_KILN_ERROR(max_pool2d(f32({2, 3}), {2, 2}), "max_pool2d", "[2, 3]");
  EXPECT_KILN_ERROR(avg_pool2d(f32({1, 1, 2, 2}), {3, 3}), "avg_pool2d", "[1, 1, 2, 2]");
  EXPECT_KILN_ERROR(batch_norm(f32({2, 3, 4, 4}), f32({4}), f32({4}), Tensor(), Tensor(), true), "batch_norm",
                    "[3]", "[4]");
  EXPECT_KILN_ERROR(batch_norm(f32({2, 3}), Tensor(), Tensor(), ones({4}), ones({4}), false), "batch_norm", "[4]");
}

TEST(Errors, WhereAndCompareShapes) {
  EXPECT_KILN_ERROR(where(gt(f32({2}), 0.0), f32({3}), f32({3})), "where", "[2]", "[3]");
  EXPECT_KILN_ERROR(maximum(f32({2, 2}), f32({3})), "maximum", "[2, 2]", "[3]");
}

TEST(Errors, ArangeBadStep) {
  EXPECT_KILN_ERROR(arange(0, 10, 0), "arange", "step");
  EXPECT_KILN_ERROR(arange(10, 0, 1), "arange");
}

}  // namespace
}  // namespace kiln
