// Dead-code elimination (dead_code.h).
#include "compiler/passes/dead_code.h"

#include "compiler/graph/rewrite.h"

namespace kiln::compiler {

void eliminate_dead_code(Graph& g) {
  std::vector<bool> live(g.values.size(), false);
  for (ValueId v : g.outputs) live[static_cast<size_t>(v)] = true;
  std::vector<bool> remove(g.nodes.size(), false);
  bool any = false;
  // Backwards: a node is needed when a later needed node or the outputs read it.
  for (size_t i = g.nodes.size(); i-- > 0;) {
    const Node& n = g.nodes[i];
    if (n.kind == NodeKind::Input) continue;
    bool needed = has_side_effects(n);
    for (ValueId v : n.outputs) needed = needed || live[static_cast<size_t>(v)];
    if (!needed) {
      remove[i] = any = true;
      continue;
    }
    for (ValueId v : n.inputs)
      if (v != kNoValue) live[static_cast<size_t>(v)] = true;
  }
  if (any) remove_nodes(g, remove);
}

}  // namespace kiln::compiler
