// One vector math for eager and generated code (src/ops/cpu/vec_math.h): every
// lowered float32 pointwise op, run as a generated kernel, gives the eager
// kernel's result bit for bit, over inputs that include +-0, denormals, huge
// values, infinities and NaN, contiguous, broadcast and strided, with row
// tails. One driver over the op list (ggml's test-backend-ops in spirit).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "compiler/backend/cpp_executable.h"
#include "compiler/graph/printer.h"
#include "graph_builder.h"

namespace kiln::compiler {
namespace {

using testing::GraphBuilder;

// The special values, then values where the math's branches change
// (tanh at 0.625, erf's and exp's ranges, gelu's tails), then random ones.
std::vector<float> sweep_values(size_t n, uint32_t seed) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float denorm = std::numeric_limits<float>::denorm_min();
  std::vector<float> v = {0.0f,    -0.0f,   denorm,  -denorm, 1e-40f,  -1e-40f, 1.17e-38f, -1.17e-38f, 1e-30f,
                          inf,     -inf,    nan,     -nan,    1.0f,    -1.0f,   2.0f,      -2.0f,      0.5f,
                          -0.5f,   3.0f,    0.625f,  -0.625f, 0.62499f, 20.0f,  -20.0f,    88.72f,     -88.72f,
                          89.0f,   -104.0f, 1e30f,   -1e30f,  3.4e38f, -3.4e38f, 5.5f,     -5.5f,      9.0f,
                          -9.0f,   1e-7f,   -1e-7f,  0.1f,    -0.1f};
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  std::uniform_real_distribution<float> exponent(-30.0f, 30.0f);
  while (v.size() < n) {
    float u = unit(rng);
    if (v.size() % 3 == 0) v.push_back(u * 8.0f);
    else v.push_back(std::copysign(std::exp2(exponent(rng)), u));
  }
  v.resize(n);
  return v;
}

Tensor from_values(const std::vector<float>& v, Shape shape) {
  Tensor t = Tensor::empty(std::move(shape), DType::Float32, Device::cpu());
  std::memcpy(t.data_ptr(), v.data(), v.size() * sizeof(float));
  return t;
}

// Bit-identical: the same bytes (a NaN's payload and sign included).
void expect_same_bits(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  Tensor g = got.contiguous(), w = want.contiguous();
  const auto* gp = static_cast<const unsigned char*>(g.data_ptr());
  const auto* wp = static_cast<const unsigned char*>(w.data_ptr());
  size_t elem = g.dtype() == DType::Bool ? 1 : 4;
  int reported = 0;
  for (int64_t i = 0; i < g.numel(); ++i) {
    if (std::memcmp(gp + i * elem, wp + i * elem, elem) == 0) continue;
    if (elem == 4) {
      float a, b;
      std::memcpy(&a, gp + i * elem, 4);
      std::memcpy(&b, wp + i * elem, 4);
      ADD_FAILURE() << what << ": element " << i << " generated " << a << " eager " << b;
    } else {
      ADD_FAILURE() << what << ": element " << i << " differs";
    }
    if (++reported == 5) return;
  }
}

struct OpCase {
  const char* name;
  OpId op;
  int inputs;
  Attrs attrs;
};

std::vector<OpCase> lowered_pointwise_ops() {
  auto approx = [](const char* a) { return Attrs().set("approximate", std::string(a)); };
  return {
      {"add", OpId::add, 2, {}},
      {"sub", OpId::sub, 2, {}},
      {"mul", OpId::mul, 2, {}},
      {"div", OpId::div, 2, {}},
      {"pow", OpId::pow, 2, {}},
      {"maximum", OpId::maximum, 2, {}},
      {"minimum", OpId::minimum, 2, {}},
      {"neg", OpId::neg, 1, {}},
      {"exp", OpId::exp, 1, {}},
      {"log", OpId::log, 1, {}},
      {"sqrt", OpId::sqrt, 1, {}},
      {"rsqrt", OpId::rsqrt, 1, {}},
      {"abs", OpId::abs, 1, {}},
      {"sign", OpId::sign, 1, {}},
      {"relu", OpId::relu, 1, {}},
      {"gelu", OpId::gelu, 1, approx("none")},
      {"gelu tanh", OpId::gelu, 1, approx("tanh")},
      {"gelu_backward", OpId::gelu_backward, 2, approx("none")},
      {"gelu_backward tanh", OpId::gelu_backward, 2, approx("tanh")},
      {"relu_backward", OpId::relu_backward, 2, {}},
      {"sigmoid", OpId::sigmoid, 1, {}},
      {"tanh", OpId::tanh, 1, {}},
      {"erf", OpId::erf, 1, {}},
      {"clamp", OpId::clamp, 1, Attrs().set("min", -0.5).set("max", 2.0)},
      {"eq", OpId::eq, 2, {}},
      {"ne", OpId::ne, 2, {}},
      {"lt", OpId::lt, 2, {}},
      {"le", OpId::le, 2, {}},
      {"gt", OpId::gt, 2, {}},
      {"ge", OpId::ge, 2, {}},
      {"logical_not", OpId::logical_not, 1, {}},
      {"cast to bool", OpId::cast, 1, Attrs().set("dtype", DType::Bool)},
  };
}

// Runs `op` over the inputs as a generated kernel and eagerly; same bits.
void expect_generated_equals_eager(const OpCase& c, const Tensors& inputs, const std::string& layout) {
  GraphBuilder b;
  std::vector<ValueId> in;
  for (const Tensor& t : inputs) in.push_back(b.input(t));
  b.output(b.op(c.op, in, c.attrs));
  CppExecutable exe(b.g);
  ASSERT_EQ(exe.program().kernels.size(), 1u) << c.name << " did not lower\n" << print(exe.program());
  Tensor eager = dispatch(c.op, inputs, c.attrs)[0];
  Tensor generated = exe.run(inputs)[0];
  expect_same_bits(generated, eager, std::string(c.name) + ", " + layout);
}

TEST(VectorMath, GeneratedKernelsEqualEagerBitForBit) {
  // 1000 + 7: full vectors and a tail at either width; pairs of the sweep
  // against itself shifted, so specials meet specials.
  const size_t n = 1007;
  std::vector<float> a = sweep_values(n, 1), b = sweep_values(n, 2);
  std::rotate(b.begin(), b.begin() + 5, b.end());
  Tensor ta = from_values(a, {static_cast<int64_t>(n)}), tb = from_values(b, {static_cast<int64_t>(n)});
  // Strided: a transposed [19, 53] view of the same values.
  Tensor sa = from_values(a, {53, 19}).transpose(0, 1), sb = from_values(b, {53, 19}).transpose(0, 1);
  for (const OpCase& c : lowered_pointwise_ops()) {
    if (c.inputs == 1) {
      expect_generated_equals_eager(c, {ta}, "contiguous");
      expect_generated_equals_eager(c, {sa}, "strided");
      continue;
    }
    expect_generated_equals_eager(c, {ta, tb}, "contiguous");
    expect_generated_equals_eager(c, {sa, sb}, "strided");
    // One operand broadcast (pow's exponent: PyTorch's special exponents).
    for (float s : {2.0f, 3.0f, 0.5f, -0.5f, -1.0f, -2.0f, 1.5f, -0.0f, std::numeric_limits<float>::quiet_NaN()}) {
      Tensor scalar = from_values({s}, {1});
      expect_generated_equals_eager(c, {ta, scalar}, "broadcast second " + std::to_string(s));
      expect_generated_equals_eager(c, {scalar, tb}, "broadcast first " + std::to_string(s));
    }
  }
}

// Broadcast values keep their sign: x * -0 is -0 for x > 0, eagerly and generated.
TEST(VectorMath, BroadcastNegativeZeroKeepsItsSign) {
  Tensor x = from_values(std::vector<float>(37, 1.5f), {37}), z = from_values({-0.0f}, {1});
  GraphBuilder b;
  b.output(b.op(OpId::mul, {b.input(x), b.input(z)}));
  CppExecutable exe(b.g);
  for (const Tensor& t : {exe.run(b.example_inputs)[0], b.eager.at(static_cast<size_t>(b.g.outputs[0]))}) {
    Tensor c = t.contiguous();
    const float* p = static_cast<const float*>(c.data_ptr());
    for (int64_t i = 0; i < c.numel(); ++i) ASSERT_TRUE(p[i] == 0.0f && std::signbit(p[i])) << i << ": " << p[i];
  }
}

// Fusion recomputes a producer inside each consumer: the recomputed value
// and the eager one (max-pool's backward compares them) agree in every bit.
TEST(VectorMath, FusedChainsEqualEagerOpByOpBitForBit) {
  const size_t n = 1007;
  Tensor x = from_values(sweep_values(n, 3), {static_cast<int64_t>(n)});
  Tensor g = from_values(sweep_values(n, 4), {static_cast<int64_t>(n)});
  Tensor w = from_values({0.75f}, {1});
  GraphBuilder b;
  ValueId vx = b.input(x), vg = b.input(g), vw = b.input(w);
  ValueId y = b.op(OpId::gelu, {b.op(OpId::mul, {vx, vw})}, Attrs().set("approximate", std::string("none")));
  ValueId s = b.op(OpId::sigmoid, {b.op(OpId::tanh, {y})});
  ValueId d = b.op(OpId::gelu_backward, {vg, b.op(OpId::exp, {b.op(OpId::neg, {s})})},
                   Attrs().set("approximate", std::string("none")));
  b.output(d);
  b.output(b.op(OpId::eq, {y, b.op(OpId::amax, {y}, Attrs().set("dims", std::vector<int64_t>{0}).set("keepdim", true))}));
  CppExecutable exe(b.g);
  Tensors got = exe.run(b.example_inputs);
  expect_same_bits(got[0], b.eager.at(static_cast<size_t>(d)), "gelu_backward(g, exp(-sigmoid(tanh(gelu(x * w)))))");
  expect_same_bits(got[1], b.eager.at(static_cast<size_t>(b.g.outputs[1])), "eq(gelu, amax(gelu))");
}

}  // namespace
}  // namespace kiln::compiler
