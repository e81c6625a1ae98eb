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

ReadFacts::ReadFacts(const Graph& g) : uses_(use_counts(g)), mutated_(mutated_storage(g)), readers_(g.values.size()) {
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (ValueId v : g.nodes[i].inputs)
      if (v != kNoValue) readers_[static_cast<size_t>(v)].push_back(static_cast<int>(i));
}

void replace_all_uses(Graph& g, ValueId from, ValueId to) {
  for (Node& n : g.nodes)
    for (ValueId& v : n.inputs)
      if (v == from) v = to;
  for (ValueId& v : g.outputs)
    if (v == from) v = to;
}

ForwardReplacer::ForwardReplacer(const Graph& g) : renamed_(g.values.size()), remove_(g.nodes.size(), false) {
  for (size_t v = 0; v < renamed_.size(); ++v) renamed_[v] = static_cast<ValueId>(v);
}

void ForwardReplacer::rename_inputs(Node& node) const {
  for (ValueId& v : node.inputs)
    if (v != kNoValue) v = renamed_[static_cast<size_t>(v)];
}

void ForwardReplacer::replace(const Graph& g, size_t node_index, const std::vector<ValueId>& with) {
  const Node& n = g.nodes[node_index];
  KILN_ASSERT(with.size() == n.outputs.size(), "ForwardReplacer: one replacement per output");
  for (size_t k = 0; k < with.size(); ++k) renamed_[static_cast<size_t>(n.outputs[k])] = with[k];
  remove_[node_index] = any_ = true;
}

void ForwardReplacer::finish(Graph& g) {
  if (!any_) return;
  for (ValueId& v : g.outputs) v = renamed_[static_cast<size_t>(v)];
  remove_nodes(g, remove_);
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
    const Value& val = g.values[static_cast<size_t>(v)];
    const Node& n = g.nodes[static_cast<size_t>(val.node)];
    // The schema names the input output 0 shares storage with (views and
    // in-place ops: input 0).
    if (n.kind != NodeKind::Op || val.output_index != 0) break;
    int aliased = op_def(n.op).output0_aliases;
    if (aliased < 0 || static_cast<size_t>(aliased) >= n.inputs.size()) break;
    v = n.inputs[static_cast<size_t>(aliased)];
  }
  return v;
}

bool has_side_effects(const Node& node) { return node.kind == NodeKind::Op && !mutated_inputs(node).empty(); }

// The schema's mutated inputs that the node passes. An op with a `training`
// attribute (batch_norm) updates its running statistics only in training.
std::vector<size_t> mutated_inputs(const Node& node) {
  if (node.kind != NodeKind::Op) return {};
  uint32_t bits = op_def(node.op).mutated_inputs;
  if (bits == 0) return {};
  if (op_kind(node.op) != OpKind::Inplace && node.attrs.has("training") && !node.attrs.b("training")) return {};
  std::vector<size_t> written;
  for (size_t i = 0; i < node.inputs.size() && i < 32; ++i)
    if (((bits >> i) & 1u) != 0 && node.inputs[i] != kNoValue) written.push_back(i);
  return written;
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
