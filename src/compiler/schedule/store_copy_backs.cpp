// Copy-backs stored in place (store_copy_backs.h).
#include "compiler/schedule/store_copy_backs.h"

#include <algorithm>

#include "compiler/graph/rewrite.h"

namespace kiln::compiler::schedule {

using namespace lower;

namespace {

// The buffers a step reads (kernel loads, extern and view inputs) and
// writes in place, by alias root.
struct StepAccess {
  std::vector<ValueId> reads, writes;
};

std::vector<StepAccess> step_access(const LoopProgram& p) {
  const Graph& g = *p.graph;
  std::vector<StepAccess> a(p.steps.size());
  for (size_t s = 0; s < p.steps.size(); ++s) {
    const Step& st = p.steps[s];
    if (st.kind == Step::Kind::Kernel) {
      for (const Load& l : p.kernels[static_cast<size_t>(st.kernel)].loads) a[s].reads.push_back(alias_root(g, l.buffer));
      continue;
    }
    const Node& n = g.nodes[static_cast<size_t>(st.node)];
    for (ValueId v : n.inputs)
      if (v != kNoValue) a[s].reads.push_back(alias_root(g, v));
    for (size_t i : mutated_inputs(n)) a[s].writes.push_back(alias_root(g, n.inputs[i]));
  }
  return a;
}

bool contains(const std::vector<ValueId>& vs, ValueId v) { return std::find(vs.begin(), vs.end(), v) != vs.end(); }

// The store of `v` in k when it is at k's own loop coordinates (coordinate d
// is loop variable d, over the loop's extent).
const Store* own_coordinate_store(const Kernel& k, ValueId v) {
  if (k.is_reduction()) return nullptr;
  for (const Store& st : k.stores) {
    if (st.buffer != v) continue;
    if (st.coords.size() != k.loops.size()) return nullptr;
    for (size_t d = 0; d < st.coords.size(); ++d)
      if (!(st.coords[d] == IndexExpr::symbol(k.loops[d].var)) || !(st.sizes[d] == k.loops[d].extent)) return nullptr;
    return &st;
  }
  return nullptr;
}

}  // namespace

int store_copy_backs(LoopProgram& p) {
  const Graph& g = *p.graph;
  p.stored_into.assign(g.values.size(), kNoValue);
  const std::vector<StepAccess> access = step_access(p);
  // Per value: the kernel step storing it, and how many steps read it.
  std::vector<int> stored_at(g.values.size(), -1), readers(g.values.size(), 0);
  for (size_t s = 0; s < p.steps.size(); ++s) {
    const Step& st = p.steps[s];
    if (st.kind == Step::Kind::Kernel) {
      const Kernel& k = p.kernels[static_cast<size_t>(st.kernel)];
      for (const Store& x : k.stores) stored_at[static_cast<size_t>(x.buffer)] = static_cast<int>(s);
      std::vector<ValueId> seen;
      for (const Load& l : k.loads)
        if (!contains(seen, l.buffer)) seen.push_back(l.buffer), ++readers[static_cast<size_t>(l.buffer)];
    } else {
      for (ValueId v : g.nodes[static_cast<size_t>(st.node)].inputs)
        if (v != kNoValue) ++readers[static_cast<size_t>(v)];
    }
  }
  std::vector<bool> is_output(g.values.size(), false);
  for (ValueId v : g.outputs) is_output[static_cast<size_t>(v)] = true;

  std::vector<bool> removed(p.steps.size(), false);
  int count = 0;
  for (size_t t = 0; t < p.steps.size(); ++t) {
    const Step& st = p.steps[t];
    if (st.kind != Step::Kind::Extern) continue;
    const Node& n = g.nodes[static_cast<size_t>(st.node)];
    if (n.op != OpId::copy_ || n.inputs.size() != 2 || n.outputs.size() != 1) continue;
    const ValueId dst = n.inputs[0], src = n.inputs[1], result = n.outputs[0];
    const int s = stored_at[static_cast<size_t>(src)];
    if (s < 0 || readers[static_cast<size_t>(src)] != 1 || is_output[static_cast<size_t>(src)]) continue;
    if (readers[static_cast<size_t>(result)] != 0 || is_output[static_cast<size_t>(result)]) continue;
    const ValueType& dt = g.type(dst);
    const ValueType& srct = g.type(src);
    if (dt.shape != srct.shape || dt.dtype != srct.dtype || dt.symbolic_dims != srct.symbolic_dims ||
        dt.strides != contiguous_strides(dt.shape) || p.stored_into[static_cast<size_t>(src)] != kNoValue)
      continue;
    const Kernel& k = p.kernels[static_cast<size_t>(p.steps[static_cast<size_t>(s)].kernel)];
    const Store* store = own_coordinate_store(k, src);
    if (!store) continue;
    const ValueId root = alias_root(g, dst);
    bool untouched = true;
    for (size_t u = static_cast<size_t>(s) + 1; u < t && untouched; ++u)
      untouched = removed[u] || (!contains(access[u].reads, root) && !contains(access[u].writes, root));
    // K reads the destination only element for element, and stores nothing else into it.
    for (const Load& l : k.loads)
      if (alias_root(g, l.buffer) == root && (l.buffer != dst || l.coords != store->coords || l.sizes != store->sizes))
        untouched = false;
    for (const Store& x : k.stores)
      if (p.stored_into[static_cast<size_t>(x.buffer)] != kNoValue && alias_root(g, p.stored_into[static_cast<size_t>(x.buffer)]) == root)
        untouched = false;
    if (!untouched) continue;
    p.stored_into[static_cast<size_t>(src)] = dst;
    Kernel& kernel = p.kernels[static_cast<size_t>(p.steps[static_cast<size_t>(s)].kernel)];
    kernel.aliased.push_back(src);
    kernel.aliased.push_back(dst);
    removed[t] = true;
    ++count;
  }
  std::vector<Step> steps;
  for (size_t s = 0; s < p.steps.size(); ++s)
    if (!removed[s]) steps.push_back(p.steps[s]);
  p.steps = std::move(steps);
  return count;
}

}  // namespace kiln::compiler::schedule
