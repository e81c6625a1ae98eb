// Pointwise ops: forward against PyTorch goldens (tools/goldens/gen_pointwise.py)
// on both vector paths (AVX2 and, where the CPU has it, AVX-512), dtype
// promotion, large (multi-threaded) tensors against kiln's float64 loops,
// gradients against finite differences, and error messages.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "testing/golden.h"
#include "testing/gradcheck.h"
#include "testing/isa.h"

namespace kiln {
namespace {

using ::kiln::testing::Goldens;

using testing::hardware_has_avx512;
using testing::vec;

const Goldens& golden() { return testing::goldens("pointwise"); }
// A golden input; names ending in "_T" hold the base of a transposed view.
Tensor input(const std::string& name) { return testing::with_golden_layout(name, golden()[name]); }

// Runs each test once per instruction set: the float32 rows are separate
// builds of the same code, so each needs its own check.
class PointwiseIsa : public testing::IsaTest {};
KILN_INSTANTIATE_ISA(PointwiseIsa);

using Unary = std::function<Tensor(const Tensor&)>;
using Binary = std::function<Tensor(const Tensor&, const Tensor&)>;

const std::map<std::string, Unary>& unary_ops() {
  static const std::map<std::string, Unary> ops = {
      {"neg", [](const Tensor& t) { return neg(t); }},
      {"exp", [](const Tensor& t) { return exp(t); }},
      {"log", [](const Tensor& t) { return log(t); }},
      {"sqrt", [](const Tensor& t) { return sqrt(t); }},
      {"rsqrt", [](const Tensor& t) { return rsqrt(t); }},
      {"abs", [](const Tensor& t) { return abs(t); }},
      {"sign", [](const Tensor& t) { return sign(t); }},
      {"relu", [](const Tensor& t) { return relu(t); }},
      {"gelu", [](const Tensor& t) { return gelu(t); }},
      {"gelu_tanh", [](const Tensor& t) { return gelu(t, "tanh"); }},
      {"sigmoid", [](const Tensor& t) { return sigmoid(t); }},
      {"tanh", [](const Tensor& t) { return tanh(t); }},
      {"clamp", [](const Tensor& t) { return clamp(t, -0.5, 0.7); }},
      {"clamp_min", [](const Tensor& t) { return clamp(t, -0.25, std::nullopt); }},
      {"clamp_max", [](const Tensor& t) { return clamp(t, std::nullopt, 0.3); }},
      {"logical_not", [](const Tensor& t) { return logical_not(t); }},
  };
  return ops;
}

const std::map<std::string, Binary>& binary_ops() {
  static const std::map<std::string, Binary> ops = {
      {"add", [](const Tensor& a, const Tensor& b) { return add(a, b); }},
      {"sub", [](const Tensor& a, const Tensor& b) { return sub(a, b); }},
      {"mul", [](const Tensor& a, const Tensor& b) { return mul(a, b); }},
      {"div", [](const Tensor& a, const Tensor& b) { return div(a, b); }},
      {"maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); }},
      {"minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); }},
      {"gelu_backward", [](const Tensor& a, const Tensor& b) { return gelu_backward(a, b); }},
      {"gelu_backward_tanh", [](const Tensor& a, const Tensor& b) { return gelu_backward(a, b, "tanh"); }},
      {"relu_backward", [](const Tensor& a, const Tensor& b) { return relu_backward(a, b); }},
      {"eq", [](const Tensor& a, const Tensor& b) { return eq(a, b); }},
      {"ne", [](const Tensor& a, const Tensor& b) { return ne(a, b); }},
      {"lt", [](const Tensor& a, const Tensor& b) { return lt(a, b); }},
      {"le", [](const Tensor& a, const Tensor& b) { return le(a, b); }},
      {"gt", [](const Tensor& a, const Tensor& b) { return gt(a, b); }},
      {"ge", [](const Tensor& a, const Tensor& b) { return ge(a, b); }},
  };
  return ops;
}

// Sleef's u10 functions are within 1 ulp; exp/erf/tanh-based results also
// differ from PyTorch by rounding of the intermediate steps.
double atol_for(const std::string& op) { return op.rfind("gelu", 0) == 0 ? 1e-5 : 1e-6; }

TEST_P(PointwiseIsa, UnaryMatchesTorch) {
  for (const auto& [name, f] : unary_ops()) {
    for (const char* in : {"x", "x_T", "special", "pos"}) {
      std::string key = name + "(" + in + ")";
      SCOPED_TRACE(key);
      EXPECT_TENSOR_CLOSE(f(input(in)), golden()[key], 1e-5, atol_for(name));
    }
  }
}

TEST_P(PointwiseIsa, BinaryMatchesTorch) {
  for (const char* name :
       {"add", "sub", "mul", "div", "maximum", "minimum", "gelu_backward", "gelu_backward_tanh", "relu_backward"}) {
    const Binary& f = binary_ops().at(name);
    for (auto [a, b] : {std::pair{"x", "y"}, {"x", "row"}, {"col", "row"}, {"x_T", "y"}, {"row", "x_T"}}) {
      std::string key = std::string(name) + "(" + a + "," + b + ")";
      SCOPED_TRACE(key);
      EXPECT_TENSOR_CLOSE(f(input(a), input(b)), golden()[key], 1e-5, atol_for(name));
    }
  }
}

TEST_P(PointwiseIsa, NumberOperands) {
  const Tensor x = input("x");
  EXPECT_TENSOR_CLOSE(add(x, 2.5), golden()["add(x,2.5)"]);
  EXPECT_TENSOR_CLOSE(sub(x, 2.5), golden()["sub(x,2.5)"]);
  EXPECT_TENSOR_CLOSE(mul(x, 2.5), golden()["mul(x,2.5)"]);
  EXPECT_TENSOR_CLOSE(div(x, 2.5), golden()["div(x,2.5)"]);
  EXPECT_TENSOR_CLOSE(x + 2.5, golden()["add(x,2.5)"]);
  EXPECT_TENSOR_CLOSE(x - 2.5, golden()["sub(x,2.5)"]);
  EXPECT_TENSOR_CLOSE(x * 2.5, golden()["mul(x,2.5)"]);
  EXPECT_TENSOR_CLOSE(x / 2.5, golden()["div(x,2.5)"]);
  EXPECT_TENSOR_CLOSE(2.5 + x, golden()["add(2.5,x)"]);
  EXPECT_TENSOR_CLOSE(2.5 - x, golden()["sub(2.5,x)"]);
  EXPECT_TENSOR_CLOSE(2.5 * x, golden()["mul(2.5,x)"]);
  EXPECT_TENSOR_CLOSE(2.5 / x, golden()["div(2.5,x)"]);
  EXPECT_TENSOR_CLOSE(-x, golden()["neg(x)"]);
  EXPECT_TENSOR_CLOSE(x + input("y"), golden()["add(x,y)"]);
  EXPECT_TENSOR_CLOSE(x - input("y"), golden()["sub(x,y)"]);
  EXPECT_TENSOR_CLOSE(x * input("y"), golden()["mul(x,y)"]);
  EXPECT_TENSOR_CLOSE(x / input("y"), golden()["div(x,y)"]);
}

// A 1-D float32 tensor in reverse order (kiln has no flip op yet).
Tensor reversed(const Tensor& t) {
  std::vector<float> v = t.to_vector<float>();
  std::reverse(v.begin(), v.end());
  return from_vector(v, t.shape());
}

TEST_P(PointwiseIsa, SpecialValues) {
  const Tensor s = input("special");
  EXPECT_TENSOR_CLOSE(maximum(s, scalar_tensor(0.5)), golden()["maximum(special,0.5)"]);
  EXPECT_TENSOR_CLOSE(minimum(s, scalar_tensor(0.5)), golden()["minimum(special,0.5)"]);
  EXPECT_TENSOR_CLOSE(div(s, reversed(s)), golden()["div(special,special)"]);
  // log/sqrt of negatives give NaN, log(0) = -inf, exp overflows to inf.
  std::vector<float> l = log(s).to_vector<float>(), q = sqrt(s).to_vector<float>(), e = exp(s).to_vector<float>();
  EXPECT_TRUE(std::isnan(l[0]) && std::isnan(q[0]));
  EXPECT_TRUE(std::isinf(l[3]) && l[3] < 0);
  EXPECT_TRUE(std::isinf(e[10]));
}

// Same dtype, shape and bytes: NaN payloads and the sign of zero included.
::testing::AssertionResult same_bits(const Tensor& got, const Tensor& want) {
  if (got.dtype() != want.dtype() || got.shape() != want.shape())
    return ::testing::AssertionFailure() << dtype_name(got.dtype()) << shape_str(got.shape()) << " vs expected "
                                         << dtype_name(want.dtype()) << shape_str(want.shape());
  Tensor g = got.contiguous(), w = want.contiguous();
  const auto* gp = static_cast<const unsigned char*>(g.data_ptr());
  const auto* wp = static_cast<const unsigned char*>(w.data_ptr());
  const size_t n = g.itemsize();
  for (int64_t i = 0; i < g.numel(); ++i)
    if (std::memcmp(gp + i * n, wp + i * n, n) != 0)
      return ::testing::AssertionFailure() << "element " << i << " differs; "
                                           << testing::tensor_error(got, want).str();
  return ::testing::AssertionSuccess();
}

// relu's derivative as the composition it replaces: where(result > 0, grad, 0).
Tensor relu_grad_composed(const Tensor& grad, const Tensor& result) {
  return where(gt(result, 0.0), grad, scalar_tensor(0.0));
}

TEST_P(PointwiseIsa, ReluBackwardSpecialValues) {
  // Zeros, -0.0, NaN and infinities in grad and result (NaN and -0.0 results
  // pass no gradient), in each floating dtype.
  const Tensor s = input("special");
  EXPECT_TRUE(same_bits(relu_backward(reversed(s), s), golden()["relu_backward(special,special)"]));
  for (auto [name, dt] : {std::pair{"f64", DType::Float64}, {"f16", DType::Float16}, {"bf16", DType::BFloat16}}) {
    SCOPED_TRACE(name);
    Tensor g = reversed(s).to(dt), y = s.to(dt);
    std::string key = std::string("relu_backward(special_") + name + ",special_" + name + ")";
    EXPECT_TRUE(same_bits(relu_backward(g, y), golden()[key]));
  }
}

// Bit for bit the composition relu's derivative was before, on every path
// of the kernel: vector rows (contiguous, broadcast), gathered strided rows,
// 16-bit rows, the float64 loop, the threaded split; mixed dtypes promote.
TEST_P(PointwiseIsa, ReluBackwardEqualsWhereGtComposition) {
  Generator gen(11);
  // Random values with 0, -0.0, NaN and infinities planted at co-prime steps.
  auto planted = [&](const Shape& shape) {
    std::vector<float> v = randn(shape, {}, &gen).to_vector<float>();
    const float specials[] = {0.0f, -0.0f, std::nanf(""), INFINITY, -INFINITY};
    for (size_t i = 0; i < v.size(); ++i)
      for (size_t k = 0; k < 5; ++k)
        if (i % (7 + 2 * k) == k) v[i] = specials[k];
    return from_vector(v, shape);
  };
  Tensor g = planted({300, 129}), y = planted({300, 129}), row = planted({129}), yt = planted({129, 300}).t();
  for (DType dt : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor gd = g.to(dt), yd = y.to(dt), rd = row.to(dt), ytd = yt.to(dt);
    EXPECT_TRUE(same_bits(relu_backward(gd, yd), relu_grad_composed(gd, yd)));
    EXPECT_TRUE(same_bits(relu_backward(gd, rd), relu_grad_composed(gd, rd)));
    EXPECT_TRUE(same_bits(relu_backward(rd, yd), relu_grad_composed(rd, yd)));
    EXPECT_TRUE(same_bits(relu_backward(gd, ytd), relu_grad_composed(gd, ytd)));
    EXPECT_TRUE(same_bits(relu_backward(gd, neg(yd)), relu_grad_composed(gd, neg(yd))));  // -0.0 results
  }
  // Mixed dtypes: the promoted dtype, as gelu_backward (the values are the
  // composition's: both inputs convert exactly).
  Tensor gb = g.to(DType::BFloat16);
  EXPECT_TRUE(same_bits(relu_backward(gb, y), relu_grad_composed(gb, y).to(DType::Float32)));
  EXPECT_TRUE(same_bits(relu_backward(g, y.to(DType::Float64)), relu_grad_composed(g, y).to(DType::Float64)));
}

TEST_P(PointwiseIsa, MaximumMinimumTies) {
  EXPECT_TENSOR_CLOSE(maximum(input("xr"), input("yr")), golden()["maximum(xr,yr)"]);
  EXPECT_TENSOR_CLOSE(minimum(input("xr"), input("yr")), golden()["minimum(xr,yr)"]);
}

TEST_P(PointwiseIsa, PowMatchesTorch) {
  EXPECT_TENSOR_CLOSE(pow(input("pos"), input("y")), golden()["pow(pos,y)"]);
  EXPECT_TENSOR_CLOSE(pow(input("pos"), input("row")), golden()["pow(pos,row)"]);
  EXPECT_TENSOR_CLOSE(pow(input("x_T"), 2.0), golden()["pow(x_T,2)"]);
  for (double e : {2.0, 3.0, 0.5, -0.5, -1.0, -2.0, 1.7, 0.0}) {
    std::ostringstream k;
    k << e;
    std::string es = k.str();
    if (es.find('.') == std::string::npos) es += ".0";
    SCOPED_TRACE(es);
    EXPECT_TENSOR_CLOSE(pow(input("pos"), e), golden()["pow(pos," + es + ")"]);
    EXPECT_TENSOR_CLOSE(pow(input("x"), e), golden()["pow(x," + es + ")"], 1e-5, 1e-5);
  }
}

TEST_P(PointwiseIsa, ComparisonsMatchTorch) {
  for (const char* name : {"eq", "ne", "lt", "le", "gt", "ge"}) {
    SCOPED_TRACE(name);
    const Binary& f = binary_ops().at(name);
    std::string n = name;
    EXPECT_TENSOR_CLOSE(f(input("xr"), input("yr")), golden()[n + "(xr,yr)"]);
    EXPECT_TENSOR_CLOSE(f(input("xr"), scalar_tensor(0.5)), golden()[n + "(xr,0.5)"]);
    EXPECT_TENSOR_CLOSE(f(input("xr"), input("row_r")), golden()[n + "(xr,row_r)"]);
    EXPECT_TENSOR_CLOSE(f(input("special"), reversed(input("special"))), golden()[n + "(special,special)"]);
  }
  EXPECT_TENSOR_CLOSE(lt(input("xr"), 0.5), golden()["lt(xr,0.5)"]);
  EXPECT_TENSOR_CLOSE(eq(input("xr"), 0.5), golden()["eq(xr,0.5)"]);
}

TEST_P(PointwiseIsa, WhereMatchesTorch) {
  EXPECT_TENSOR_CLOSE(where(input("cond"), input("x"), input("y")), golden()["where(cond,x,y)"]);
  EXPECT_TENSOR_CLOSE(where(input("cond_col"), input("x"), input("row")), golden()["where(cond_col,x,row)"]);
  EXPECT_TENSOR_CLOSE(where(input("cond"), input("x_T"), scalar_tensor(0.0)), golden()["where(cond,x_T,0)"]);
}

TEST_P(PointwiseIsa, DtypePromotion) {
  const Tensor i = input("i"), i2 = input("i2"), i32 = input("i32"), b = input("b"), x = input("x");
  EXPECT_TENSOR_CLOSE(add(i, x), golden()["add(i,x)"]);
  EXPECT_TENSOR_CLOSE(add(b, i), golden()["add(b,i)"]);
  EXPECT_TENSOR_CLOSE(add(b, b), golden()["add(b,b)"]);
  EXPECT_TENSOR_CLOSE(mul(b, b), golden()["mul(b,b)"]);
  EXPECT_TENSOR_CLOSE(div(i, i2), golden()["div(i,i2)"]);
  EXPECT_TENSOR_CLOSE(add(i, 2.0), golden()["add(i,2)"]);  // a whole number acts as a Python int
  EXPECT_TENSOR_CLOSE(add(i, 2.5), golden()["add(i,2.5)"]);
  EXPECT_TENSOR_CLOSE(mul(i32, 3.0), golden()["mul(i32,3)"]);
  EXPECT_TENSOR_CLOSE(add(i32, i), golden()["add(i32,i)"]);
  EXPECT_TENSOR_CLOSE(add(x, input("x64")), golden()["add(x,x64)"], 1e-12, 1e-12);
  EXPECT_TENSOR_CLOSE(sub(i, i2), golden()["sub(i,i2)"]);
  EXPECT_TENSOR_CLOSE(pow(i, i2), golden()["pow(i,i2)"]);
  EXPECT_TENSOR_CLOSE(pow(i, 2.0), golden()["pow(i,2)"]);
  EXPECT_TENSOR_CLOSE(maximum(i, i2), golden()["maximum(i,i2)"]);
  EXPECT_TENSOR_CLOSE(neg(i), golden()["neg(i)"]);
  EXPECT_TENSOR_CLOSE(abs(i32), golden()["abs(i32)"]);
  EXPECT_TENSOR_CLOSE(sign(i), golden()["sign(i)"]);
  EXPECT_TENSOR_CLOSE(relu(i), golden()["relu(i)"]);
  EXPECT_TENSOR_CLOSE(clamp(i, -2.0, 3.0), golden()["clamp(i,-2,3)"]);
  EXPECT_TENSOR_CLOSE(clamp(i, 0.5, std::nullopt), golden()["clamp(i,0.5)"]);
  EXPECT_TENSOR_CLOSE(exp(i), golden()["exp(i)"]);
  EXPECT_TENSOR_CLOSE(sqrt(b), golden()["sqrt(b)"]);
  EXPECT_TENSOR_CLOSE(lt(i, x), golden()["lt(i,x)"]);
  EXPECT_TENSOR_CLOSE(eq(i, 2.0), golden()["eq(i,2)"]);
  EXPECT_TENSOR_CLOSE(where(input("cond"), i, x), golden()["where(cond,i,x)"]);
  EXPECT_TENSOR_CLOSE(where(input("cond"), i, i2), golden()["where(cond,i,i2)"]);
  EXPECT_TENSOR_CLOSE(logical_not(i), golden()["logical_not(i)"]);
  EXPECT_TENSOR_CLOSE(cast(mul(x, 3.0), DType::Int64), golden()["cast(x,int64)"]);
  EXPECT_TENSOR_CLOSE(i.to(DType::Float32), golden()["cast(i,float32)"]);
  EXPECT_TENSOR_CLOSE(cast(input("xr"), DType::Bool), golden()["cast(xr,bool)"]);
}

TEST_P(PointwiseIsa, SixteenBitFloatsComputeInFloat32) {
  const Tensor x = input("x"), y = input("y");
  Tensor x16 = x.to(DType::Float16), y16 = y.to(DType::Float16), xbf = x.to(DType::BFloat16);
  // One rounding of the float32 result: within half an ulp of the 16-bit type.
  EXPECT_TENSOR_CLOSE(add(x16, y16), golden()["add(x16,y16)"], 1e-3, 1e-3);
  EXPECT_TENSOR_CLOSE(exp(xbf), golden()["exp(xbf)"], 8e-3, 1e-3);
  EXPECT_TENSOR_CLOSE(mul(xbf, 2.5), golden()["mul(xbf,2.5)"], 8e-3, 1e-3);
  EXPECT_TENSOR_CLOSE(gelu(xbf), golden()["gelu(xbf)"], 8e-3, 1e-3);
}

TEST(Pointwise, Float64MatchesTorch) {
  const Tensor x64 = input("x64");
  for (const char* name : {"exp", "log", "sqrt", "gelu", "gelu_tanh", "sigmoid", "tanh", "relu", "clamp"}) {
    SCOPED_TRACE(name);
    EXPECT_TENSOR_CLOSE(unary_ops().at(name)(x64), golden()[std::string(name) + "(x64)"], 1e-12, 1e-12);
  }
  EXPECT_TENSOR_CLOSE(pow(x64, 3.0), golden()["pow(x64,3)"], 1e-12, 1e-12);
  EXPECT_TENSOR_CLOSE(div(x64, input("x")), golden()["div(x64,x)"], 1e-12, 1e-12);
}

// Large tensors take the OpenMP split and the vector rows; the float64
// scalar loops are the reference.
TEST_P(PointwiseIsa, LargeTensorsMatchFloat64) {
  Generator gen(7);
  Tensor a = randn({300, 129}, {}, &gen), b = randn({300, 129}, {}, &gen), r = randn({129}, {}, &gen);
  Tensor a64 = a.to(DType::Float64), b64 = b.to(DType::Float64), r64 = r.to(DType::Float64);
  auto ref = [](const Tensor& t) { return t.to(DType::Float32); };
  EXPECT_TENSOR_CLOSE(add(a, b), ref(add(a64, b64)));
  EXPECT_TENSOR_CLOSE(mul(a, r), ref(mul(a64, r64)));
  EXPECT_TENSOR_CLOSE(div(a, b), ref(div(a64, b64)), 1e-5, 1e-5);
  EXPECT_TENSOR_CLOSE(exp(a), ref(exp(a64)));
  EXPECT_TENSOR_CLOSE(tanh(a), ref(tanh(a64)));
  EXPECT_TENSOR_CLOSE(sigmoid(a), ref(sigmoid(a64)));
  EXPECT_TENSOR_CLOSE(gelu(a), ref(gelu(a64)), 1e-5, 1e-5);
  EXPECT_TENSOR_CLOSE(gelu(a, "tanh"), ref(gelu(a64, "tanh")), 1e-5, 1e-5);
  EXPECT_TENSOR_CLOSE(relu(a.t()), ref(relu(a64.t())));
  EXPECT_TENSOR_CLOSE(where(gt(a, b), a, r), ref(where(gt(a64, b64), a64, r64)));
  EXPECT_TENSOR_CLOSE(lt(a, r), lt(a64, r64));
}

TEST(Pointwise, CpuFeatures) {
  EXPECT_TRUE(cpu_has_avx2());
  set_cpu_isa_override(CpuIsa::Avx2);
  EXPECT_FALSE(cpu_has_avx512());
  EXPECT_EQ(cpu_isa(), CpuIsa::Avx2);
  clear_cpu_isa_override();
  if (hardware_has_avx512()) {
    set_cpu_isa_override(CpuIsa::Avx512);
    EXPECT_TRUE(cpu_has_avx512());
    clear_cpu_isa_override();
  } else {
    EXPECT_THROW(set_cpu_isa_override(CpuIsa::Avx512), Error);
  }
}

TEST(Pointwise, Allclose) {
  Tensor a = vec({1.0f, 2.0f, NAN});
  EXPECT_TRUE(allclose(a.slice(0, 0, 2), vec({1.0f, 2.0f + 1e-6f})));
  EXPECT_FALSE(allclose(a.slice(0, 0, 2), vec({1.0f, 2.1f})));
  EXPECT_FALSE(allclose(a, a));  // NaN is not close to NaN
  EXPECT_TRUE(allclose(vec({2.0f, 2.0f}), scalar_tensor(2.0)));  // broadcasts
}

TEST(Pointwise, ScalarOverloadsGiveNumbersLowPriority) {
  Tensor h = ones({3}, dtype(DType::Float16));
  EXPECT_EQ(add(h, 2.5).dtype(), DType::Float16);
  EXPECT_EQ(mul(ones({3}, dtype(DType::Int32)), 2.0).dtype(), DType::Int32);
  EXPECT_EQ(div(ones({3}, dtype(DType::Int64)), 2.0).dtype(), DType::Float32);
  EXPECT_EQ(gt(ones({3}, dtype(DType::Int64)), 0.5).dtype(), DType::Bool);
  EXPECT_EQ(add(ones({3}, dtype(DType::Bool)), 1.0).dtype(), DType::Int64);
  EXPECT_EQ(where(gt(ones({3}), 0.0), ones({3}, dtype(DType::Float64)), scalar_tensor(0.0)).dtype(), DType::Float64);
}

TEST(Pointwise, ErrorsNameTheProblem) {
  auto message = [](const std::function<void()>& f) -> std::string {
    try {
      f();
    } catch (const Error& e) {
      return e.what();
    }
    return "(no error)";
  };
  Tensor a = ones({2, 3}), b = ones({4});
  EXPECT_NE(message([&] { add(a, b); }).find("[2, 3]"), std::string::npos);
  EXPECT_NE(message([&] { neg(ones({2}, dtype(DType::Bool))); }).find("logical_not"), std::string::npos);
  EXPECT_NE(message([&] { sub(ones({2}, dtype(DType::Bool)), ones({2}, dtype(DType::Bool))); }).find("sub"),
            std::string::npos);
  EXPECT_NE(message([&] { where(a, a, a); }).find("bool"), std::string::npos);
  EXPECT_NE(message([&] { gelu(ones({2}, dtype(DType::Int64))); }).find("floating"), std::string::npos);
  EXPECT_NE(message([&] { gelu(a, "fast"); }).find("approximate"), std::string::npos);
  EXPECT_NE(message([&] { clamp(a, std::nullopt, std::nullopt); }).find("clamp"), std::string::npos);
  EXPECT_NE(message([&] { add(a, Tensor()); }).find("undefined"), std::string::npos);
}

// ---- gradients (float64, central differences) ----
// EXPECT_GRADCHECK with braced input lists and lambdas holding commas.
#define GRADCHECK(...) EXPECT_TRUE(::kiln::testing::gradcheck(__VA_ARGS__))
Tensor rnd(const Shape& s, uint64_t seed, double lo = -1.5, double hi = 1.5) {
  Generator gen(seed);
  Tensor u = rand(s, dtype(DType::Float64), &gen);
  return add(mul(u, hi - lo), lo).requires_grad_();
}
using testing::TensorFn;
TensorFn u1(Tensor (*f)(const Tensor&)) {
  return [f](const std::vector<Tensor>& v) { return f(v[0]); };
}
TensorFn b2(Tensor (*f)(const Tensor&, const Tensor&)) {
  return [f](const std::vector<Tensor>& v) { return f(v[0], v[1]); };
}

TEST(PointwiseGrad, Unary) {
  Tensor x = rnd({3, 5}, 1), p = rnd({3, 5}, 2, 0.2, 2.0);
  GRADCHECK(u1(neg), {x});
  GRADCHECK(u1(exp), {x});
  GRADCHECK(u1(log), {p});
  GRADCHECK(u1(sqrt), {p});
  GRADCHECK(u1(rsqrt), {p});
  GRADCHECK(u1(abs), {x});
  GRADCHECK(u1(relu), {x});
  GRADCHECK(u1(sigmoid), {x});
  GRADCHECK(u1(tanh), {x});
  GRADCHECK(u1(erf), {x});
  GRADCHECK([](const std::vector<Tensor>& v) { return gelu(v[0]); }, {x});
  GRADCHECK([](const std::vector<Tensor>& v) { return gelu(v[0], "tanh"); }, {x});
  GRADCHECK([](const std::vector<Tensor>& v) { return clamp(v[0], -0.5, 0.7); }, {x});
  GRADCHECK([](const std::vector<Tensor>& v) { return clamp(v[0], std::nullopt, 0.2); }, {x});
  GRADCHECK([](const std::vector<Tensor>& v) { return cast(v[0], DType::Float32); }, {x}, 1e-3, 1e-3, 1e-3);
  GRADCHECK([](const std::vector<Tensor>& v) { return -v[0]; }, {x});
}

TEST(PointwiseGrad, SignHasNoGradient) {
  Tensor x = rnd({4}, 3);
  Tensor y = add(sign(x), x);
  y.sum().backward();
  EXPECT_TENSOR_CLOSE(x.grad(), ones({4}, dtype(DType::Float64)));
}

TEST(PointwiseGrad, BinaryWithBroadcasting) {
  Tensor a = rnd({3, 4}, 4), b = rnd({3, 4}, 5), row = rnd({4}, 6), col = rnd({3, 1}, 7);
  Tensor pa = rnd({3, 4}, 8, 0.3, 2.0), pb = rnd({3, 1}, 9, 0.3, 2.0);
  for (auto f : {b2(add), b2(sub), b2(mul), b2(maximum), b2(minimum)}) {
    GRADCHECK(f, {a, b});
    GRADCHECK(f, {a, row});
    GRADCHECK(f, {col, row});
  }
  GRADCHECK(b2(div), {a, pb});
  GRADCHECK(b2(div), {row, pa});
  GRADCHECK(b2(pow), {pa, b});
  GRADCHECK(b2(pow), {pa, row});
  GRADCHECK(b2(pow), {pb, a});
  GRADCHECK([](const std::vector<Tensor>& v) { return pow(v[0], 2.5); }, {pa});
  GRADCHECK([](const std::vector<Tensor>& v) { return pow(v[0], 3.0); }, {a});
  GRADCHECK([](const std::vector<Tensor>& v) { return v[0] * 2.5 + 1.0 - v[1] / 3.0; }, {a, row});
  GRADCHECK([](const std::vector<Tensor>& v) { return 2.0 / v[0] - 1.0; }, {pa});
  GRADCHECK([](const std::vector<Tensor>& v) { return where(gt(v[0], 0.0), v[0], v[1]); }, {a, row});
  GRADCHECK([](const std::vector<Tensor>& v) { return where(gt(v[1], 0.0), v[0], v[1]); }, {row, col});
  GRADCHECK([](const std::vector<Tensor>& v) { return gelu_backward(v[0], v[1]); }, {a, b});
  GRADCHECK([](const std::vector<Tensor>& v) { return gelu_backward(v[0], v[1], "tanh"); }, {a, row});
  // Linear in grad; no gradient reaches result (checked below).
  GRADCHECK([](const std::vector<Tensor>& v) { return relu_backward(v[0], v[1]); }, {a, b.detach()});
  GRADCHECK([](const std::vector<Tensor>& v) { return relu_backward(v[0], v[1]); }, {row, col.detach()});
}

// Through relu twice: relu's derivative is relu_backward, whose own
// derivative is relu_backward again for grad and nothing for result, as with
// the where(gt(result, 0), grad, 0) it replaces.
TEST(PointwiseGrad, ReluDoubleBackward) {
  Tensor x = rnd({3, 4}, 10), g = rnd({3, 4}, 11), gg = rnd({3, 4}, 12).detach();
  Tensor y = relu(x);
  Tensor dx = relu_backward(g, y);
  mul(dx, gg).sum().backward();
  EXPECT_TRUE(same_bits(g.grad(), relu_backward(gg, y.detach())));
  EXPECT_FALSE(x.grad().defined());
}

TEST(PointwiseGrad, MaximumSplitsTiesEqually) {
  Tensor a = from_vector(std::vector<double>{1.0, 2.0, 3.0}, {3}).requires_grad_();
  Tensor b = from_vector(std::vector<double>{1.0, 5.0, 0.0}, {3}).requires_grad_();
  maximum(a, b).sum().backward();
  EXPECT_EQ(a.grad().to_vector<double>(), (std::vector<double>{0.5, 0.0, 1.0}));
  EXPECT_EQ(b.grad().to_vector<double>(), (std::vector<double>{0.5, 1.0, 0.0}));
}

TEST(PointwiseGrad, PowAtZero) {
  // d/da a^b at a = 0, b = 0 is 0 (not nan); d/db at a = 0 is 0 for b >= 0.
  Tensor a = from_vector(std::vector<double>{0.0, 0.0, 2.0}, {3}).requires_grad_();
  Tensor b = from_vector(std::vector<double>{0.0, 2.0, 0.0}, {3}).requires_grad_();
  pow(a, b).sum().backward();
  EXPECT_EQ(a.grad().to_vector<double>(), (std::vector<double>{0.0, 0.0, 0.0}));
  EXPECT_EQ(b.grad().to_vector<double>()[0], 0.0);
  EXPECT_EQ(b.grad().to_vector<double>()[1], 0.0);
}

}  // namespace
}  // namespace kiln
