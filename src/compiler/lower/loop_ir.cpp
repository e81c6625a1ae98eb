// The loop IR's helpers and text form (loop_ir.h).
#include "compiler/lower/loop_ir.h"

#include <cstdio>
#include <unordered_map>
#include <unordered_set>

#include "kiln/error.h"

namespace kiln::compiler::lower {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Max: return "max";
    case ReduceOp::Min: return "min";
    case ReduceOp::Welford: return "welford";
  }
  return "?";
}

int Kernel::add_load(Load load) {
  std::string key = load.flat().str();
  for (size_t k = 0; k < loads.size(); ++k)
    if (loads[k].buffer == load.buffer && loads[k].flat().str() == key) return static_cast<int>(k);
  loads.push_back(std::move(load));
  KILN_ASSERT(loads.size() < static_cast<size_t>(kAccumulatorBase), "Kernel::add_load: too many loads");
  return static_cast<int>(loads.size()) - 1;
}

std::string numbered(const char* prefix, int64_t n) {
  std::string s = prefix;
  s += std::to_string(n);
  return s;
}

IndexExpr size_expr(const ValueType& t, size_t d) {
  return is_symbolic(t, d) ? IndexExpr::symbol("s0") : IndexExpr(t.shape.at(d));
}

std::vector<IndexExpr> size_exprs(const ValueType& t) {
  std::vector<IndexExpr> s;
  for (size_t d = 0; d < t.shape.size(); ++d) s.push_back(size_expr(t, d));
  return s;
}

ScalarExpr map_inputs(const ScalarExpr& e, const std::function<ScalarExpr(int)>& with) {
  std::unordered_map<const void*, ScalarExpr> memo;
  std::function<ScalarExpr(const ScalarExpr&)> go = [&](const ScalarExpr& x) -> ScalarExpr {
    if (auto it = memo.find(x.id()); it != memo.end()) return it->second;
    ScalarExpr r;
    if (x.op() == ExprOp::Input) r = with(x.input_index());
    else if (x.op() == ExprOp::Constant) r = x;
    else if (x.op() == ExprOp::Cast) r = ScalarExpr::cast(go(x.args()[0]), x.cast_dtype());
    else {
      std::vector<ScalarExpr> args;
      for (const ScalarExpr& a : x.args()) args.push_back(go(a));
      r = ScalarExpr::make(x.op(), std::move(args));
    }
    memo.emplace(x.id(), r);
    return r;
  };
  return go(e);
}

std::vector<ScalarExpr> expressions(const Kernel& k) {
  std::vector<ScalarExpr> e;
  for (const Reduction& r : k.reductions) e.push_back(r.value);
  for (const Store& s : k.stores) e.push_back(s.value);
  return e;
}

void map_expressions(Kernel& k, const std::function<ScalarExpr(int)>& with) {
  for (Reduction& r : k.reductions) r.value = map_inputs(r.value, with);
  for (Store& s : k.stores) s.value = map_inputs(s.value, with);
}

void remove_unused_operands(Kernel& k) {
  std::vector<bool> used_load(k.loads.size(), false), used_index(k.index_values.size(), false);
  std::vector<ScalarExpr> roots = expressions(k);
  for (const ScalarExpr& root : roots)
    map_inputs(root, [&](int i) {
      if (i >= kIndexValueBase) used_index[static_cast<size_t>(i - kIndexValueBase)] = true;
      else if (i < kAccumulatorBase) used_load[static_cast<size_t>(i)] = true;
      return ScalarExpr::input(i);
    });
  std::vector<int> load_to(k.loads.size(), -1), index_to(k.index_values.size(), -1);
  std::vector<Load> loads;
  for (size_t i = 0; i < k.loads.size(); ++i)
    if (used_load[i]) {
      load_to[i] = static_cast<int>(loads.size());
      loads.push_back(k.loads[i]);
    }
  std::vector<IndexExpr> index_values;
  for (size_t i = 0; i < k.index_values.size(); ++i)
    if (used_index[i]) {
      index_to[i] = static_cast<int>(index_values.size());
      index_values.push_back(k.index_values[i]);
    }
  map_expressions(k, [&](int i) {
    if (i >= kIndexValueBase) return ScalarExpr::input(kIndexValueBase + index_to[static_cast<size_t>(i - kIndexValueBase)]);
    if (i >= kAccumulatorBase) return ScalarExpr::input(i);
    return ScalarExpr::input(load_to[static_cast<size_t>(i)]);
  });
  k.loads = std::move(loads);
  k.index_values = std::move(index_values);
}

std::vector<ScalarExpr> ssa_order(const std::vector<ScalarExpr>& roots) {
  std::vector<ScalarExpr> order;
  std::unordered_set<const void*> seen;
  std::function<void(const ScalarExpr&)> visit = [&](const ScalarExpr& x) {
    if (x.op() == ExprOp::Input || x.op() == ExprOp::Constant || !seen.insert(x.id()).second) return;
    for (const ScalarExpr& a : x.args()) visit(a);
    order.push_back(x);
  };
  for (const ScalarExpr& r : roots) visit(r);
  return order;
}

namespace {

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

struct KernelPrinter {
  const Kernel& k;
  std::string out;
  std::unordered_map<const void*, std::string> temps;
  int next_temp = 0;

  std::string operand(int i) const {
    if (i >= kIndexValueBase) return k.index_values.at(static_cast<size_t>(i - kIndexValueBase)).str();
    if (i >= kAccumulatorBase) return numbered("acc", static_cast<int64_t>(i - kAccumulatorBase));
    const Load& l = k.loads.at(static_cast<size_t>(i));
    return numbered("%", l.buffer) + "[" + l.flat().str() + "]";
  }
  std::string name(const ScalarExpr& x) const {
    if (x.op() == ExprOp::Input) return operand(x.input_index());
    if (x.op() == ExprOp::Constant) return number(x.constant());
    return temps.at(x.id());
  }
  void line(int depth, const std::string& s) { out += std::string(2 * static_cast<size_t>(depth), ' ') + s + "\n"; }
  // Temporaries for the expressions' nodes; returns the roots' names.
  std::vector<std::string> compute(int depth, const std::vector<ScalarExpr>& roots) {
    for (const ScalarExpr& x : ssa_order(roots)) {
      if (temps.count(x.id())) continue;
      std::string t = numbered("t", static_cast<int64_t>(next_temp++));
      std::string s = t + " = " + expr_op_name(x.op());
      if (x.op() == ExprOp::Cast) s += std::string("<") + dtype_name(x.cast_dtype()) + ">";
      s += "(";
      for (size_t a = 0; a < x.args().size(); ++a) s += (a ? ", " : "") + name(x.args()[a]);
      line(depth, s + ")");
      temps.emplace(x.id(), t);
    }
    std::vector<std::string> names;
    for (const ScalarExpr& r : roots) names.push_back(name(r));
    return names;
  }
};

}  // namespace

std::string print(const Kernel& k) {
  KernelPrinter p{k, {}, {}, 0};
  std::string covers;
  for (int n : k.nodes) covers += (covers.empty() ? "" : ", ") + std::to_string(n);
  p.line(0, "kernel " + k.name + " covers #" + covers + " {");
  int depth = 1;
  for (const Loop& l : k.loops) p.line(depth++, "for " + l.var + " in [0, " + l.extent.str() + "):");
  if (k.is_reduction()) {
    for (size_t j = 0; j < k.reductions.size(); ++j)
      p.line(depth, numbered("acc", static_cast<int64_t>(j)) + " = " + reduce_op_name(k.reductions[j].op) + " identity");
    int rdepth = depth;
    for (const Loop& l : k.reduce_loops) p.line(rdepth++, "for " + l.var + " in [0, " + l.extent.str() + "):  # reduce");
    std::vector<ScalarExpr> values;
    for (const Reduction& r : k.reductions) values.push_back(r.value);
    std::vector<std::string> names = p.compute(rdepth, values);
    for (size_t j = 0; j < k.reductions.size(); ++j) {
      std::string acc = numbered("acc", static_cast<int64_t>(j));
      p.line(rdepth, acc + " = " + reduce_op_name(k.reductions[j].op) + "(" + acc + ", " + names[j] + ")");
    }
    // The stores' temporaries are computed after the reduced loops.
    p.temps.clear();
  }
  std::vector<ScalarExpr> values;
  for (const Store& s : k.stores) values.push_back(s.value);
  std::vector<std::string> names = p.compute(depth, values);
  for (size_t j = 0; j < k.stores.size(); ++j)
    p.line(depth, numbered("%", k.stores[j].buffer) + "[" + k.stores[j].flat().str() + "] = " + names[j]);
  p.line(0, "}");
  return p.out;
}

std::string print(const LoopProgram& p) {
  std::string out;
  for (const Step& s : p.steps) {
    switch (s.kind) {
      case Step::Kind::Kernel: {
        for (size_t r = 0; r < p.regions.size(); ++r) {
          if (p.regions[r].front() != s.kernel) continue;
          out += "region " + numbered("r", static_cast<int64_t>(r)) + " (one parallel region):";
          for (int k : p.regions[r]) out += " " + p.kernels.at(static_cast<size_t>(k)).name;
          out += "\n";
        }
        const Kernel& k = p.kernels.at(static_cast<size_t>(s.kernel));
        out += print(k);
        for (const Store& x : k.stores)
          if (static_cast<size_t>(x.buffer) < p.stored_into.size() && p.stored_into[static_cast<size_t>(x.buffer)] != kNoValue)
            out += "  # " + numbered("%", x.buffer) + " is stored in " +
                   numbered("%", p.stored_into[static_cast<size_t>(x.buffer)]) + "'s memory (its copy-back)\n";
        break;
      }
      case Step::Kind::Extern:
      case Step::Kind::View: {
        const Node& n = p.graph->nodes.at(static_cast<size_t>(s.node));
        std::string outs;
        for (ValueId v : n.outputs) outs += (outs.empty() ? "" : ", ") + numbered("%", v);
        std::string ins;
        for (ValueId v : n.inputs) ins += (ins.empty() ? "" : ", ") + (v == kNoValue ? std::string("None") : numbered("%", v));
        out += std::string(s.kind == Step::Kind::View ? "view " : "extern ") + outs + " = " + op_name(n.op) + "(" +
               ins + ")  # #" + std::to_string(s.node) + "\n";
        break;
      }
    }
  }
  return out;
}

}  // namespace kiln::compiler::lower
