// Constant folding (constant_folding.h).
#include "compiler/passes/constant_folding.h"

#include <optional>

#include "compiler/graph/rewrite.h"
#include "ops/dispatch_mode.h"

namespace kiln::compiler {
namespace {

// Per value: its tensor when it is known at compile time (a Constant node's,
// or an already folded node's output).
using Known = std::vector<Tensor>;

bool foldable(const Graph& g, const Node& n, const Known& known, const std::vector<bool>& mutated) {
  if (n.kind != NodeKind::Op || !n.attr_inputs.empty() || has_side_effects(n)) return false;
  OpKind kind = op_kind(n.op);
  if (kind == OpKind::Random || kind == OpKind::Inplace || kind == OpKind::Composite) return false;
  for (ValueId v : n.inputs) {
    if (v == kNoValue) continue;
    if (!known[static_cast<size_t>(v)].defined() || mutated[static_cast<size_t>(v)]) return false;
  }
  for (ValueId v : n.outputs) {
    const ValueType& t = g.type(v);
    if (mutated[static_cast<size_t>(v)] || t.symbolic_dims != 0 || numel_of(t.shape) > kMaxFoldedElements)
      return false;
  }
  return true;
}

// The node's outputs computed now, or nothing when the op rejects its inputs
// or gives other types than recorded (run time then says why).
std::optional<Tensors> evaluate(const Graph& g, const Node& n, const Known& known) {
  Tensors args;
  for (ValueId v : n.inputs) args.push_back(v == kNoValue ? Tensor() : known[static_cast<size_t>(v)]);
  Tensors out;
  try {
    ExcludeModesGuard below_modes;  // a compile-time computation: no profiler, tape or capture sees it
    out = dispatch(n.op, args, n.attrs);
  } catch (const Error&) {
    return std::nullopt;
  }
  if (out.size() != n.outputs.size()) return std::nullopt;
  for (size_t k = 0; k < out.size(); ++k) {
    const ValueType& t = g.type(n.outputs[k]);
    if (out[k].shape() != t.shape || out[k].dtype() != t.dtype || out[k].device() != t.device) return std::nullopt;
  }
  return out;
}

}  // namespace

void fold_constants(Graph& g) {
  const std::vector<bool> mutated = mutated_storage(g);
  Known known(g.values.size());
  std::vector<Node> nodes;
  nodes.reserve(g.nodes.size());
  bool any = false;
  for (Node& n : g.nodes) {
    if (n.kind == NodeKind::Constant) known[static_cast<size_t>(n.outputs[0])] = n.constant;
    std::optional<Tensors> out;
    if (foldable(g, n, known, mutated)) out = evaluate(g, n, known);
    if (!out) {
      nodes.push_back(std::move(n));
      continue;
    }
    any = true;
    for (size_t k = 0; k < out->size(); ++k) {
      Node c;
      c.kind = NodeKind::Constant;
      c.constant = (*out)[k];
      c.outputs = {n.outputs[k]};
      c.where = n.where;
      known[static_cast<size_t>(c.outputs[0])] = c.constant;
      g.values[static_cast<size_t>(c.outputs[0])].type = ValueType::of(c.constant);
      nodes.push_back(std::move(c));
    }
  }
  g.nodes = std::move(nodes);
  if (any) reindex_values(g);
}

}  // namespace kiln::compiler
