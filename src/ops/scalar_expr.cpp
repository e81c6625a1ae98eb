// Scalar expressions (ops/scalar_expr.h): building, pointwise_expr (the
// formulas of ops/scalar_math.h instantiated with ScalarExpr), rendering to
// C, and evaluation on numbers and on tensors.
#include "ops/scalar_expr.h"

#include <cmath>
#include <cstdio>
#include <limits>
#include <unordered_map>

#include "kiln/ops.h"
#include "ops/cpu/pointwise_util.h"

namespace kiln {

const char* expr_op_name(ExprOp op) {
  switch (op) {
    case ExprOp::Input: return "input";
    case ExprOp::Constant: return "constant";
    case ExprOp::Neg: return "neg";
    case ExprOp::Exp: return "exp";
    case ExprOp::Log: return "log";
    case ExprOp::Sqrt: return "sqrt";
    case ExprOp::Tanh: return "tanh";
    case ExprOp::Erf: return "erf";
    case ExprOp::IsNan: return "isnan";
    case ExprOp::Cast: return "cast";
    case ExprOp::Add: return "add";
    case ExprOp::Sub: return "sub";
    case ExprOp::Mul: return "mul";
    case ExprOp::Div: return "div";
    case ExprOp::Pow: return "pow";
    case ExprOp::Eq: return "eq";
    case ExprOp::Ne: return "ne";
    case ExprOp::Lt: return "lt";
    case ExprOp::Le: return "le";
    case ExprOp::Gt: return "gt";
    case ExprOp::Ge: return "ge";
    case ExprOp::Select: return "select";
  }
  return "?";
}

// ---------------------------------------------------------------------------
// Building
// ---------------------------------------------------------------------------

ScalarExpr::ScalarExpr(double constant) {
  auto n = std::make_shared<ExprNode>();
  n->op = ExprOp::Constant;
  n->value = constant;
  node_ = std::move(n);
}
ScalarExpr ScalarExpr::input(int index) {
  auto n = std::make_shared<ExprNode>();
  n->op = ExprOp::Input;
  n->input = index;
  ScalarExpr e;
  e.node_ = std::move(n);
  return e;
}
ScalarExpr ScalarExpr::make(ExprOp op, std::vector<ScalarExpr> args) {
  for (const ScalarExpr& a : args) KILN_ASSERT(a.defined(), "ScalarExpr::make(", expr_op_name(op), "): undefined argument");
  auto n = std::make_shared<ExprNode>();
  n->op = op;
  n->args = std::move(args);
  ScalarExpr e;
  e.node_ = std::move(n);
  return e;
}
ScalarExpr ScalarExpr::cast(const ScalarExpr& x, DType dtype) {
  auto n = std::make_shared<ExprNode>();
  n->op = ExprOp::Cast;
  n->dtype = dtype;
  n->args = {x};
  ScalarExpr e;
  e.node_ = std::move(n);
  return e;
}

ExprOp ScalarExpr::op() const {
  KILN_ASSERT(defined(), "ScalarExpr: undefined expression");
  return node_->op;
}
int ScalarExpr::input_index() const { return node_->input; }
double ScalarExpr::constant() const { return node_->value; }
DType ScalarExpr::cast_dtype() const { return node_->dtype; }
const std::vector<ScalarExpr>& ScalarExpr::args() const { return node_->args; }

ScalarExpr operator+(const ScalarExpr& a, const ScalarExpr& b) { return ScalarExpr::make(ExprOp::Add, {a, b}); }
ScalarExpr operator-(const ScalarExpr& a, const ScalarExpr& b) { return ScalarExpr::make(ExprOp::Sub, {a, b}); }
ScalarExpr operator*(const ScalarExpr& a, const ScalarExpr& b) { return ScalarExpr::make(ExprOp::Mul, {a, b}); }
ScalarExpr operator/(const ScalarExpr& a, const ScalarExpr& b) { return ScalarExpr::make(ExprOp::Div, {a, b}); }
ScalarExpr operator-(const ScalarExpr& x) { return ScalarExpr::make(ExprOp::Neg, {x}); }
ScalarExpr operator==(const ScalarExpr& a, const ScalarExpr& b) { return ScalarExpr::make(ExprOp::Eq, {a, b}); }
ScalarExpr operator!=(const ScalarExpr& a, const ScalarExpr& b) { return ScalarExpr::make(ExprOp::Ne, {a, b}); }
ScalarExpr operator<(const ScalarExpr& a, const ScalarExpr& b) { return ScalarExpr::make(ExprOp::Lt, {a, b}); }
ScalarExpr operator<=(const ScalarExpr& a, const ScalarExpr& b) { return ScalarExpr::make(ExprOp::Le, {a, b}); }
ScalarExpr operator>(const ScalarExpr& a, const ScalarExpr& b) { return ScalarExpr::make(ExprOp::Gt, {a, b}); }
ScalarExpr operator>=(const ScalarExpr& a, const ScalarExpr& b) { return ScalarExpr::make(ExprOp::Ge, {a, b}); }
ScalarExpr exp(const ScalarExpr& x) { return ScalarExpr::make(ExprOp::Exp, {x}); }
ScalarExpr log(const ScalarExpr& x) { return ScalarExpr::make(ExprOp::Log, {x}); }
ScalarExpr sqrt(const ScalarExpr& x) { return ScalarExpr::make(ExprOp::Sqrt, {x}); }
ScalarExpr tanh(const ScalarExpr& x) { return ScalarExpr::make(ExprOp::Tanh, {x}); }
ScalarExpr erf(const ScalarExpr& x) { return ScalarExpr::make(ExprOp::Erf, {x}); }
ScalarExpr isnan(const ScalarExpr& x) { return ScalarExpr::make(ExprOp::IsNan, {x}); }
ScalarExpr pow(const ScalarExpr& a, const ScalarExpr& b) { return ScalarExpr::make(ExprOp::Pow, {a, b}); }
ScalarExpr select(const ScalarExpr& cond, const ScalarExpr& a, const ScalarExpr& b) {
  return ScalarExpr::make(ExprOp::Select, {cond, a, b});
}

// ---------------------------------------------------------------------------
// pointwise_expr: the formulas of scalar_math.h with T = ScalarExpr
// ---------------------------------------------------------------------------

namespace {

int expected_inputs(OpId id) {
  switch (id) {
    case OpId::neg: case OpId::exp: case OpId::log: case OpId::sqrt: case OpId::rsqrt: case OpId::abs:
    case OpId::sign: case OpId::relu: case OpId::gelu: case OpId::sigmoid: case OpId::tanh: case OpId::clamp:
    case OpId::logical_not: case OpId::cast: case OpId::erf: case OpId::fill_:
      return 1;
    case OpId::where: case OpId::addcmul_: case OpId::addcdiv_:
      return 3;
    default:
      return 2;
  }
}

}  // namespace

ScalarExpr pointwise_expr(OpId id, const Attrs& attrs, int num_inputs) {
  OpKind kind = op_kind(id);
  KILN_CHECK(kind == OpKind::Pointwise || kind == OpKind::Inplace, "pointwise_expr: ", op_name(id),
             " is not a pointwise or in-place op; only those have a scalar expression");
  KILN_CHECK(num_inputs == expected_inputs(id), "pointwise_expr: ", op_name(id), " takes ", expected_inputs(id),
             " inputs, got ", num_inputs);
  using E = ScalarExpr;
  std::vector<E> in;
  for (int i = 0; i < num_inputs; ++i) in.push_back(E::input(i));
  // A step attribute (OpDef::step_attrs: an optimizer's alpha, a fill value)
  // is an input after the tensors, so a new value never changes the
  // expression; any other attribute is a constant.
  const auto& step = op_def(id).step_attrs;
  auto attr = [&](const char* name) {
    for (size_t k = 0; k < step.size(); ++k)
      if (step[k] == name) return E::input(num_inputs + static_cast<int>(k));
    return E(attrs.f(name));
  };
  const double inf = std::numeric_limits<double>::infinity();
  // exp, log, sqrt, tanh, erf and pow are elementary functions: called
  // unqualified, they resolve to ScalarExpr's overloads.
  switch (id) {
    case OpId::add: return scalar::add(in[0], in[1]);
    case OpId::sub: return scalar::sub(in[0], in[1]);
    case OpId::mul: return scalar::mul(in[0], in[1]);
    case OpId::div: return scalar::div(in[0], in[1]);
    case OpId::pow: return pow(in[0], in[1]);
    case OpId::maximum: return scalar::maximum(in[0], in[1]);
    case OpId::minimum: return scalar::minimum(in[0], in[1]);
    case OpId::neg: return scalar::neg(in[0]);
    case OpId::exp: return exp(in[0]);
    case OpId::log: return log(in[0]);
    case OpId::sqrt: return sqrt(in[0]);
    case OpId::rsqrt: return scalar::rsqrt(in[0]);
    case OpId::abs: return scalar::abs(in[0]);
    case OpId::sign: return scalar::sign(in[0]);
    case OpId::relu: return scalar::relu(in[0]);
    case OpId::gelu: return scalar::gelu(in[0], attrs.s("approximate") == "tanh");
    case OpId::gelu_backward: return scalar::gelu_backward(in[0], in[1], attrs.s("approximate") == "tanh");
    case OpId::sigmoid: return scalar::sigmoid(in[0]);
    case OpId::tanh: return tanh(in[0]);
    case OpId::erf: return erf(in[0]);
    case OpId::relu_backward: return scalar::relu_backward(in[0], in[1]);
    case OpId::clamp:
      return scalar::clamp(in[0], E(attrs.has("min") ? attrs.f("min") : -inf),
                           E(attrs.has("max") ? attrs.f("max") : inf));
    case OpId::where: return scalar::where(in[0], in[1], in[2]);
    case OpId::eq: return scalar::eq(in[0], in[1]);
    case OpId::ne: return scalar::ne(in[0], in[1]);
    case OpId::lt: return scalar::lt(in[0], in[1]);
    case OpId::le: return scalar::le(in[0], in[1]);
    case OpId::gt: return scalar::gt(in[0], in[1]);
    case OpId::ge: return scalar::ge(in[0], in[1]);
    case OpId::logical_not: return scalar::logical_not(in[0]);
    case OpId::cast: return E::cast(in[0], attrs.dtype("dtype"));
    // In-place updates: the new value of self (input 0).
    case OpId::fill_: return attr("value");
    case OpId::copy_: return in[1];
    case OpId::add_: return scalar::add_update(in[0], in[1], attr("alpha"));
    case OpId::mul_: return scalar::mul_update(in[0], in[1]);
    case OpId::addcmul_: return scalar::addcmul_update(in[0], in[1], in[2], attr("value"));
    case OpId::addcdiv_: return scalar::addcdiv_update(in[0], in[1], in[2], attr("value"));
    case OpId::lerp_: return scalar::lerp_update(in[0], in[1], attr("weight"));
    default: break;
  }
  KILN_FAIL("pointwise_expr: ", op_name(id), " has no scalar expression; add its formula to ops/scalar_math.h and a "
            "case here");
}

// ---------------------------------------------------------------------------
// render_c
// ---------------------------------------------------------------------------

namespace {

const char* c_type(DType d) {
  switch (d) {
    case DType::Float32: return "float";
    case DType::Float64: return "double";
    case DType::Int64: return "int64_t";
    case DType::Int32: return "int32_t";
    case DType::UInt8: return "uint8_t";
    case DType::Bool: return "bool";
    default: return nullptr;
  }
}

struct CRenderer {
  std::span<const std::string> names;
  bool is_float;

  std::string literal(double v) const {
    if (std::isnan(v)) return "NAN";
    if (std::isinf(v)) return v > 0 ? "INFINITY" : "(-INFINITY)";
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.17g", v);
    std::string s = buf;
    if (s.find_first_of(".e") == std::string::npos) s += ".0";
    if (is_float) s += "f";
    return v < 0 ? "(" + s + ")" : s;
  }
  std::string fn(const char* name, const std::vector<std::string>& args) const {
    std::string s = std::string(name) + (is_float ? "f(" : "(");
    for (size_t i = 0; i < args.size(); ++i) s += (i ? ", " : "") + args[i];
    return s + ")";
  }
  std::string render(const ScalarExpr& e) const {
    std::vector<std::string> a;
    for (const ScalarExpr& arg : e.args()) a.push_back(render(arg));
    auto bin = [&](const char* op) { return "(" + a[0] + " " + op + " " + a[1] + ")"; };
    switch (e.op()) {
      case ExprOp::Input:
        KILN_CHECK(e.input_index() < static_cast<int>(names.size()), "render_c: the expression reads input ",
                   e.input_index(), " but only ", names.size(), " names were given");
        return names[e.input_index()];
      case ExprOp::Constant: return literal(e.constant());
      case ExprOp::Neg: return "(-" + a[0] + ")";
      case ExprOp::Exp: return fn("exp", a);
      case ExprOp::Log: return fn("log", a);
      case ExprOp::Sqrt: return fn("sqrt", a);
      case ExprOp::Tanh: return fn("tanh", a);
      case ExprOp::Erf: return fn("erf", a);
      case ExprOp::Pow: return fn("pow", a);
      case ExprOp::IsNan: return "isnan(" + a[0] + ")";
      case ExprOp::Cast: {
        const char* t = c_type(e.cast_dtype());
        KILN_CHECK(t != nullptr, "render_c: no C type for a cast to ", dtype_name(e.cast_dtype()));
        return std::string("((") + t + ")" + a[0] + ")";
      }
      case ExprOp::Add: return bin("+");
      case ExprOp::Sub: return bin("-");
      case ExprOp::Mul: return bin("*");
      case ExprOp::Div: return bin("/");
      case ExprOp::Eq: return bin("==");
      case ExprOp::Ne: return bin("!=");
      case ExprOp::Lt: return bin("<");
      case ExprOp::Le: return bin("<=");
      case ExprOp::Gt: return bin(">");
      case ExprOp::Ge: return bin(">=");
      case ExprOp::Select: return "(" + a[0] + " ? " + a[1] + " : " + a[2] + ")";
    }
    KILN_ASSERT(false, "render_c: unknown node");
    return {};
  }
};

}  // namespace

std::string render_c(const ScalarExpr& e, std::span<const std::string> names, const std::string& scalar_type) {
  KILN_CHECK(scalar_type == "float" || scalar_type == "double", "render_c: scalar_type must be \"float\" or "
             "\"double\", got \"", scalar_type, "\"");
  return CRenderer{names, scalar_type == "float"}.render(e);
}

// ---------------------------------------------------------------------------
// Evaluation
// ---------------------------------------------------------------------------

namespace {

double cast_value(double v, DType d) {
  switch (d) {
    case DType::Float32: return static_cast<float>(v);
    case DType::Float64: return v;
    case DType::Float16: return static_cast<float>(Half(static_cast<float>(v)));
    case DType::BFloat16: return static_cast<float>(BFloat16(static_cast<float>(v)));
    case DType::Bool: return v != 0 ? 1.0 : 0.0;
    case DType::UInt8: return static_cast<double>(static_cast<uint8_t>(static_cast<int64_t>(v)));
    case DType::Int32: return static_cast<double>(static_cast<int32_t>(static_cast<int64_t>(v)));
    case DType::Int64: return static_cast<double>(static_cast<int64_t>(v));
  }
  return v;
}

struct Evaluator {
  std::span<const double> inputs;
  bool in_float;  // round every value to float32, as float math does
  std::unordered_map<const void*, double> memo;

  double run(const ScalarExpr& e) {
    if (auto it = memo.find(e.id()); it != memo.end()) return it->second;
    double r = compute(e);
    if (in_float && !(e.op() == ExprOp::Cast && e.cast_dtype() != DType::Float32)) r = static_cast<float>(r);
    memo.emplace(e.id(), r);
    return r;
  }
  double compute(const ScalarExpr& e) {
    const auto& a = e.args();
    switch (e.op()) {
      case ExprOp::Input:
        KILN_CHECK(e.input_index() < static_cast<int>(inputs.size()), "eval: the expression reads input ",
                   e.input_index(), " but only ", inputs.size(), " values were given");
        return inputs[e.input_index()];
      case ExprOp::Constant: return e.constant();
      case ExprOp::Select: return run(a[0]) != 0 ? run(a[1]) : run(a[2]);
      default: break;
    }
    double x = run(a[0]);
    switch (e.op()) {
      case ExprOp::Neg: return -x;
      case ExprOp::Exp: return std::exp(x);
      case ExprOp::Log: return std::log(x);
      case ExprOp::Sqrt: return std::sqrt(x);
      case ExprOp::Tanh: return std::tanh(x);
      case ExprOp::Erf: return std::erf(x);
      case ExprOp::IsNan: return std::isnan(x) ? 1 : 0;
      case ExprOp::Cast: return cast_value(x, e.cast_dtype());
      default: break;
    }
    double y = run(a[1]);
    switch (e.op()) {
      case ExprOp::Add: return x + y;
      case ExprOp::Sub: return x - y;
      case ExprOp::Mul: return x * y;
      case ExprOp::Div: return x / y;
      case ExprOp::Pow: return std::pow(x, y);
      case ExprOp::Eq: return x == y ? 1 : 0;
      case ExprOp::Ne: return x != y ? 1 : 0;
      case ExprOp::Lt: return x < y ? 1 : 0;
      case ExprOp::Le: return x <= y ? 1 : 0;
      case ExprOp::Gt: return x > y ? 1 : 0;
      case ExprOp::Ge: return x >= y ? 1 : 0;
      default: break;
    }
    KILN_ASSERT(false, "eval: unknown node ", expr_op_name(e.op()));
    return 0;
  }
};

// Each node as one primitive tensor op. Comparisons give bool tensors; where
// a bool meets arithmetic it acts as 0/1 of the other operand's dtype.
struct TensorEvaluator {
  TensorSpan inputs;
  std::unordered_map<const void*, Tensor> memo;

  Tensor run(const ScalarExpr& e) {
    if (auto it = memo.find(e.id()); it != memo.end()) return it->second;
    Tensor r = compute(e);
    memo.emplace(e.id(), r);
    return r;
  }
  static Tensor numeric(const Tensor& t, const Tensor& like) {
    if (t.dtype() != DType::Bool || like.dtype() == DType::Bool) return t;
    return cast(t, like.dtype());
  }
  Tensor compute(const ScalarExpr& e) {
    const auto& a = e.args();
    switch (e.op()) {
      case ExprOp::Input:
        KILN_CHECK(e.input_index() < static_cast<int>(inputs.size()), "eval_tensors: the expression reads input ",
                   e.input_index(), " but only ", inputs.size(), " tensors were given");
        return inputs[e.input_index()];
      case ExprOp::Constant: return cpu::wrap_number(e.constant());
      case ExprOp::Select: {
        Tensor c = run(a[0]);
        if (c.dtype() != DType::Bool) c = ne(c, 0.0);
        return where(c, run(a[1]), run(a[2]));
      }
      default: break;
    }
    Tensor x = run(a[0]);
    switch (e.op()) {
      case ExprOp::Neg: return neg(x);
      case ExprOp::Exp: return exp(x);
      case ExprOp::Log: return log(x);
      case ExprOp::Sqrt: return sqrt(x);
      case ExprOp::Tanh: return tanh(x);
      case ExprOp::Erf: return erf(x);
      case ExprOp::IsNan: return ne(x, x);
      case ExprOp::Cast: return cast(x, e.cast_dtype());
      default: break;
    }
    Tensor y = run(a[1]);
    Tensor xn = numeric(x, y), yn = numeric(y, x);
    switch (e.op()) {
      case ExprOp::Add: return add(xn, yn);
      case ExprOp::Sub: return sub(xn, yn);
      case ExprOp::Mul: return mul(xn, yn);
      case ExprOp::Div: return div(xn, yn);
      case ExprOp::Pow: return pow(xn, yn);
      case ExprOp::Eq: return eq(x, y);
      case ExprOp::Ne: return ne(x, y);
      case ExprOp::Lt: return lt(x, y);
      case ExprOp::Le: return le(x, y);
      case ExprOp::Gt: return gt(x, y);
      case ExprOp::Ge: return ge(x, y);
      default: break;
    }
    KILN_ASSERT(false, "eval_tensors: unknown node ", expr_op_name(e.op()));
    return {};
  }
};

}  // namespace

double eval(const ScalarExpr& e, std::span<const double> inputs, DType compute) {
  KILN_CHECK(compute == DType::Float32 || compute == DType::Float64, "eval: compute dtype must be float32 or "
             "float64, got ", dtype_name(compute));
  return Evaluator{inputs, compute == DType::Float32, {}}.run(e);
}

Tensor eval_tensors(const ScalarExpr& e, TensorSpan inputs) { return TensorEvaluator{inputs, {}}.run(e); }

}  // namespace kiln
