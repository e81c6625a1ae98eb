// Horizontal fusion (fuse_horizontal.h).
#include "compiler/schedule/fuse_horizontal.h"

#include <algorithm>
#include <optional>

#include "compiler/schedule/step_writes.h"

namespace kiln::compiler::schedule {

using namespace lower;

namespace {

constexpr size_t kMaxExpressionNodes = 256;

bool same_loops(const std::vector<Loop>& a, const std::vector<Loop>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].var != b[i].var || !(a[i].extent == b[i].extent)) return false;
  return true;
}

// The store of pointwise kernel k that load l reads element for element
// (the same buffer at the same coordinates), or nullptr.
const Store* same_element_store(const Kernel& k, const Load& l) {
  if (k.is_reduction()) return nullptr;
  for (const Store& st : k.stores)
    if (st.buffer == l.buffer) return st.coords == l.coords && st.sizes == l.sizes ? &st : nullptr;
  return nullptr;
}

// C's operands renumbered into K; C's stores appended. A load of a value K
// stores (element for element: same_element_store) reads K's expression
// for it instead.
void join(Kernel& k, const Kernel& c) {
  const int acc_offset = static_cast<int>(k.reductions.size());
  std::vector<int> load_to;
  std::vector<std::optional<ScalarExpr>> computed(c.loads.size());
  for (size_t i = 0; i < c.loads.size(); ++i) {
    if (const Store* st = same_element_store(k, c.loads[i])) computed[i] = st->value;
    load_to.push_back(computed[i] ? -1 : k.add_load(c.loads[i]));
  }
  const int index_offset = static_cast<int>(k.index_values.size());
  k.index_values.insert(k.index_values.end(), c.index_values.begin(), c.index_values.end());
  auto renumber = [&](int i) {
    if (i >= kIndexValueBase) return ScalarExpr::input(i + index_offset);
    if (i >= kAccumulatorBase) return ScalarExpr::input(i + acc_offset);
    if (const auto& e = computed.at(static_cast<size_t>(i))) return *e;
    return ScalarExpr::input(load_to.at(static_cast<size_t>(i)));
  };
  for (const Reduction& r : c.reductions) k.reductions.push_back({r.op, map_inputs(r.value, renumber)});
  for (const Store& s : c.stores) {
    k.stores.push_back(s);
    k.stores.back().value = map_inputs(s.value, renumber);
  }
  k.nodes.insert(k.nodes.end(), c.nodes.begin(), c.nodes.end());
  std::sort(k.nodes.begin(), k.nodes.end());
}

}  // namespace

void fuse_horizontal(LoopProgram& p) {
  const Graph& g = *p.graph;
  StepWrites writes(p);
  // The step that defines each value (-1: a graph input or constant).
  std::vector<int> defined_at(g.values.size(), -1);
  for (size_t s = 0; s < p.steps.size(); ++s) {
    const Step& st = p.steps[s];
    if (st.kind == Step::Kind::Kernel) {
      for (const Store& x : p.kernels[static_cast<size_t>(st.kernel)].stores) defined_at[static_cast<size_t>(x.buffer)] = static_cast<int>(s);
    } else {
      for (ValueId v : g.nodes[static_cast<size_t>(st.node)].outputs) defined_at[static_cast<size_t>(v)] = static_cast<int>(s);
    }
  }
  std::vector<bool> removed(p.steps.size(), false);
  for (size_t s = 0; s < p.steps.size(); ++s) {
    if (removed[s] || p.steps[s].kind != Step::Kind::Kernel) continue;
    Kernel& k = p.kernels[static_cast<size_t>(p.steps[s].kernel)];
    for (size_t t = s + 1; t < p.steps.size(); ++t) {
      if (removed[t] || p.steps[t].kind != Step::Kind::Kernel) continue;
      const Kernel& c = p.kernels[static_cast<size_t>(p.steps[t].kernel)];
      if (!same_loops(k.loops, c.loops) || !same_loops(k.reduce_loops, c.reduce_loops)) continue;
      // Every buffer C reads exists when K runs, or K computes it element
      // for element (a pointwise chain whose middle value is also kept: the
      // optimizer's new momentum buffer, read by the parameter update and
      // copied back into the buffer).
      bool ready = std::all_of(c.loads.begin(), c.loads.end(), [&](const Load& l) {
        return defined_at[static_cast<size_t>(l.buffer)] < static_cast<int>(s) || same_element_store(k, l) != nullptr;
      });
      if (!ready || writes.written_between(c.loads, s, t)) continue;
      std::vector<ScalarExpr> all = expressions(k);
      for (const ScalarExpr& e : expressions(c)) all.push_back(e);
      if (ssa_order(all).size() > kMaxExpressionNodes) continue;
      join(k, c);
      for (const Store& x : c.stores) defined_at[static_cast<size_t>(x.buffer)] = static_cast<int>(s);
      removed[t] = true;
    }
  }
  // Drop the joined kernels' steps and the kernels; rename the rest.
  std::vector<Step> steps;
  std::vector<Kernel> kernels;
  for (size_t s = 0; s < p.steps.size(); ++s) {
    if (removed[s]) continue;
    Step st = p.steps[s];
    if (st.kind == Step::Kind::Kernel) {
      kernels.push_back(std::move(p.kernels[static_cast<size_t>(st.kernel)]));
      kernels.back().name = numbered("k", static_cast<int64_t>(kernels.size()) - 1);
      st.kernel = static_cast<int>(kernels.size()) - 1;
    }
    steps.push_back(st);
  }
  p.kernels = std::move(kernels);
  p.steps = std::move(steps);
}

}  // namespace kiln::compiler::schedule
