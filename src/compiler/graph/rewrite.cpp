// Graph surgery shared by the passes (rewrite.h).
#include "compiler/graph/rewrite.h"

namespace kiln::compiler {

std::vector<int> use_counts(const Graph& g) {
  std::vector<int> uses(g.values.size(), 0);
  for (const Node& n : g.nodes)
    for (ValueId v : n.inputs)
      if (v != kNoValue) ++uses.at(static_cast<size_t>(v));
  for (ValueId v : g.outputs) ++uses.at(static_cast<size_t>(v));
  return uses;
}

void replace_all_uses(Graph& g, ValueId from, ValueId to) {
  for (Node& n : g.nodes)
    for (ValueId& v : n.inputs)
      if (v == from) v = to;
  for (ValueId& v : g.outputs)
    if (v == from) v = to;
}

void reindex_values(Graph& g) {
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      Value& val = g.values.at(static_cast<size_t>(n.outputs[k]));
      val.node = static_cast<int>(i);
      val.output_index = static_cast<int>(k);
    }
  }
}

void remove_nodes(Graph& g, const std::vector<bool>& remove) {
  KILN_ASSERT(remove.size() == g.nodes.size(), "remove_nodes: one flag per node");
  // Reads by other removed nodes do not count.
  std::vector<int> uses = use_counts(g);
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (remove[i])
      for (ValueId v : g.nodes[i].inputs)
        if (v != kNoValue) --uses[static_cast<size_t>(v)];
  for (size_t i = 0; i < g.nodes.size(); ++i) {  // check all before changing anything
    if (!remove[i]) continue;
    const Node& n = g.nodes[i];
    KILN_ASSERT(n.kind != NodeKind::Input, "remove_nodes: cannot remove input ", n.input_index);
    for (ValueId v : n.outputs) KILN_ASSERT(uses[static_cast<size_t>(v)] == 0, "remove_nodes: %", v, " is still used");
  }
  std::vector<bool> keep_value(g.values.size(), false);
  std::vector<Node> kept;
  kept.reserve(g.nodes.size());
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& n = g.nodes[i];
    if (remove[i]) continue;
    for (ValueId v : n.outputs) keep_value[static_cast<size_t>(v)] = true;
    kept.push_back(std::move(n));
  }
  // Renumber densely, keeping the old order.
  std::vector<ValueId> renamed(g.values.size(), kNoValue);
  std::vector<Value> values;
  for (size_t v = 0; v < g.values.size(); ++v) {
    if (!keep_value[v]) continue;
    renamed[v] = static_cast<ValueId>(values.size());
    values.push_back(g.values[v]);
  }
  auto rename = [&](ValueId& v) {
    if (v == kNoValue) return;
    ValueId r = renamed.at(static_cast<size_t>(v));
    KILN_ASSERT(r != kNoValue, "remove_nodes: %", v, " is read but its node was removed");
    v = r;
  };
  for (Node& n : kept) {
    for (ValueId& v : n.inputs) rename(v);
    for (ValueId& v : n.outputs) rename(v);
  }
  for (ValueId& v : g.inputs) rename(v);
  for (ValueId& v : g.outputs) rename(v);
  g.nodes = std::move(kept);
  g.values = std::move(values);
  reindex_values(g);
}

ValueId alias_root(const Graph& g, ValueId v) {
  while (v != kNoValue) {
    const Node& n = g.producer(v);
    // A view shares its input's storage; an in-place op returns its input.
    if (n.kind != NodeKind::Op || n.inputs.empty()) break;
    OpKind kind = op_kind(n.op);
    if (kind != OpKind::View && kind != OpKind::Inplace) break;
    v = n.inputs[0];
  }
  return v;
}

bool has_side_effects(const Node& node) { return node.kind == NodeKind::Op && !mutated_inputs(node).empty(); }

// Until the op schema states what each op mutates (issue 8c), the two
// families that do are named here.
std::vector<size_t> mutated_inputs(const Node& node) {
  if (node.kind != NodeKind::Op) return {};
  if (op_kind(node.op) == OpKind::Inplace) return {0};
  if (node.op == OpId::batch_norm && node.attrs.has("training") && node.attrs.b("training")) {
    std::vector<size_t> stats;
    for (size_t i : {size_t{3}, size_t{4}})  // running_mean, running_var
      if (i < node.inputs.size() && node.inputs[i] != kNoValue) stats.push_back(i);
    return stats;
  }
  return {};
}

std::vector<bool> mutated_storage(const Graph& g) {
  std::vector<bool> root_mutated(g.values.size(), false);
  for (const Node& n : g.nodes)
    for (size_t i : mutated_inputs(n)) root_mutated[static_cast<size_t>(alias_root(g, n.inputs[i]))] = true;
  std::vector<bool> mutated(g.values.size(), false);
  for (size_t v = 0; v < g.values.size(); ++v)
    mutated[v] = root_mutated[static_cast<size_t>(alias_root(g, static_cast<ValueId>(v)))];
  return mutated;
}

}  // namespace kiln::compiler
