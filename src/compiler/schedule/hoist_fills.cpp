// Fills first (hoist_fills.h).
#include "compiler/schedule/hoist_fills.h"

#include <algorithm>

namespace kiln::compiler::schedule {

using namespace lower;

namespace {
constexpr int64_t kMaxHoistedElements = 16;
}  // namespace

int hoist_fills(LoopProgram& p) {
  const Graph& g = *p.graph;
  auto is_fill = [&](const Step& st) {
    if (st.kind != Step::Kind::Extern) return false;
    const Node& n = g.nodes[static_cast<size_t>(st.node)];
    // Small ones only: a large fill moved up would hold its memory longer.
    return n.op == OpId::full && numel_of(g.type(n.outputs[0]).shape) <= kMaxHoistedElements &&
           std::all_of(n.inputs.begin(), n.inputs.end(), [](ValueId v) { return v == kNoValue; });
  };
  std::vector<Step> steps;
  for (const Step& st : p.steps)
    if (is_fill(st)) steps.push_back(st);
  const int moved = static_cast<int>(steps.size());
  for (const Step& st : p.steps)
    if (!is_fill(st)) steps.push_back(st);
  p.steps = std::move(steps);
  return moved;
}

}  // namespace kiln::compiler::schedule
