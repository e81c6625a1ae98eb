// Scalar expressions: the elementwise math of a pointwise op as a small tree
// (inputs, constants, unary/binary math, comparisons, select, cast) that the
// code generators render into C++ and CUDA C.
//
// Nobody writes these trees by hand: ScalarExpr has the operators and math
// functions the formulas of ops/scalar_math.h call, so instantiating an op's
// formula with T = ScalarExpr yields its tree (pointwise_expr). The eager
// kernels and the generated code therefore share one definition per op.
//
// Values are untyped numbers: a comparison is 1 or 0, a select's condition is
// true when nonzero; a renderer chooses the scalar type.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ops/op_def.h"
#include "ops/scalar_math.h"

namespace kiln {

enum class ExprOp : uint8_t {
  Input,
  Constant,
  // unary
  Neg, Exp, Log, Sqrt, Tanh, Erf, IsNan, Cast,
  // binary
  Add, Sub, Mul, Div, Pow,
  // comparisons (1 or 0)
  Eq, Ne, Lt, Le, Gt, Ge,
  // cond ? a : b
  Select,
};
const char* expr_op_name(ExprOp op);

struct ExprNode;

class ScalarExpr {
 public:
  ScalarExpr() = default;
  explicit ScalarExpr(double constant);  // T(c) in the formulas
  static ScalarExpr input(int index);
  static ScalarExpr make(ExprOp op, std::vector<ScalarExpr> args);
  static ScalarExpr cast(const ScalarExpr& x, DType dtype);

  bool defined() const { return node_ != nullptr; }
  ExprOp op() const;
  int input_index() const;    // Input
  double constant() const;    // Constant
  DType cast_dtype() const;   // Cast
  const std::vector<ScalarExpr>& args() const;
  // Identity of the node (shared subexpressions have one).
  const void* id() const { return node_.get(); }

 private:
  std::shared_ptr<const ExprNode> node_;
};

struct ExprNode {
  ExprOp op = ExprOp::Constant;
  int input = -1;
  double value = 0;
  DType dtype = DType::Float32;
  std::vector<ScalarExpr> args;
};

// ---- what the formulas call (found by argument-dependent lookup) ----
ScalarExpr operator+(const ScalarExpr& a, const ScalarExpr& b);
ScalarExpr operator-(const ScalarExpr& a, const ScalarExpr& b);
ScalarExpr operator*(const ScalarExpr& a, const ScalarExpr& b);
ScalarExpr operator/(const ScalarExpr& a, const ScalarExpr& b);
ScalarExpr operator-(const ScalarExpr& x);
ScalarExpr operator==(const ScalarExpr& a, const ScalarExpr& b);
ScalarExpr operator!=(const ScalarExpr& a, const ScalarExpr& b);
ScalarExpr operator<(const ScalarExpr& a, const ScalarExpr& b);
ScalarExpr operator<=(const ScalarExpr& a, const ScalarExpr& b);
ScalarExpr operator>(const ScalarExpr& a, const ScalarExpr& b);
ScalarExpr operator>=(const ScalarExpr& a, const ScalarExpr& b);
ScalarExpr exp(const ScalarExpr& x);
ScalarExpr log(const ScalarExpr& x);
ScalarExpr sqrt(const ScalarExpr& x);
ScalarExpr tanh(const ScalarExpr& x);
ScalarExpr erf(const ScalarExpr& x);
ScalarExpr isnan(const ScalarExpr& x);
ScalarExpr pow(const ScalarExpr& a, const ScalarExpr& b);
ScalarExpr select(const ScalarExpr& cond, const ScalarExpr& a, const ScalarExpr& b);

namespace scalar {
template <>
struct is_floating<ScalarExpr> : std::true_type {};
}  // namespace scalar

// The expression of a Pointwise op, or of an Inplace op's update (input 0 is
// self), over inputs 0..num_inputs-1; attributes (gelu's approximate,
// clamp's bounds, add_'s alpha...) become constants. kiln::Error for another
// kind of op or a wrong input count.
ScalarExpr pointwise_expr(OpId id, const Attrs& attrs, int num_inputs);

// C (C++ and CUDA) source of the expression, input i named names[i];
// scalar_type "float" uses the float functions (expf...) and float literals,
// "double" the double ones.
std::string render_c(const ScalarExpr& e, std::span<const std::string> names, const std::string& scalar_type = "float");

// The expression's value (tests and constant folding), computed in double,
// or with every intermediate rounded to float32 (compute = Float32) to
// reproduce float math's underflow, overflow and cancellation.
double eval(const ScalarExpr& e, std::span<const double> inputs, DType compute = DType::Float64);

// The expression computed with tensor ops over `inputs` (each node one
// primitive op, shared nodes computed once): how a pointwise op that is a
// composition of others (gelu) decomposes.
Tensor eval_tensors(const ScalarExpr& e, TensorSpan inputs);

}  // namespace kiln
