// Vertical fusion (fuse_vertical.h).
#include "compiler/schedule/fuse_vertical.h"

#include <algorithm>
#include <map>

#include "compiler/schedule/step_writes.h"

namespace kiln::compiler::schedule {

using namespace lower;

namespace {

// Past this many operations in one expression, recomputing a producer in
// each consumer costs more than it saves (and the source grows).
constexpr size_t kMaxExpressionNodes = 256;

int64_t value_bytes(const Graph& g, ValueId v) {
  const ValueType& t = g.type(v);
  return numel_of(t.shape) * static_cast<int64_t>(itemsize(t.dtype));
}

bool reads(const Kernel& k, ValueId v) {
  return std::any_of(k.loads.begin(), k.loads.end(), [&](const Load& l) { return l.buffer == v; });
}

// The producer's value at `load`'s coordinates, as operands of `consumer`.
ScalarExpr inline_at(const Kernel& producer, const Load& load, Kernel& consumer) {
  const Store& st = producer.stores[0];
  std::map<std::string, IndexExpr> at;
  for (size_t d = 0; d < st.coords.size(); ++d)
    if (!st.coords[d].is_constant()) at.emplace(st.coords[d].str(), load.coords[d]);
  return map_inputs(st.value, [&](int i) {
    if (i >= kIndexValueBase) {
      consumer.index_values.push_back(producer.index_values[static_cast<size_t>(i - kIndexValueBase)].substitute(at));
      return ScalarExpr::input(kIndexValueBase + static_cast<int>(consumer.index_values.size()) - 1);
    }
    Load l = producer.loads.at(static_cast<size_t>(i));
    for (IndexExpr& c : l.coords) c = c.substitute(at);
    return ScalarExpr::input(consumer.add_load(std::move(l)));
  });
}

void inline_into(const Kernel& producer, ValueId v, Kernel& consumer) {
  std::map<int, ScalarExpr> replaced;
  size_t n = consumer.loads.size();
  for (size_t i = 0; i < n; ++i)
    if (consumer.loads[i].buffer == v) replaced[static_cast<int>(i)] = inline_at(producer, Load(consumer.loads[i]), consumer);
  map_expressions(consumer, [&](int i) {
    auto it = replaced.find(i);
    return it != replaced.end() ? it->second : ScalarExpr::input(i);
  });
  remove_unused_operands(consumer);
  consumer.nodes.insert(consumer.nodes.end(), producer.nodes.begin(), producer.nodes.end());
  std::sort(consumer.nodes.begin(), consumer.nodes.end());
}

// The store writes coordinate d of the value at loop variable i<d> (or 0
// for a size-1 dim): what inline_at's substitution assumes.
bool stores_own_coordinates(const Kernel& k) {
  const Store& st = k.stores[0];
  for (size_t d = 0; d < st.coords.size(); ++d) {
    const IndexExpr& c = st.coords[d];
    bool variable = c.terms().size() == 1 && c.terms()[0].coeff == 1 && c.terms()[0].symbols.size() == 1;
    if (c.is_constant() ? st.sizes[d].constant() != 1 : !variable) return false;
  }
  return true;
}

// `last_consumer`: the step of the last kernel reading k's value; k sits at
// step `at`.
bool can_inline(const LoopProgram& p, const Kernel& k, const StepWrites& writes, size_t at, size_t last_consumer,
                const std::vector<const Kernel*>& consumers) {
  if (k.is_reduction() || k.stores.size() != 1 || !stores_own_coordinates(k)) return false;
  ValueId v = k.stores[0].buffer;
  if (p.needs_tensor[static_cast<size_t>(v)] || consumers.empty()) return false;
  if (writes.written_between(k.loads, at, last_consumer)) return false;
  for (const Kernel* c : consumers)
    for (const Load& l : c->loads)
      if (l.buffer == v && l.sizes != k.stores[0].sizes) return false;
  size_t producer_nodes = ssa_order({k.stores[0].value}).size();
  for (const Kernel* c : consumers)
    if (ssa_order(expressions(*c)).size() + producer_nodes > kMaxExpressionNodes) return false;
  return inline_score(p, k, static_cast<int>(consumers.size())) > 0;
}

}  // namespace

int64_t inline_score(const LoopProgram& p, const Kernel& producer, int consumers) {
  const Graph& g = *p.graph;
  int64_t out = value_bytes(g, producer.stores[0].buffer);
  int64_t in = 0;
  // A broadcast input costs at most its own size.
  for (const Load& l : producer.loads)
    in += std::min(out / static_cast<int64_t>(itemsize(g.type(producer.stores[0].buffer).dtype)) *
                       static_cast<int64_t>(itemsize(l.dtype)),
                   value_bytes(g, l.buffer));
  int64_t materialized = in + out + consumers * out;
  int64_t inlined = consumers * in;
  return materialized - inlined;
}

void fuse_vertical(LoopProgram& p) {
  StepWrites writes(p);
  std::vector<bool> dead(p.kernels.size(), false);
  for (size_t s = 0; s < p.steps.size(); ++s) {
    if (p.steps[s].kind != Step::Kind::Kernel) continue;
    auto ki = static_cast<size_t>(p.steps[s].kernel);
    const Kernel& k = p.kernels[ki];
    if (k.stores.size() != 1) continue;
    ValueId v = k.stores[0].buffer;
    std::vector<Kernel*> consumers;
    size_t last_consumer = s;
    for (size_t t = s + 1; t < p.steps.size(); ++t)
      if (p.steps[t].kind == Step::Kind::Kernel && reads(p.kernels[static_cast<size_t>(p.steps[t].kernel)], v)) {
        consumers.push_back(&p.kernels[static_cast<size_t>(p.steps[t].kernel)]);
        last_consumer = t;
      }
    if (!can_inline(p, k, writes, s, last_consumer, {consumers.begin(), consumers.end()})) continue;
    for (Kernel* c : consumers) inline_into(k, v, *c);
    dead[ki] = true;
  }
  // Drop the inlined kernels and their steps; renumber and rename the rest.
  std::vector<int> renumber(p.kernels.size(), -1);
  std::vector<Kernel> kept;
  for (size_t i = 0; i < p.kernels.size(); ++i)
    if (!dead[i]) {
      renumber[i] = static_cast<int>(kept.size());
      kept.push_back(std::move(p.kernels[i]));
      kept.back().name = numbered("k", static_cast<int64_t>(kept.size() - 1));
    }
  std::vector<Step> steps;
  for (Step st : p.steps) {
    if (st.kind == Step::Kind::Kernel) {
      if (dead[static_cast<size_t>(st.kernel)]) continue;
      st.kernel = renumber[static_cast<size_t>(st.kernel)];
    }
    steps.push_back(st);
  }
  p.kernels = std::move(kept);
  p.steps = std::move(steps);
}

}  // namespace kiln::compiler::schedule
