// C++/OpenMP rendering of loop kernels as explicit vector code (render_cpp.h).
#include "compiler/codegen/cpp/render_cpp.h"

#include <cmath>
#include <cstdio>
#include <unordered_map>

#include "compiler/codegen/cpp/math_prelude.h"
#include "compiler/codegen/cpp/render_c_like.h"
#include "kiln/error.h"

namespace kiln::compiler::codegen {

using namespace lower;

namespace {

IndexExpr work(const Kernel& k) {
  IndexExpr n(1);
  for (const Loop& l : k.loops) n = n * l.extent;
  for (const Loop& l : k.reduce_loops) n = n * l.extent;
  return n;
}

// "" (never parallel), or the clause saying when: "" after a constant size
// over the threshold, " if(parallel: <n> >= T)" for a symbolic one.
struct Parallel {
  bool enabled = false;
  std::string clause;
};
Parallel parallel_for(const Kernel& k) {
  IndexExpr n = work(k);
  if (auto c = n.constant()) return {*c >= kParallelThreshold, ""};
  return {true, " if(parallel: " + n.str() + " >= " + std::to_string(kParallelThreshold) + ")"};
}

// A float constant exactly: the float the formula's T(c) rounds to, in hex.
std::string float_literal(double v) {
  auto f = static_cast<float>(v);
  if (std::isnan(f)) return "__builtin_nanf(\"\")";
  if (std::isinf(f)) return f > 0 ? "__builtin_inff()" : "(-__builtin_inff())";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%af", static_cast<double>(f));
  return std::string("(") + buf + ")";
}

// Which loop runs as vector lanes.
enum class Mode {
  Outputs,  // the innermost output loop (pointwise kernels; reductions whose reduced loop is strided)
  Reduced,  // the innermost reduced loop, reduced across lanes at the end
};

class VectorRenderer {
 public:
  // in_region: the kernel runs inside a parallel region that its caller
  // opened (parallel_regions.h): its loops share out the iterations
  // (`omp for`) without the barrier at the end, and a kernel too small to
  // split runs whole on one thread (`omp single`); outside any region those
  // run on the calling thread, so the function is also right called alone.
  VectorRenderer(const Kernel& k, bool in_region) : k_(k), buffers_(kernel_buffers(k)), in_region_(in_region) {}

  std::string render() {
    out_ = "extern \"C\" void " + kernel_symbol(k_) + "(void* const* bufs, const int64_t* sizes) {\n";
    for (size_t b = 0; b < buffers_.size(); ++b) {
      ValueId v = buffers_[b];
      DType t = buffer_dtype(v);
      std::string type = std::string(is_stored(v) ? "" : "const ") + element_type(t);
      emit(1, type + pointer_declarator(k_, v) + "b" + std::to_string(b) + " = static_cast<" + type + "*>(bufs[" +
                  std::to_string(b) + "]);  // %" + std::to_string(v));
    }
    emit(1, "const int64_t s0 = sizes[0];");
    emit(1, "(void)s0;");
    // In a region, a kernel with no output loop to share out (too small, or
    // a full reduction) runs whole on one thread, not once per thread.
    bool single = in_region_ && !(parallel_for(k_).enabled && !k_.loops.empty());
    if (single) {
      emit(1, "#pragma omp single nowait");
      emit(1, "{");
    }
    hoist_invariant_loads();
    choose_mode();
    if (mode_ == Mode::Outputs) render_outputs_mode();
    else render_reduced_mode();
    if (single) emit(1, "}");
    out_ += "}\n";
    return out_;
  }

 private:
  enum class Kind { Float, Mask };
  struct Value {
    std::string name;
    Kind kind = Kind::Float;
  };

  const Kernel& k_;
  std::vector<ValueId> buffers_;
  bool in_region_ = false;
  std::string out_;
  Mode mode_ = Mode::Outputs;
  std::string vec_var_;  // the loop variable whose iterations are lanes; "" when none
  bool in_lanes_ = false;  // the scope being rendered is inside the vector loop
  std::unordered_map<const void*, Value> temps_;
  std::unordered_map<int, std::string> operands_;
  std::unordered_map<int, std::string> hoisted_;  // loads no loop changes, read once before the loops
  int next_temp_ = 0;

  // A load whose index no loop variable changes (a learning rate, a 0-dim
  // number) is read once at the top: inside the loops the compiler would
  // read it again on every iteration, not knowing the stores miss it.
  void hoist_invariant_loads() {
    for (size_t i = 0; i < k_.loads.size(); ++i) {
      IndexExpr flat = k_.loads[i].flat();
      bool invariant = true;
      for (const Loop& l : k_.loops) invariant = invariant && !flat.uses(l.var);
      for (const Loop& l : k_.reduce_loops) invariant = invariant && !flat.uses(l.var);
      if (!invariant) continue;
      std::string name = numbered("h", static_cast<int64_t>(i));
      emit(1, "const kv::vf " + name + " = kv::set1(kv::to_float(" + buffer_name(k_.loads[i].buffer) + "[" +
                  flat.str() + "]));");
      hoisted_.emplace(static_cast<int>(i), name);
    }
  }

  void emit(size_t indent, const std::string& line) { out_ += std::string(2 * indent, ' ') + line + "\n"; }

  bool is_stored(ValueId v) const {
    for (const Store& s : k_.stores)
      if (s.buffer == v) return true;
    return false;
  }
  DType buffer_dtype(ValueId v) const {
    for (const Store& s : k_.stores)
      if (s.buffer == v) return s.dtype;
    for (const Load& l : k_.loads)
      if (l.buffer == v) return l.dtype;
    KILN_ASSERT(false, "render_cpp: buffer %", v, " is neither loaded nor stored");
    return DType::Float32;
  }
  std::string buffer_name(ValueId v) const {
    for (size_t b = 0; b < buffers_.size(); ++b)
      if (buffers_[b] == v) return numbered("b", static_cast<int64_t>(b));
    KILN_ASSERT(false, "render_cpp: no buffer %", v);
    return {};
  }

  // The stride of an index along the vector loop (0 outside of it).
  std::optional<IndexExpr> lane_stride(const IndexExpr& flat) const {
    if (!in_lanes_ || vec_var_.empty()) return IndexExpr(0);
    return flat.coefficient_of(vec_var_);
  }
  static bool is(const std::optional<IndexExpr>& s, int64_t c) { return s && s->constant() == c; }

  // Reductions over fewer than kFewReduced elements per output (a global
  // max-pool over 3x3, airbench's amax) put their lanes over the output loop
  // even when the reduced loop is contiguous: over the reduced loop, 9 of 16
  // lanes would compute (GELU's erf included) and each output would pay a
  // 16-step reduction across lanes, 0.96 ms of an airbench train step for
  // 32768 outputs; over the outputs, each lane reduces its own output. 16
  // elements (ResNet-18's 4x4 average pool) fill a vector and stay as they
  // were: over the outputs its bfloat16 loads went element by element.
  static constexpr int64_t kFewReduced = 16;
  bool has_welford() const {
    for (const Reduction& r : k_.reductions)
      if (r.op == ReduceOp::Welford) return true;
    return false;
  }
  bool few_reduced_elements() const {
    int64_t n = 1;
    for (const Loop& l : k_.reduce_loops) {
      std::optional<int64_t> e = l.extent.constant();
      if (!e) return false;
      n *= *e;
    }
    return !has_welford() && n < kFewReduced;
  }
  bool short_innermost_reduction() const {
    std::optional<int64_t> e = k_.reduce_loops.back().extent.constant();
    return !has_welford() && e && *e < kFewReduced;
  }
  // Whether the innermost output loop fills the lanes (or its extent is symbolic).
  bool outputs_fill_lanes() const {
    std::optional<int64_t> e = k_.loops.back().extent.constant();
    return !e || *e >= kFewReduced;
  }
  // Whether an index walks `var` contiguously or not at all.
  static bool unit_stride(const IndexExpr& flat, const std::string& var) {
    auto s = flat.coefficient_of(var);
    return is(s, 0) || is(s, 1);
  }
  bool stores_walk_contiguously(const std::string& var) const {
    for (const Store& st : k_.stores)
      if (!unit_stride(st.flat(), var)) return false;
    return true;
  }
  // Loads (and with `stores_too` stores) that walk `var` contiguously or not at all.
  bool walks_contiguously(const std::string& var, bool stores_too) const {
    for (const Load& l : k_.loads)
      if (!unit_stride(l.flat(), var)) return false;
    return !stores_too || stores_walk_contiguously(var);
  }
  bool reads_linearly(const std::string& var) const {
    for (const Load& l : k_.loads)
      if (!l.flat().coefficient_of(var)) return false;
    return true;
  }

  void choose_mode() {
    mode_ = Mode::Outputs;
    vec_var_ = k_.loops.empty() ? "" : k_.loops.back().var;
    if (!k_.is_reduction() || k_.reduce_loops.empty()) return;  // (reduced dims of size 1: no loop)
    // Lanes over the reduced loop when the reductions read it contiguously
    // (or not at all); over the output loop when that one is contiguous.
    const std::string& r = k_.reduce_loops.back().var;
    if (!k_.loops.empty() && outputs_fill_lanes()) {
      if (few_reduced_elements() && stores_walk_contiguously(vec_var_) && reads_linearly(vec_var_)) return;
      // A short innermost reduced loop whose output loop every load walks
      // contiguously (a convolution's window row: in[.., y + i, x + j] walks x
      // as it walks j) also takes its lanes over the outputs: full vectors of
      // x instead of 5 of 16 lanes of j.
      if (short_innermost_reduction() && walks_contiguously(vec_var_, true)) return;
    }
    if (walks_contiguously(r, false) || k_.loops.empty() || !walks_contiguously(vec_var_, true)) {
      mode_ = Mode::Reduced;
      vec_var_ = r;
    }
  }

  // A chunk loop over `l` by kLanes, with n_ active lanes.
  void open_lane_loop(size_t& indent, const Loop& l, const std::string& pragma) {
    if (!pragma.empty()) emit(indent, pragma);
    std::string e = paren_index(l.extent);
    emit(indent++, "for (int64_t " + l.var + " = 0; " + l.var + " < " + e + "; " + l.var + " += kv::kLanes) {");
    emit(indent, "const long n_ = " + e + " - " + l.var + " < kv::kLanes ? " + e + " - " + l.var + " : kv::kLanes;");
  }
  static std::string paren_index(const IndexExpr& e) {
    std::string s = "(";  // built piecewise: GCC 12 warns falsely (-Wrestrict) about "(" + std::string
    s += e.str();
    return s + ")";
  }
  void open_loop(size_t& indent, const Loop& l, const std::string& pragma) {
    if (!pragma.empty()) emit(indent, pragma);
    emit(indent++, "for (int64_t " + l.var + " = 0; " + l.var + " < " + paren_index(l.extent) + "; ++" +
                       l.var + ") {");
  }
  void close_to(size_t& indent, size_t to) {
    while (indent > to) emit(--indent, "}");
  }

  // ---- operands and expressions ----
  std::string load_text(const Load& l) {
    std::string p = buffer_name(l.buffer) + " + (" + l.flat().str() + ")";
    auto stride = lane_stride(l.flat());
    if (is(stride, 0)) {
      std::string v = buffer_name(l.buffer) + "[" + l.flat().str() + "]";
      return "kv::set1(kv::to_float(" + v + "))";
    }
    if (is(stride, 1) && (l.dtype == DType::Float32 || l.dtype == DType::BFloat16)) return "kv::load(" + p + ", n_)";
    if (is(stride, 1) && l.dtype == DType::Bool) return "kv::load_bools(" + p + ", n_)";
    KILN_ASSERT(stride.has_value(), "render_cpp: kernel ", k_.name, " reads ", l.flat().str(),
                ", not linear in ", vec_var_);
    return "kv::load_strided(" + p + ", " + stride->str() + ", n_)";
  }
  // Name of operand i in the current scope (emitted once).
  std::string operand(size_t indent, int i, const std::vector<std::string>& accumulators) {
    if (i >= kAccumulatorBase && i < kIndexValueBase) return accumulators.at(static_cast<size_t>(i - kAccumulatorBase));
    if (auto it = hoisted_.find(i); it != hoisted_.end()) return it->second;
    if (auto it = operands_.find(i); it != operands_.end()) return it->second;
    std::string text;
    if (i >= kIndexValueBase) {
      const IndexExpr& e = k_.index_values.at(static_cast<size_t>(i - kIndexValueBase));
      auto stride = lane_stride(e);
      KILN_ASSERT(stride.has_value(), "render_cpp: index value ", e.str(), " not linear in ", vec_var_);
      text = is(stride, 0) ? "kv::set1(static_cast<float>(" + e.str() + "))"
                           : "kv::iota(" + e.str() + ", " + stride->str() + ")";
    } else {
      text = load_text(k_.loads.at(static_cast<size_t>(i)));
    }
    std::string name = numbered("l", next_temp_++);
    emit(indent, "const kv::vf " + name + " = " + text + ";");
    operands_.emplace(i, name);
    return name;
  }

  // A buffer's C element type: bfloat16 as kv::bf16_t, whose loads and
  // stores convert (vec_math.h).
  static std::string element_type(DType t) { return t == DType::BFloat16 ? "kv::bf16_t" : c_element_type(t); }

  static std::string as_float(const Value& v) { return v.kind == Kind::Float ? v.name : "kv::mask_to_float(" + v.name + ")"; }
  static std::string as_mask(const Value& v) { return v.kind == Kind::Mask ? v.name : "kv::float_to_mask(" + v.name + ")"; }

  Value node_text(const ScalarExpr& x, const std::vector<Value>& a) {
    auto f1 = [&](const char* fn) { return Value{std::string("kv::") + fn + "(" + as_float(a[0]) + ")", Kind::Float}; };
    auto f2 = [&](const char* fn, Kind kind) {
      return Value{std::string("kv::") + fn + "(" + as_float(a[0]) + ", " + as_float(a[1]) + ")", kind};
    };
    switch (x.op()) {
      case ExprOp::Neg: return f1("neg");
      case ExprOp::Exp: return f1("exp");
      case ExprOp::Log: return f1("log");
      case ExprOp::Sqrt: return f1("sqrt");
      case ExprOp::Tanh: return f1("tanh");
      case ExprOp::Erf: return f1("erf");
      case ExprOp::IsNan: return {"kv::isnan(" + as_float(a[0]) + ")", Kind::Mask};
      case ExprOp::Cast:
        if (x.cast_dtype() == DType::Bool) return {as_mask(a[0]), Kind::Mask};
        if (x.cast_dtype() == DType::BFloat16) return {"kv::round_bf16(" + as_float(a[0]) + ")", Kind::Float};
        KILN_ASSERT(x.cast_dtype() == DType::Float32, "render_cpp: a cast to ", dtype_name(x.cast_dtype()),
                    " in a kernel (lowering keeps float32, bfloat16 and bool only)");
        return {as_float(a[0]), Kind::Float};
      case ExprOp::Add: return f2("add", Kind::Float);
      case ExprOp::Sub: return f2("sub", Kind::Float);
      case ExprOp::Mul: return f2("mul", Kind::Float);
      case ExprOp::Div: return f2("div", Kind::Float);
      case ExprOp::Pow: {
        // A constant exponent takes only its branch of kv::pow, as the
        // eager row with one exponent does (the same bits either way).
        const ScalarExpr& e = x.args()[1];
        if (e.op() != ExprOp::Constant) return f2("pow", Kind::Float);
        auto c = static_cast<float>(e.constant());
        std::string b = as_float(a[0]);
        if (c == 2) return {"kv::mul(" + b + ", " + b + ")", Kind::Float};
        if (c == 3) return {"kv::mul(kv::mul(" + b + ", " + b + "), " + b + ")", Kind::Float};
        if (c == 0.5f) return {"kv::pow_half(" + b + ")", Kind::Float};
        if (c == -0.5f) return {"kv::pow_minus_half(" + b + ")", Kind::Float};
        if (c == -1) return {"kv::div(kv::set1(1.0f), " + b + ")", Kind::Float};
        if (c == -2) return {"kv::div(kv::set1(1.0f), kv::mul(" + b + ", " + b + "))", Kind::Float};
        return f2("sleef_pow", Kind::Float);
      }
      case ExprOp::Eq: return f2("eq", Kind::Mask);
      case ExprOp::Ne: return f2("ne", Kind::Mask);
      case ExprOp::Lt: return f2("lt", Kind::Mask);
      case ExprOp::Le: return f2("le", Kind::Mask);
      case ExprOp::Gt: return f2("gt", Kind::Mask);
      case ExprOp::Ge: return f2("ge", Kind::Mask);
      case ExprOp::Select:
        return {"kv::select(" + as_mask(a[0]) + ", " + as_float(a[1]) + ", " + as_float(a[2]) + ")", Kind::Float};
      case ExprOp::Input:
      case ExprOp::Constant: break;
    }
    KILN_ASSERT(false, "render_cpp: unknown expression node");
    return {};
  }

  // Emits the nodes of `roots` (each once per scope) and returns their values.
  std::vector<Value> compute(size_t indent, const std::vector<ScalarExpr>& roots,
                             const std::vector<std::string>& accumulators) {
    auto value = [&](const ScalarExpr& x) -> Value {
      if (x.op() == ExprOp::Input) return {operand(indent, x.input_index(), accumulators), Kind::Float};
      if (x.op() == ExprOp::Constant) return {"kv::set1(" + float_literal(x.constant()) + ")", Kind::Float};
      return temps_.at(x.id());
    };
    for (const ScalarExpr& x : ssa_order(roots)) {
      if (temps_.count(x.id())) continue;
      std::vector<Value> args;
      for (const ScalarExpr& a : x.args()) args.push_back(value(a));
      Value v = node_text(x, args);
      std::string t = numbered("t", next_temp_++);
      emit(indent, std::string("const kv::") + (v.kind == Kind::Float ? "vf " : "vi ") + t + " = " + v.name + ";");
      temps_.emplace(x.id(), Value{t, v.kind});
    }
    std::vector<Value> values;
    for (const ScalarExpr& r : roots) values.push_back(value(r));
    return values;
  }
  void new_scope() {
    temps_.clear();
    operands_.clear();
  }

  // The stores of the kernel, computed in the current scope.
  void render_stores(size_t indent, const std::vector<std::string>& accumulators) {
    std::vector<ScalarExpr> roots;
    for (const Store& st : k_.stores) roots.push_back(st.value);
    std::vector<Value> values = compute(indent, roots, accumulators);
    for (size_t j = 0; j < k_.stores.size(); ++j) {
      const Store& st = k_.stores[j];
      std::string b = buffer_name(st.buffer), flat = st.flat().str();
      std::string v = as_float(values[j]);
      auto stride = lane_stride(st.flat());
      KILN_ASSERT(stride.has_value(), "render_cpp: kernel ", k_.name, " writes ", flat, ", not linear in ", vec_var_);
      if (!in_lanes_) {
        emit(indent, "kv::put(" + b + " + (" + flat + "), kv::lane(" + v + ", 0));");
      } else if (is(stride, 1) && (st.dtype == DType::Float32 || st.dtype == DType::BFloat16)) {
        emit(indent, "kv::store(" + b + " + (" + flat + "), n_, " + v + ");");
      } else if (is(stride, 1) && st.dtype == DType::Bool) {
        emit(indent, "kv::store_bools(" + b + " + (" + flat + "), n_, " + v + ");");
      } else {
        emit(indent, "kv::store_strided(" + b + " + (" + flat + "), " + stride->str() + ", n_, " + v + ");");
      }
    }
  }

  static std::string identity(ReduceOp op) {
    switch (op) {
      case ReduceOp::Max: return "(-__builtin_inff())";
      case ReduceOp::Min: return "__builtin_inff()";
      default: return "0.0f";
    }
  }
  // acc = combine(acc, value), the op's formula on vectors (NaN-propagating
  // max and min as the eager amax/amin).
  void render_combine(size_t indent, ReduceOp op, const std::string& acc, const std::string& value) {
    if (op == ReduceOp::Sum) {
      emit(indent, acc + " = kv::add(" + acc + ", " + value + ");");
      return;
    }
    ScalarExpr f = pointwise_expr(op == ReduceOp::Max ? OpId::maximum : OpId::minimum, {}, 2);
    // Inputs 0 and 1 of the formula are the accumulator and the value: render
    // it in a scope of its own where they are operands.
    auto saved_temps = temps_;
    auto saved_ops = operands_;
    auto saved_hoisted = hoisted_;
    temps_.clear();
    hoisted_.clear();
    operands_ = {{0, acc}, {1, value}};
    std::vector<Value> r = compute(indent, {f}, {});
    emit(indent, acc + " = " + as_float(r[0]) + ";");
    temps_ = std::move(saved_temps);
    operands_ = std::move(saved_ops);
    hoisted_ = std::move(saved_hoisted);
  }

  // Welford's update with the lanes of `value`: per lane (each lane its own
  // output, state arrays) or one after another in element order (the lanes
  // are consecutive elements of one reduction).
  void render_welford(size_t indent, const std::string& acc, const std::string& value, bool per_lane) {
    const std::string at = per_lane ? "[l_]" : "";
    emit(indent, "{");
    emit(indent + 1, "const kv::vf x_ = " + value + ";");
    if (per_lane) emit(indent + 1, "++" + acc + "_n;");
    emit(indent + 1, std::string("for (int l_ = 0; l_ < ") + (per_lane ? "kv::kLanes" : "n_") + "; ++l_) {");
    emit(indent + 2, "const double x = kv::lane(x_, l_);");
    emit(indent + 2, "const double delta = x - " + acc + "_mean" + at + ";");
    emit(indent + 2, acc + "_mean" + at + " += delta / static_cast<double>(" + (per_lane ? "" : "++") + acc + "_n);");
    emit(indent + 2, acc + (per_lane ? "_m2[l_]" : "") + " += delta * (x - " + acc + "_mean" + at + ");");
    emit(indent + 1, "}");
    emit(indent, "}");
  }

  // Opens output loops [0, count) as one parallel iteration space when the
  // kernel does enough work.
  void open_parallel_loops(size_t& indent, size_t count) {
    for (size_t d = 0; d < count; ++d) open_loop(indent, k_.loops[d], d == 0 ? parallel_pragma(count) : "");
  }
  // The pragma sharing out `collapse` loops over the threads ("" when the
  // kernel is too small to split).
  std::string parallel_pragma(size_t collapse) const {
    Parallel par = parallel_for(k_);
    if (!par.enabled) return "";
    std::string c = collapse > 1 ? " collapse(" + std::to_string(collapse) + ")" : std::string();
    if (in_region_) return "#pragma omp for schedule(static) nowait" + c;
    return "#pragma omp parallel for" + c + par.clause;
  }
  // Declares the accumulators: a vector per sum, max and min (named with
  // `vector_suffix`), Welford's M2, mean and count per lane or as one.
  std::vector<std::string> declare_accumulators(size_t indent, bool welford_per_lane, const std::string& vector_suffix) {
    std::vector<std::string> accs;
    for (size_t j = 0; j < k_.reductions.size(); ++j) {
      std::string acc = numbered("acc", static_cast<int64_t>(j));
      if (k_.reductions[j].op != ReduceOp::Welford)
        emit(indent, "kv::vf " + acc + vector_suffix + " = kv::set1(" + identity(k_.reductions[j].op) + ");");
      else if (welford_per_lane)
        emit(indent, "double " + acc + "_m2[kv::kLanes] = {}, " + acc + "_mean[kv::kLanes] = {};");
      else
        emit(indent, "double " + acc + " = 0.0, " + acc + "_mean = 0.0;");
      if (k_.reductions[j].op == ReduceOp::Welford) emit(indent, "int64_t " + acc + "_n = 0;");
      accs.push_back(acc);
    }
    return accs;
  }

  // Whether operand i reads the same element on every lane of the vector
  // loop (a per-channel scale in a loop over a weight's rows).
  bool lane_invariant_operand(int i) const {
    if (i >= kAccumulatorBase && i < kIndexValueBase) return false;
    const IndexExpr& flat = i >= kIndexValueBase ? k_.index_values.at(static_cast<size_t>(i - kIndexValueBase))
                                                 : k_.loads.at(static_cast<size_t>(i)).flat();
    return !flat.uses(vec_var_);
  }

  // A pointwise kernel's computations that no lane of the vector loop
  // changes, emitted before that loop: once per row instead of once per
  // chunk of lanes. Vertical fusion inlines a per-channel producer into its
  // per-element consumer (eval batch norm folded into a convolution's
  // weight: w * (gamma / sqrt(var + eps))); without this the square root and
  // the division ran for every chunk of the 2304 elements of each row.
  void hoist_lane_invariant_computations(size_t indent) {
    if (vec_var_.empty() || k_.is_reduction()) return;
    std::vector<ScalarExpr> roots;
    for (const Store& st : k_.stores) roots.push_back(st.value);
    std::unordered_map<const void*, bool> invariant;
    std::vector<ScalarExpr> hoist;
    for (const ScalarExpr& x : ssa_order(roots)) {
      bool inv = true;
      for (const ScalarExpr& a : x.args()) {
        if (a.op() == ExprOp::Constant) continue;
        inv = inv && (a.op() == ExprOp::Input ? lane_invariant_operand(a.input_index()) : invariant.at(a.id()));
      }
      invariant[x.id()] = inv;
      if (inv && !x.args().empty()) hoist.push_back(x);
    }
    if (!hoist.empty()) compute(indent, hoist, {});
  }

  // The output loop (not the lanes' own) that a reduction runs inside its
  // reduced loops, one accumulator per iteration ("unroll and jam"): one of
  // 2 to 8 iterations that some load of the reduced loops does not use, so
  // that load is read once for all of them (a convolution of few output
  // channels: the input row is loaded once for every channel's accumulator;
  // small_conv.h). -1: none.
  int jam_loop() const {
    const size_t n = k_.loops.size();
    if (!k_.is_reduction() || n < 2 || has_welford()) return -1;
    for (size_t d = n - 1; d-- > 0;) {
      std::optional<int64_t> e = k_.loops[d].extent.constant();
      if (!e || *e < 2 || *e > 8) continue;
      for (const Load& l : k_.loads) {
        bool in_reduction = false;
        for (const Loop& r : k_.reduce_loops) in_reduction = in_reduction || l.flat().uses(r.var);
        if (in_reduction && !l.flat().uses(k_.loops[d].var)) return static_cast<int>(d);
      }
    }
    return -1;
  }

  // Outputs mode with loop `jam` inside the reduced loops: the other output
  // loops in parallel, the lanes, accumulator arrays indexed by the jammed
  // loop's variable, and that loop again around the stores.
  void render_jammed(size_t jam) {
    size_t indent = 1;
    const size_t n = k_.loops.size();
    std::vector<Loop> outer;
    for (size_t d = 0; d + 1 < n; ++d)
      if (d != jam) outer.push_back(k_.loops[d]);
    for (size_t d = 0; d < outer.size(); ++d) open_loop(indent, outer[d], d == 0 ? parallel_pragma(outer.size()) : "");
    new_scope();
    // Where the row holds at least one full vector, its last chunk is the
    // row's last kLanes elements (overlapping the chunk before; those outputs
    // are computed again, alike): every load and store is a full vector, not
    // a partial copy (28 outputs per row were 16 + 12, and the 12-lane loads
    // went through a copy of variable length).
    const Loop& lanes = k_.loops.back();
    if (std::optional<int64_t> e = lanes.extent.constant(); e && *e >= 16) {
      const std::string extent = paren_index(lanes.extent);
      const std::string chunk = lanes.var + "_";
      if (outer.empty() && !parallel_pragma(1).empty()) emit(indent, parallel_pragma(1));
      emit(indent++, "for (int64_t " + chunk + " = 0; " + chunk + " < " + extent + "; " + chunk + " += kv::kLanes) {");
      emit(indent, "const int64_t " + lanes.var + " = " + chunk + " + kv::kLanes <= " + extent + " ? " + chunk + " : " +
                       extent + " - kv::kLanes;");
      emit(indent, "const long n_ = kv::kLanes;");
    } else {
      open_lane_loop(indent, lanes, outer.empty() ? parallel_pragma(1) : "");
    }
    in_lanes_ = true;
    // The jammed loop is written out, one copy per iteration with its own
    // accumulator variables: GCC keeps an indexed array of them in memory.
    const Loop& j = k_.loops[jam];
    const int64_t copies = *j.extent.constant();
    auto acc_name = [](size_t r, int64_t c) { return numbered("acc", static_cast<int64_t>(r)) + "_" + std::to_string(c); };
    for (size_t r = 0; r < k_.reductions.size(); ++r)
      for (int64_t c = 0; c < copies; ++c)
        emit(indent, "kv::vf " + acc_name(r, c) + " = kv::set1(" + identity(k_.reductions[r].op) + ");");
    const size_t base = indent;
    for (const Loop& l : k_.reduce_loops) open_loop(indent, l, "");
    new_scope();
    // Loads the jammed loop does not change, read once before its copies.
    std::vector<ScalarExpr> shared;
    for (size_t i = 0; i < k_.loads.size(); ++i)
      if (!k_.loads[i].flat().uses(j.var) && !hoisted_.count(static_cast<int>(i)))
        shared.push_back(ScalarExpr::input(static_cast<int>(i)));
    if (!shared.empty()) compute(indent, shared, {});
    const auto shared_temps = temps_;
    const auto shared_operands = operands_;
    std::vector<ScalarExpr> values;
    for (const Reduction& r : k_.reductions) values.push_back(r.value);
    for (int64_t c = 0; c < copies; ++c) {
      temps_ = shared_temps;
      operands_ = shared_operands;
      emit(indent++, "{");
      emit(indent, "const int64_t " + j.var + " = " + std::to_string(c) + ";");
      std::vector<Value> v = compute(indent, values, {});
      for (size_t r = 0; r < k_.reductions.size(); ++r)
        render_combine(indent, k_.reductions[r].op, acc_name(r, c), as_float(v[r]));
      emit(--indent, "}");
    }
    close_to(indent, base);
    for (int64_t c = 0; c < copies; ++c) {
      emit(indent++, "{");
      emit(indent, "const int64_t " + j.var + " = " + std::to_string(c) + ";");
      new_scope();
      std::vector<std::string> accs;
      for (size_t r = 0; r < k_.reductions.size(); ++r) accs.push_back(acc_name(r, c));
      render_stores(indent, accs);
      emit(--indent, "}");
    }
    close_to(indent, 1);
  }

  // Lanes over the innermost output loop; reductions (if any) run their
  // reduced loops inside, one accumulator lane per output.
  void render_outputs_mode() {
    if (int jam = jam_loop(); jam >= 0) {
      render_jammed(static_cast<size_t>(jam));
      return;
    }
    size_t indent = 1;
    size_t n = k_.loops.size();
    if (n > 1) open_parallel_loops(indent, n - 1);
    // Outside the vector loop, invariant loads read as one broadcast value.
    new_scope();
    hoist_lane_invariant_computations(indent);
    if (n > 0) {
      open_lane_loop(indent, k_.loops.back(), n == 1 ? parallel_pragma(1) : "");
    } else {
      emit(indent++, "{");
      emit(indent, "const long n_ = 1;");
      emit(indent, "(void)n_;");
    }
    in_lanes_ = !vec_var_.empty();
    std::vector<std::string> accs;
    if (k_.is_reduction()) {
      size_t base = indent;
      accs = declare_accumulators(indent, true, "");
      for (const Loop& l : k_.reduce_loops) open_loop(indent, l, "");
      new_scope();
      std::vector<ScalarExpr> values;
      for (const Reduction& r : k_.reductions) values.push_back(r.value);
      std::vector<Value> v = compute(indent, values, {});
      for (size_t j = 0; j < k_.reductions.size(); ++j) {
        const std::string& acc = accs[j];
        if (k_.reductions[j].op == ReduceOp::Welford) {
          render_welford(indent, acc, as_float(v[j]), true);
          continue;
        }
        render_combine(indent, k_.reductions[j].op, acc, as_float(v[j]));
      }
      close_to(indent, base);
      for (size_t j = 0; j < k_.reductions.size(); ++j) {
        if (k_.reductions[j].op != ReduceOp::Welford) continue;
        std::string acc = accs[j];
        emit(indent, "kv::vf " + acc + "_v;");
        emit(indent, "for (int l_ = 0; l_ < kv::kLanes; ++l_) " + acc + "_v[l_] = static_cast<float>(" + acc +
                         "_m2[l_]);");
        accs[j] = acc + "_v";
      }
      new_scope();
    }
    render_stores(indent, accs);  // in the scope of the hoisted computations
    close_to(indent, 1);
  }

  // Lanes over the innermost reduced loop: output loops scalar (in parallel),
  // vector accumulators reduced across lanes after the loop.
  void render_reduced_mode() {
    size_t indent = 1;
    open_parallel_loops(indent, k_.loops.size());
    if (k_.loops.empty()) emit(indent++, "{");
    size_t base = indent;
    std::vector<std::string> accs = declare_accumulators(indent, false, "_v");
    for (size_t d = 0; d + 1 < k_.reduce_loops.size(); ++d) open_loop(indent, k_.reduce_loops[d], "");
    open_lane_loop(indent, k_.reduce_loops.back(), "");
    in_lanes_ = true;
    new_scope();
    std::vector<ScalarExpr> values;
    for (const Reduction& r : k_.reductions) values.push_back(r.value);
    std::vector<Value> v = compute(indent, values, {});
    bool masked = false;
    for (size_t j = 0; j < k_.reductions.size(); ++j) {
      const std::string& acc = accs[j];
      ReduceOp op = k_.reductions[j].op;
      if (op == ReduceOp::Welford) {
        render_welford(indent, acc, as_float(v[j]), false);
        continue;
      }
      if (!masked) {
        emit(indent, "const kv::vi active_ = kv::first_lanes(n_);");
        masked = true;
      }
      render_combine(indent, op, acc + "_v",
                     "kv::select(active_, " + as_float(v[j]) + ", kv::set1(" + identity(op) + "))");
    }
    close_to(indent, base);
    in_lanes_ = false;
    std::vector<std::string> acc_values;
    for (size_t j = 0; j < k_.reductions.size(); ++j) {
      const std::string& acc = accs[j];
      ReduceOp op = k_.reductions[j].op;
      if (op == ReduceOp::Welford) {
        acc_values.push_back("kv::set1(static_cast<float>(" + acc + "))");
        continue;
      }
      emit(indent, "float " + acc + " = kv::lane(" + acc + "_v, 0);");
      emit(indent, "for (int l_ = 1; l_ < kv::kLanes; ++l_) {");
      emit(indent + 1, "const float x = kv::lane(" + acc + "_v, l_);");
      if (op == ReduceOp::Sum) emit(indent + 1, acc + " += x;");
      else if (op == ReduceOp::Max) emit(indent + 1, acc + " = " + acc + " != " + acc + " ? " + acc + " : x != x ? x : " + acc + " < x ? x : " + acc + ";");
      else emit(indent + 1, acc + " = " + acc + " != " + acc + " ? " + acc + " : x != x ? x : x < " + acc + " ? x : " + acc + ";");
      emit(indent, "}");
      acc_values.push_back("kv::set1(" + acc + ")");
    }
    new_scope();
    std::vector<std::string> acc_names;
    for (size_t j = 0; j < acc_values.size(); ++j) {
      std::string name = numbered("a", static_cast<int64_t>(j));
      emit(indent, "const kv::vf " + name + " = " + acc_values[j] + ";");
      acc_names.push_back(name);
    }
    render_stores(indent, acc_names);
    close_to(indent, 1);
  }
};

std::string covers_comment(const Graph* g, const Kernel& k) {
  std::string s = "// " + k.name + ":";
  for (int n : k.nodes) {
    s += " #" + std::to_string(n);
    if (g == nullptr) continue;
    const Node& node = g->nodes.at(static_cast<size_t>(n));
    s += std::string(" ") + op_name(node.op);
    if (!node.outputs.empty()) s += " -> %" + std::to_string(node.outputs[0]);
    if (!node.where.empty()) s += " (" + node.where + ")";
    s += ";";
  }
  return s + "\n";
}

}  // namespace

std::string kernel_symbol(const Kernel& k) { return "kiln_" + k.name; }

std::string region_symbol(size_t r) { return "kiln_" + numbered("r", static_cast<int64_t>(r)); }

std::string render_cpp_kernel(const Kernel& k, bool in_region) { return VectorRenderer(k, in_region).render(); }

std::string render_cpp(const LoopProgram& p) {
  std::string s = "// Generated by kiln (compiler/codegen/cpp/render_cpp.cpp) from graph " +
                  (p.graph ? p.graph->name : "") + ".\n" + jit_vector_prelude() + "\nnamespace kiln_generated {\n\n";
  std::vector<bool> in_region(p.kernels.size(), false);
  for (const std::vector<int>& r : p.regions)
    for (int k : r) in_region[static_cast<size_t>(k)] = true;
  for (size_t k = 0; k < p.kernels.size(); ++k)
    s += covers_comment(p.graph, p.kernels[k]) + render_cpp_kernel(p.kernels[k], in_region[k]) + "\n";
  // A region: bufs[j] is the buffer array of its j-th kernel.
  for (size_t r = 0; r < p.regions.size(); ++r) {
    s += "extern \"C\" void " + region_symbol(r) + "(void* const* const* bufs, const int64_t* sizes) {\n";
    s += "#pragma omp parallel\n  {\n";
    for (size_t j = 0; j < p.regions[r].size(); ++j)
      s += "    " + kernel_symbol(p.kernels.at(static_cast<size_t>(p.regions[r][j]))) + "(bufs[" + std::to_string(j) +
           "], sizes);\n";
    s += "  }\n}\n\n";
  }
  return s + "}  // namespace kiln_generated\n";
}

}  // namespace kiln::compiler::codegen
