#include "compiler/passes/copy_back_removal.h"

#include "compiler/graph/rewrite.h"

namespace kiln::compiler {

int remove_unobserved_copy_backs(Graph& g) {
  const int N = static_cast<int>(g.nodes.size());
  // Per storage root: the last node reading any value of it (N: a graph output).
  std::vector<int> last_read(g.values.size(), -1);
  for (int i = 0; i < N; ++i)
    for (ValueId in : g.nodes[i].inputs)
      if (in != kNoValue) {
        ValueId r = alias_root(g, in);
        last_read[r] = std::max(last_read[r], i);
      }
  for (ValueId o : g.outputs) last_read[alias_root(g, o)] = N;
  std::vector<int> uses = use_counts(g);
  std::vector<bool> remove(g.nodes.size(), false);
  int removed = 0;
  for (int i = 0; i < N; ++i) {
    const Node& n = g.nodes[i];
    if (n.kind != NodeKind::Op || n.op != OpId::copy_ || uses[n.outputs[0]] != 0) continue;
    ValueId root = alias_root(g, n.inputs[0]);
    if (g.nodes[g.values[root].node].kind == NodeKind::Input) continue;  // the caller holds it
    if (last_read[root] > i) continue;  // read later (or returned)
    remove[i] = true;
    ++removed;
  }
  if (removed > 0) remove_nodes(g, remove);
  return removed;
}

}  // namespace kiln::compiler
