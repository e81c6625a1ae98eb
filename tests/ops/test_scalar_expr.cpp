// Scalar expressions (src/ops/scalar_expr.h): every pointwise and in-place
// update op of ops.def has one, built from the same formula the eager kernels
// run (src/ops/scalar_math.h), and its value equals the eager kernel's on a
// grid of inputs (negatives, zero, tiny, large, infinities, NaN). The
// rendered C compiles and computes the same numbers.
//
// Tolerances: float32 kernels (vectorized rows with their own exp/tanh/erf)
// against the expression evaluated with float32 rounding (so underflow and
// cancellation happen as in the kernel): 1e-5 relative, 1e-6 absolute.
// float64 kernels (the scalar formulas themselves): 1e-12 relative.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include <unistd.h>

#include "ops/op_def.h"
#include "ops/scalar_expr.h"
#include "testing/compare.h"

namespace kiln {
namespace {

const double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::numeric_limits<double>::quiet_NaN();

// Values exactly representable in float32.
const std::vector<double> kGrid = {-kInf, -30, -3.5, -1, -0.5, -0.125, -0.0009765625, 0,
                                   0.0009765625, 0.125, 0.5, 1, 2.5, 3.5, 30, kInf, kNaN};
const std::vector<double> kFiniteGrid = {-30, -3.5, -1, -0.5, -0.125, 0, 0.125, 0.5, 1, 2.5, 3.5, 30};

// One way to call an op: its attributes and, per input, whether it is a
// bool mask and which grid it draws from.
struct Config {
  std::string label;
  Attrs attrs;
  int num_inputs = 1;
  int bool_input = -1;  // where's condition
  bool finite_only = false;
};

std::vector<Config> configs(OpId id) {
  auto one = [](int n, Attrs a = {}, std::string label = "") { return Config{label, a, n}; };
  switch (id) {
    case OpId::neg: case OpId::exp: case OpId::log: case OpId::sqrt: case OpId::rsqrt: case OpId::abs:
    case OpId::sign: case OpId::relu: case OpId::sigmoid: case OpId::tanh: case OpId::logical_not:
    case OpId::erf:
      return {one(1)};
    case OpId::gelu:
      return {one(1, Attrs().set("approximate", std::string("none")), "erf"),
              one(1, Attrs().set("approximate", std::string("tanh")), "tanh")};
    case OpId::gelu_backward:
      return {one(2, Attrs().set("approximate", std::string("none")), "erf"),
              one(2, Attrs().set("approximate", std::string("tanh")), "tanh")};
    case OpId::clamp:
      return {one(1, Attrs().set("min", -1.0).set("max", 2.0), "min and max"), one(1, Attrs().set("min", 0.5), "min"),
              one(1, Attrs().set("max", -0.5), "max")};
    case OpId::where: {
      Config c = one(3);
      c.bool_input = 0;
      return {c};
    }
    case OpId::cast: {
      Config to_int = one(1, Attrs().set("dtype", DType::Int64), "int64");
      to_int.finite_only = true;
      return {to_int, one(1, Attrs().set("dtype", DType::Float64), "float64"),
              one(1, Attrs().set("dtype", DType::Bool), "bool")};
    }
    case OpId::fill_: return {one(1, Attrs().set("value", -2.5))};
    case OpId::add_: return {one(2, Attrs().set("alpha", 0.5))};
    case OpId::mul_: case OpId::copy_: return {one(2)};
    case OpId::addcmul_: case OpId::addcdiv_: return {one(3, Attrs().set("value", 0.3))};
    case OpId::lerp_:
      return {one(2, Attrs().set("weight", 0.3), "weight 0.3"), one(2, Attrs().set("weight", 0.75), "weight 0.75")};
    default:  // the binary arithmetic and comparisons (and any op added later: it must get an expression)
      return {one(2)};
  }
}

// Every combination of grid values for n inputs, as n columns.
std::vector<std::vector<double>> combinations(const Config& c) {
  const std::vector<double>& grid = c.finite_only ? kFiniteGrid : kGrid;
  std::vector<std::vector<double>> cols(c.num_inputs);
  std::vector<size_t> idx(c.num_inputs, 0);
  auto size_of = [&](int i) { return i == c.bool_input ? size_t{2} : grid.size(); };
  for (;;) {
    for (int i = 0; i < c.num_inputs; ++i) cols[i].push_back(i == c.bool_input ? double(idx[i]) : grid[idx[i]]);
    int k = c.num_inputs - 1;
    while (k >= 0 && ++idx[k] == size_of(k)) idx[k--] = 0;
    if (k < 0) break;
  }
  return cols;
}

std::vector<double> values_of(const Tensor& t) {
  Tensor d = t.to(DType::Float64).contiguous();
  return std::vector<double>(d.data<double>(), d.data<double>() + d.numel());
}

// The eager result of the op on the columns (in-place ops update a copy of
// column 0).
std::vector<double> eager(OpId id, const Config& c, const std::vector<std::vector<double>>& cols, DType dt) {
  Tensors in;
  for (int i = 0; i < c.num_inputs; ++i) {
    Tensor t = from_vector(cols[i], {static_cast<int64_t>(cols[i].size())});
    in.push_back(i == c.bool_input ? t.to(DType::Bool) : t.to(dt));
  }
  Tensors out = dispatch(id, in, c.attrs);
  return values_of(out[0]);
}

bool close(double got, double want, double rtol, double atol) {
  if (std::isnan(got) || std::isnan(want)) return std::isnan(got) && std::isnan(want);
  if (got == want) return true;
  return std::abs(got - want) <= atol + rtol * std::abs(want);
}

bool is_expression_op(OpId id) { return op_kind(id) == OpKind::Pointwise || op_kind(id) == OpKind::Inplace; }

TEST(ScalarExpr, EveryPointwiseOpMatchesItsEagerKernel) {
  int ops_checked = 0;
  for (int i = 0; i < kNumOps; ++i) {
    OpId id = static_cast<OpId>(i);
    if (!is_expression_op(id)) continue;
    ++ops_checked;
    for (const Config& c : configs(id)) {
      SCOPED_TRACE(std::string(op_name(id)) + " " + c.label);
      ScalarExpr e;
      ASSERT_NO_THROW(e = pointwise_expr(id, c.attrs, c.num_inputs)) << op_name(id) << " has no scalar expression";
      auto cols = combinations(c);
      for (DType dt : {DType::Float32, DType::Float64}) {
        std::vector<double> want = eager(id, c, cols, dt);
        int bad = 0;
        for (size_t k = 0; k < want.size(); ++k) {
          std::vector<double> args;
          for (const auto& col : cols) args.push_back(dt == DType::Float32 ? double(float(col[k])) : col[k]);
          for (std::string_view name : op_def(id).step_attrs) args.push_back(c.attrs.f(std::string(name)));
          double got = eval(e, args, dt);
          bool ok = dt == DType::Float32 ? close(got, want[k], 1e-5, 1e-6) : close(got, want[k], 1e-12, 1e-300);
          if (!ok && ++bad <= 5) {
            std::ostringstream os;
            for (double a : args) os << a << " ";
            ADD_FAILURE() << dtype_name(dt) << " inputs " << os.str() << ": expression " << got << ", kernel "
                          << want[k];
          }
        }
        EXPECT_EQ(bad, 0) << dtype_name(dt);
      }
    }
  }
  EXPECT_GE(ops_checked, 31 + 7);  // every Pointwise op and every in-place update
}

TEST(ScalarExpr, OtherKindsHaveNoExpression) {
  EXPECT_THROW(pointwise_expr(OpId::sum, {}, 1), Error);
  EXPECT_THROW(pointwise_expr(OpId::add, {}, 3), Error);
}

TEST(ScalarExpr, StepAttributesAreInputsNotConstants) {
  // add_'s alpha (a learning rate) is input 2: a new value, the same expression.
  ScalarExpr e = pointwise_expr(OpId::add_, Attrs().set("alpha", -0.1), 2);
  std::vector<std::string> names = {"p", "g", "lr"};
  EXPECT_EQ(render_c(e, names), "(p + (lr * g))");
  EXPECT_EQ(eval(e, std::vector<double>{1.0, 2.0, -0.25}), 0.5);
  // clamp's bounds are not step attributes: constants.
  EXPECT_EQ(render_c(pointwise_expr(OpId::clamp, Attrs().set("min", 0.5), 1), std::vector<std::string>{"x"}),
            "((INFINITY < ((x < 0.5f) ? 0.5f : x)) ? INFINITY : ((x < 0.5f) ? 0.5f : x))");
}

TEST(ScalarExpr, SharedSubexpressionsAreOneNode) {
  // gelu_backward's tanh form uses tanh(inner) twice: one node, shared.
  ScalarExpr e = pointwise_expr(OpId::gelu_backward, Attrs().set("approximate", std::string("tanh")), 2);
  std::set<const void*> tanh_nodes;
  std::vector<ScalarExpr> stack{e};
  while (!stack.empty()) {
    ScalarExpr n = stack.back();
    stack.pop_back();
    if (n.op() == ExprOp::Tanh) tanh_nodes.insert(n.id());
    for (const ScalarExpr& a : n.args()) stack.push_back(a);
  }
  EXPECT_EQ(tanh_nodes.size(), 1u);
}

TEST(ScalarExpr, RenderGeluUsesTheRightFunctions) {
  std::vector<std::string> x = {"x"};
  std::string erf_f = render_c(pointwise_expr(OpId::gelu, Attrs().set("approximate", std::string("none")), 1), x);
  EXPECT_NE(erf_f.find("erff((x * 0.70710678118654757f))"), std::string::npos) << erf_f;
  EXPECT_EQ(erf_f.find("tanh"), std::string::npos) << erf_f;
  std::string tanh_d =
      render_c(pointwise_expr(OpId::gelu, Attrs().set("approximate", std::string("tanh")), 1), x, "double");
  EXPECT_NE(tanh_d.find("tanh("), std::string::npos) << tanh_d;
  EXPECT_EQ(tanh_d.find("erf"), std::string::npos) << tanh_d;
  EXPECT_EQ(tanh_d.find("f)"), std::string::npos) << "double rendering has no float literals: " << tanh_d;
  std::vector<std::string> gx = {"g", "x"};
  std::string bwd = render_c(pointwise_expr(OpId::gelu_backward, Attrs().set("approximate", std::string("none")), 2),
                             gx);
  EXPECT_NE(bwd.find("expf("), std::string::npos) << bwd;
  EXPECT_NE(bwd.find("erff("), std::string::npos) << bwd;
  EXPECT_THROW(render_c(pointwise_expr(OpId::add, {}, 2), x), Error);  // input 1 has no name
}

TEST(ScalarExpr, RenderReluBackwardIsOneSelect) {
  // relu's derivative fused: one select on the result, no bool mask between kernels.
  std::vector<std::string> gy = {"g", "y"};
  EXPECT_EQ(render_c(pointwise_expr(OpId::relu_backward, {}, 2), gy), "((y > 0.0f) ? g : 0.0f)");
}

// Renders every op's expression into one C++ program, compiles it with the
// host compiler and checks that it prints what eval() computes.
TEST(ScalarExpr, RenderedCCompilesAndComputesTheSameValues) {
  if (std::system("c++ --version > /dev/null 2>&1") != 0) GTEST_SKIP() << "no host C++ compiler";
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("kiln_render_c_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ostringstream src;
  src.precision(17);
  src << "#include <cmath>\n#include <cstdint>\n#include <cstdio>\nusing std::isnan;\n"
      << "int main() {\n  double a = 0, b = 0, c = 0, s = 0;\n";
  std::vector<double> expected;
  std::vector<std::string> names = {"a", "b", "c", "s"};  // s: the step attribute
  for (int i = 0; i < kNumOps; ++i) {
    OpId id = static_cast<OpId>(i);
    if (!is_expression_op(id)) continue;
    for (const Config& cfg : configs(id)) {
      ScalarExpr e = pointwise_expr(id, cfg.attrs, cfg.num_inputs);
      std::vector<std::string> used(names.begin(), names.begin() + cfg.num_inputs);
      double step_value = 0;
      if (!op_def(id).step_attrs.empty()) {
        ASSERT_EQ(op_def(id).step_attrs.size(), 1u) << op_name(id);
        used.push_back("s");
        step_value = cfg.attrs.f(std::string(op_def(id).step_attrs[0]));
      }
      std::string code = render_c(e, used, "double");
      auto cols = combinations(cfg);
      for (size_t k = 0; k < cols[0].size(); k += 7) {  // a sample of the grid
        src << "  a = " << (cfg.num_inputs > 0 ? cols[0][k] : 0) << "; b = " << (cfg.num_inputs > 1 ? cols[1][k] : 0)
            << "; c = " << (cfg.num_inputs > 2 ? cols[2][k] : 0) << "; s = " << step_value << ";\n";
        src << "  std::printf(\"%.17g\\n\", (double)(" << code << "));\n";
        std::vector<double> args(cols.size());
        for (size_t j = 0; j < cols.size(); ++j) args[j] = cols[j][k];
        if (used.size() > cols.size()) args.push_back(step_value);
        expected.push_back(eval(e, args));
      }
    }
  }
  src << "}\n";
  std::string text = src.str();
  // Grid values print as "inf"/"nan": spell them as C++.
  for (auto [from, to] : {std::pair<std::string, std::string>{"= -inf;", "= -INFINITY;"}, {"= inf;", "= INFINITY;"},
                          {"= nan;", "= NAN;"}, {"= -nan;", "= NAN;"}}) {
    for (size_t p = text.find(from); p != std::string::npos; p = text.find(from, p)) text.replace(p, from.size(), to);
  }
  std::ofstream(dir / "render.cpp") << text;
  std::string cmd = "c++ -std=c++17 -O0 -o " + (dir / "render").string() + " " + (dir / "render.cpp").string() +
                    " > " + (dir / "cc.log").string() + " 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << "the rendered C does not compile; see " << (dir / "cc.log");
  std::string run = (dir / "render").string() + " > " + (dir / "out.txt").string();
  ASSERT_EQ(std::system(run.c_str()), 0);
  std::ifstream out(dir / "out.txt");
  std::string line;
  size_t n = 0;
  while (std::getline(out, line) && n < expected.size()) {
    double got = line.find("nan") != std::string::npos ? kNaN : std::strtod(line.c_str(), nullptr);
    EXPECT_TRUE(close(got, expected[n], 1e-15, 0)) << "value " << n << ": rendered C gives " << line << ", eval "
                                                    << expected[n];
    ++n;
  }
  EXPECT_EQ(n, expected.size());
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kiln
