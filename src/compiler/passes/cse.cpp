// Common-subexpression elimination (cse.h).
#include "compiler/passes/cse.h"

#include <functional>
#include <unordered_map>

#include "compiler/graph/rewrite.h"

namespace kiln::compiler {
namespace {

size_t node_hash(const Node& n) {
  size_t h = std::hash<int>()(static_cast<int>(n.op));
  auto mix = [&](size_t x) { h ^= x + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2); };
  mix(n.attrs.hash());
  for (ValueId v : n.inputs) mix(std::hash<ValueId>()(v));
  for (const AttrInput& a : n.attr_inputs) {
    mix(std::hash<std::string_view>()(a.attr));
    mix(std::hash<int>()(a.scalar_index));
  }
  return h;
}

bool same_computation(const Node& a, const Node& b) {
  return a.op == b.op && a.inputs == b.inputs && a.attr_inputs == b.attr_inputs && a.attrs == b.attrs &&
         a.outputs.size() == b.outputs.size();
}

bool mergeable(const Node& n, const std::vector<bool>& mutated) {
  if (n.kind != NodeKind::Op) return false;
  OpKind kind = op_kind(n.op);
  if (kind == OpKind::Random || kind == OpKind::Inplace || has_side_effects(n)) return false;
  for (ValueId v : n.inputs)
    if (v != kNoValue && mutated[static_cast<size_t>(v)]) return false;
  for (ValueId v : n.outputs)
    if (mutated[static_cast<size_t>(v)]) return false;
  return true;
}

}  // namespace

void eliminate_common_subexpressions(Graph& g) {
  const std::vector<bool> mutated = mutated_storage(g);
  std::vector<bool> is_output(g.values.size(), false);
  for (ValueId v : g.outputs) is_output[static_cast<size_t>(v)] = true;
  // Two outputs the caller gets as separate tensors stay separate.
  auto both_outputs = [&](const Node& a, const Node& b) {
    for (size_t k = 0; k < a.outputs.size(); ++k)
      if (is_output[static_cast<size_t>(a.outputs[k])] && is_output[static_cast<size_t>(b.outputs[k])]) return true;
    return false;
  };
  // Reads are renamed as the walk goes, so a merge exposes the next one
  // (relu(a) == relu(b) once a and b merged) in a single pass.
  ForwardReplacer replacer(g);
  std::unordered_multimap<size_t, size_t> seen;  // hash -> node index
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& n = g.nodes[i];
    replacer.rename_inputs(n);
    if (!mergeable(n, mutated)) continue;
    size_t h = node_hash(n);
    auto [begin, end] = seen.equal_range(h);
    const Node* earlier = nullptr;
    for (auto it = begin; it != end && earlier == nullptr; ++it)
      if (same_computation(g.nodes[it->second], n) && !both_outputs(g.nodes[it->second], n))
        earlier = &g.nodes[it->second];
    if (earlier == nullptr) {
      seen.emplace(h, i);
      continue;
    }
    replacer.replace(g, i, earlier->outputs);
  }
  replacer.finish(g);
}

}  // namespace kiln::compiler
