// No-op removal (noop_removal.h).
#include "compiler/passes/noop_removal.h"

#include "compiler/graph/rewrite.h"

namespace kiln::compiler {
namespace {

// Constants larger than this are not scanned for all-zeros/all-ones.
constexpr int64_t kMaxScannedConstant = 4096;

bool is_contiguous(const ValueType& t) { return t.strides == contiguous_strides(t.shape); }

bool same_value_shape(const ValueType& a, const ValueType& b) {
  return a.shape == b.shape && a.dtype == b.dtype && a.device == b.device && a.symbolic_dims == b.symbolic_dims;
}

bool constant_equal_to(const Graph& g, ValueId v, double value) {
  const Node& n = g.producer(v);
  if (n.kind != NodeKind::Constant || n.constant.numel() > kMaxScannedConstant || n.constant.numel() == 0) return false;
  for (double x : n.constant.to_vector<double>())
    if (x != value) return false;
  return true;
}

// The input a pointwise no-op reproduces, or kNoValue.
ValueId arithmetic_identity(const Graph& g, const Node& n) {
  if (n.inputs.size() != 2 || n.inputs[0] == kNoValue || n.inputs[1] == kNoValue) return kNoValue;
  ValueId a = n.inputs[0], b = n.inputs[1];
  switch (n.op) {
    case OpId::add:
      if (constant_equal_to(g, b, 0.0)) return a;
      if (constant_equal_to(g, a, 0.0)) return b;
      return kNoValue;
    case OpId::mul:
      if (constant_equal_to(g, b, 1.0)) return a;
      if (constant_equal_to(g, a, 1.0)) return b;
      return kNoValue;
    case OpId::sub: return constant_equal_to(g, b, 0.0) ? a : kNoValue;
    case OpId::div: return constant_equal_to(g, b, 1.0) ? a : kNoValue;
    default: return kNoValue;
  }
}

// The value a node reproduces, or kNoValue. View results alias their input
// already, so only non-view results need the observability checks.
ValueId reproduced_value(const Graph& g, const Node& n) {
  if (n.kind != NodeKind::Op || n.outputs.size() != 1 || n.inputs.empty() || n.inputs[0] == kNoValue)
    return kNoValue;
  ValueId x = n.inputs[0];
  const ValueType& in = g.type(x);
  const ValueType& out = g.type(n.outputs[0]);
  if (op_kind(n.op) == OpKind::View) {
    if (n.op == OpId::as_strided) return kNoValue;  // may move the offset
    return same_value_shape(in, out) && in.strides == out.strides ? x : kNoValue;
  }
  if (n.op == OpId::cast) return n.attrs.has("dtype") && n.attrs.dtype("dtype") == in.dtype ? x : kNoValue;
  if (n.op == OpId::copy) return is_contiguous(in) && in.dtype == out.dtype ? x : kNoValue;
  ValueId r = arithmetic_identity(g, n);
  return r != kNoValue && same_value_shape(g.type(r), out) ? r : kNoValue;
}

bool is_caller_tensor(const Graph& g, ValueId v) {
  NodeKind k = g.producer(alias_root(g, v)).kind;
  return k == NodeKind::Input || k == NodeKind::Constant;
}

bool removal_unobservable(const Graph& g, const Node& n, ValueId x, const std::vector<bool>& mutated,
                          const std::vector<bool>& is_output) {
  if (op_kind(n.op) == OpKind::View) return true;
  ValueId y = n.outputs[0];
  if (mutated[static_cast<size_t>(x)] || mutated[static_cast<size_t>(y)]) return false;
  // The caller expects a fresh tensor, not its input, a constant or another output.
  return !(is_output[static_cast<size_t>(y)] && (is_caller_tensor(g, x) || is_output[static_cast<size_t>(x)]));
}

bool is_reshaping_view(OpId op) { return op == OpId::view || op == OpId::squeeze || op == OpId::unsqueeze; }

// view(view(x)) -> view(x) and permute(permute(x)) -> permute(x), in place;
// false when the node reads no such chain.
bool collapse_view_pair(const Graph& g, Node& n) {
  if (n.kind != NodeKind::Op || n.inputs.empty() || n.inputs[0] == kNoValue) return false;
  const Node& inner = g.producer(n.inputs[0]);
  if (inner.kind != NodeKind::Op || inner.inputs.empty() || inner.inputs[0] == kNoValue) return false;
  ValueId base = inner.inputs[0];
  if (n.op == OpId::view && is_reshaping_view(inner.op) && is_contiguous(g.type(base))) {
    n.inputs[0] = base;  // a contiguous base views as any shape of its size
  } else if (n.op == OpId::permute && inner.op == OpId::permute) {
    const std::vector<int64_t>& outer_dims = n.attrs.ints("dims");
    const std::vector<int64_t>& inner_dims = inner.attrs.ints("dims");
    int64_t rank = static_cast<int64_t>(inner_dims.size());
    if (static_cast<int64_t>(outer_dims.size()) != rank) return false;
    std::vector<int64_t> composed(outer_dims.size());
    for (size_t i = 0; i < outer_dims.size(); ++i) {
      int64_t d = outer_dims[i] < 0 ? outer_dims[i] + rank : outer_dims[i];
      if (d < 0 || d >= rank) return false;
      int64_t e = inner_dims[static_cast<size_t>(d)];
      composed[i] = e < 0 ? e + rank : e;
    }
    n.attrs.set("dims", composed);
    n.inputs[0] = base;
  } else {
    return false;
  }
  return true;
}

}  // namespace

void remove_noops(Graph& g) {
  const std::vector<bool> mutated = mutated_storage(g);
  std::vector<bool> is_output(g.values.size(), false);
  for (ValueId v : g.outputs) is_output[static_cast<size_t>(v)] = true;
  ForwardReplacer replacer(g);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& n = g.nodes[i];
    replacer.rename_inputs(n);
    if (n.kind != NodeKind::Op || has_side_effects(n)) continue;
    while (collapse_view_pair(g, n)) {
    }
    ValueId x = reproduced_value(g, n);
    if (x == kNoValue || !removal_unobservable(g, n, x, mutated, is_output)) continue;
    replacer.replace(g, i, {x});
  }
  replacer.finish(g);
}

}  // namespace kiln::compiler
