// Storage written per step (step_writes.h).
#include "compiler/schedule/step_writes.h"

#include <algorithm>

#include "compiler/graph/rewrite.h"

namespace kiln::compiler::schedule {

using namespace lower;

StepWrites::StepWrites(const LoopProgram& p) : g_(*p.graph), roots_(p.steps.size()) {
  for (size_t s = 0; s < p.steps.size(); ++s) {
    if (p.steps[s].kind != Step::Kind::Extern) continue;
    const Node& n = g_.nodes[static_cast<size_t>(p.steps[s].node)];
    for (size_t i : mutated_inputs(n)) roots_[s].push_back(alias_root(g_, n.inputs[i]));
  }
}

bool StepWrites::written_between(const std::vector<Load>& reads, size_t from, size_t to) const {
  for (size_t s = from + 1; s < to && s < roots_.size(); ++s)
    for (ValueId written : roots_[s])
      for (const Load& l : reads)
        if (alias_root(g_, l.buffer) == written) return true;
  return false;
}

}  // namespace kiln::compiler::schedule
