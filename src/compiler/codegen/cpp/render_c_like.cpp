// The C-like kernel renderer (render_c_like.h).
#include "compiler/codegen/cpp/render_c_like.h"

#include <algorithm>
#include <unordered_map>

#include "kiln/error.h"

namespace kiln::compiler::codegen {

using namespace lower;

const char* pointer_declarator(const Kernel& k, ValueId v) {
  return std::find(k.aliased.begin(), k.aliased.end(), v) != k.aliased.end() ? "* " : "* __restrict__ ";
}

std::vector<ValueId> kernel_buffers(const Kernel& k) {
  std::vector<ValueId> b;
  for (const Load& l : k.loads)
    if (std::find(b.begin(), b.end(), l.buffer) == b.end()) b.push_back(l.buffer);
  for (const Store& s : k.stores) {
    KILN_ASSERT(std::find(b.begin(), b.end(), s.buffer) == b.end(), "kernel ", k.name, " loads the buffer it stores");
    b.push_back(s.buffer);
  }
  return b;
}

const char* c_element_type(DType t) {
  switch (t) {
    case DType::Float32: return "float";
    case DType::Bool: return "bool";
    case DType::Float64: return "double";  // 0-dim numbers read as floats
    case DType::Int64: return "int64_t";
    case DType::Int32: return "int32_t";
    default: break;
  }
  KILN_ASSERT(false, "c_element_type: no kernel buffers of ", dtype_name(t));
  return nullptr;
}

std::string CLikeRenderer::c_index(const IndexExpr& e) { return e.str(); }

struct CLikeRenderer::State {
  const Kernel& k;
  std::vector<ValueId> buffers;
  std::string out;
  std::unordered_map<const void*, std::string> temps;
  int next_temp = 0;

  std::string buffer_name(ValueId v) const {
    auto it = std::find(buffers.begin(), buffers.end(), v);
    return numbered("b", it - buffers.begin());
  }
};

void CLikeRenderer::emit(State& s, size_t indent, const std::string& line) const {
  s.out += std::string(2 * indent, ' ') + line + "\n";
}

std::string CLikeRenderer::operand(const State& s, int i) const {
  if (i >= kIndexValueBase)
    return "static_cast<float>(" + c_index(s.k.index_values.at(static_cast<size_t>(i - kIndexValueBase))) + ")";
  if (i >= kAccumulatorBase) return numbered("acc", i - kAccumulatorBase);
  const Load& l = s.k.loads.at(static_cast<size_t>(i));
  std::string load = s.buffer_name(l.buffer) + "[" + c_index(l.flat()) + "]";
  return l.dtype == DType::Float32 ? load : "static_cast<float>(" + load + ")";
}

std::vector<std::string> CLikeRenderer::compute(State& s, size_t indent, const std::vector<ScalarExpr>& roots) const {
  auto name = [&](const ScalarExpr& x) -> std::string {
    if (x.op() == ExprOp::Input) return operand(s, x.input_index());
    if (x.op() == ExprOp::Constant) return render_c(x, {});
    return s.temps.at(x.id());
  };
  for (const ScalarExpr& x : ssa_order(roots)) {
    if (s.temps.count(x.id())) continue;
    // One node over placeholders: render_c writes the op's C text.
    std::vector<std::string> args;
    std::vector<ScalarExpr> placeholders;
    for (size_t a = 0; a < x.args().size(); ++a) {
      args.push_back(name(x.args()[a]));
      placeholders.push_back(ScalarExpr::input(static_cast<int>(a)));
    }
    ScalarExpr node = x.op() == ExprOp::Cast ? ScalarExpr::cast(placeholders[0], x.cast_dtype())
                                             : ScalarExpr::make(x.op(), placeholders);
    std::string t = numbered("t", s.next_temp++);
    emit(s, indent, "const float " + t + " = " + render_c(node, args) + ";");
    s.temps.emplace(x.id(), t);
  }
  std::vector<std::string> names;
  for (const ScalarExpr& r : roots) names.push_back(name(r));
  return names;
}

namespace {

std::string acc_name(size_t j) { return numbered("acc", static_cast<int64_t>(j)); }

std::string identity(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "0.0f";
    case ReduceOp::Max: return "-INFINITY";
    case ReduceOp::Min: return "INFINITY";
    case ReduceOp::Welford: return "0.0";
  }
  return "0.0f";
}

// The combining step, from the op's formula (NaN-propagating max and min as
// the eager amax/amin).
ScalarExpr combine(ReduceOp op) {
  ScalarExpr acc = ScalarExpr::input(0), v = ScalarExpr::input(1);
  switch (op) {
    case ReduceOp::Sum: return acc + v;
    case ReduceOp::Max: return pointwise_expr(OpId::maximum, {}, 2);
    case ReduceOp::Min: return pointwise_expr(OpId::minimum, {}, 2);
    case ReduceOp::Welford: break;  // written out in render()
  }
  return acc + v;
}

}  // namespace

std::string CLikeRenderer::render(const Kernel& k) {
  State s{k, kernel_buffers(k), {}, {}, 0};
  s.out = signature(k);
  for (size_t b = 0; b < s.buffers.size(); ++b) {
    ValueId v = s.buffers[b];
    bool stored = std::any_of(k.stores.begin(), k.stores.end(), [&](const Store& st) { return st.buffer == v; });
    DType t = stored ? std::find_if(k.stores.begin(), k.stores.end(), [&](const Store& st) { return st.buffer == v; })->dtype
                     : std::find_if(k.loads.begin(), k.loads.end(), [&](const Load& l) { return l.buffer == v; })->dtype;
    std::string type = std::string(stored ? "" : "const ") + c_element_type(t);
    emit(s, 1, type + pointer_declarator(k, v) + "b" + std::to_string(b) + " = static_cast<" + type + "*>(bufs[" +
                   std::to_string(b) + "]);  // %" + std::to_string(v));
  }
  emit(s, 1, "const int64_t s0 = sizes[0];");
  emit(s, 1, "(void)s0;");
  size_t indent = 1;
  for (size_t d = 0; d < k.loops.size(); ++d) {
    bool innermost = d + 1 == k.loops.size() && !k.is_reduction();
    std::string prefix = output_loop_prefix(k, d, innermost);
    if (!prefix.empty()) emit(s, indent, prefix);
    const Loop& l = k.loops[d];
    emit(s, indent++, "for (int64_t " + l.var + " = 0; " + l.var + " < " + c_index(l.extent) + "; ++" + l.var + ") {");
  }
  if (k.is_reduction()) {
    std::vector<std::string> sums;
    for (size_t j = 0; j < k.reductions.size(); ++j) {
      if (k.reductions[j].op == ReduceOp::Welford) {
        // M2 with its running mean and count, in double.
        emit(s, indent, "double " + acc_name(j) + " = 0.0, " + acc_name(j) + "_mean = 0.0;");
        emit(s, indent, "int64_t " + acc_name(j) + "_n = 0;");
        continue;
      }
      emit(s, indent, "float " + acc_name(j) + " = " + identity(k.reductions[j].op) + ";");
      if (k.reductions[j].op == ReduceOp::Sum) sums.push_back(acc_name(j));
    }
    size_t rindent = indent;
    for (size_t d = 0; d < k.reduce_loops.size(); ++d) {
      std::string prefix = reduce_loop_prefix(k, d, d + 1 == k.reduce_loops.size(), sums);
      if (!prefix.empty()) emit(s, rindent, prefix);
      const Loop& l = k.reduce_loops[d];
      emit(s, rindent++, "for (int64_t " + l.var + " = 0; " + l.var + " < " + c_index(l.extent) + "; ++" + l.var + ") {");
    }
    std::vector<ScalarExpr> values;
    for (const Reduction& r : k.reductions) values.push_back(r.value);
    std::vector<std::string> names = compute(s, rindent, values);
    for (size_t j = 0; j < k.reductions.size(); ++j) {
      const std::string acc = acc_name(j);
      if (k.reductions[j].op == ReduceOp::Welford) {
        emit(s, rindent, "{");
        emit(s, rindent + 1, "const double x = " + names[j] + ";");
        emit(s, rindent + 1, "const double delta = x - " + acc + "_mean;");
        emit(s, rindent + 1, acc + "_mean += delta / static_cast<double>(++" + acc + "_n);");
        emit(s, rindent + 1, acc + " += delta * (x - " + acc + "_mean);");
        emit(s, rindent, "}");
        continue;
      }
      std::vector<std::string> args = {acc, names[j]};
      emit(s, rindent, acc + " = " + render_c(combine(k.reductions[j].op), args) + ";");
    }
    while (rindent > indent) emit(s, --rindent, "}");
    s.temps.clear();  // the reduced loops' temporaries are out of scope
  }
  std::vector<ScalarExpr> values;
  for (const Store& st : k.stores) values.push_back(st.value);
  std::vector<std::string> names = compute(s, indent, values);
  for (size_t j = 0; j < k.stores.size(); ++j) {
    const Store& st = k.stores[j];
    std::string v = st.dtype == DType::Float32 ? names[j] : std::string("static_cast<") + c_element_type(st.dtype) + ">(" + names[j] + ")";
    emit(s, indent, s.buffer_name(st.buffer) + "[" + c_index(st.flat()) + "] = " + v + ";");
  }
  while (indent > 1) emit(s, --indent, "}");
  s.out += "}\n";
  return s.out;
}

}  // namespace kiln::compiler::codegen
