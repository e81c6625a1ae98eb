// Runs of independent kernels as one parallel region (parallel_regions.h).
#include "compiler/schedule/parallel_regions.h"

#include <numeric>
#include <optional>
#include <set>

namespace kiln::compiler::schedule {

using lower::Kernel;
using lower::LoopProgram;
using lower::Step;

namespace {

// The kernel's loop iterations; nullopt when a loop's extent is symbolic.
std::optional<int64_t> constant_work(const Kernel& k) {
  int64_t n = 1;
  for (const std::vector<lower::Loop>* loops : {&k.loops, &k.reduce_loops})
    for (const lower::Loop& l : *loops) {
      std::optional<int64_t> e = l.extent.constant();
      if (!e) return std::nullopt;
      n *= *e;
    }
  return n;
}

// The memory each value lives in, as the value that owns it: a view's
// output lives in its input's memory, a store made in place of a copy-back
// in its destination's.
std::vector<ValueId> memory_owners(const LoopProgram& p) {
  std::vector<ValueId> owner(p.graph->values.size());
  std::iota(owner.begin(), owner.end(), ValueId{0});
  auto at = [&](ValueId v) -> ValueId& { return owner[static_cast<size_t>(v)]; };
  for (const Step& s : p.steps) {
    if (s.kind == Step::Kind::View) {
      const Node& n = p.graph->nodes.at(static_cast<size_t>(s.node));
      if (!n.inputs.empty() && n.inputs[0] != kNoValue)
        for (ValueId out : n.outputs) at(out) = at(n.inputs[0]);
    } else if (s.kind == Step::Kind::Kernel) {
      for (const lower::Store& st : p.kernels.at(static_cast<size_t>(s.kernel)).stores) {
        const auto v = static_cast<size_t>(st.buffer);
        if (v < p.stored_into.size() && p.stored_into[v] != kNoValue) at(st.buffer) = at(p.stored_into[v]);
      }
    }
  }
  return owner;
}

struct Run {
  std::vector<int> kernels;
  int parallel = 0;  // kernels that would each start the thread team alone
  std::set<ValueId> written, touched;  // memory owners
};

}  // namespace

int group_parallel_regions(LoopProgram& p, int64_t parallel_work) {
  p.regions.clear();
  if (p.graph == nullptr) return 0;
  std::vector<ValueId> owner = memory_owners(p);
  Run run;
  auto close = [&] {
    if (run.parallel >= 2) p.regions.push_back(run.kernels);
    run = Run();
  };
  for (const Step& s : p.steps) {
    if (s.kind == Step::Kind::View) {
      const Node& view = p.graph->nodes.at(static_cast<size_t>(s.node));
      if (!p.needs_tensor[static_cast<size_t>(view.outputs[0])]) continue;  // indexing only: nothing runs
    }
    if (s.kind != Step::Kind::Kernel) {
      close();
      continue;
    }
    const Kernel& k = p.kernels.at(static_cast<size_t>(s.kernel));
    std::set<ValueId> reads, writes;
    for (const lower::Load& l : k.loads) reads.insert(owner[static_cast<size_t>(l.buffer)]);
    for (const lower::Store& st : k.stores) writes.insert(owner[static_cast<size_t>(st.buffer)]);
    std::optional<int64_t> work = constant_work(k);
    bool independent = work.has_value();
    for (ValueId v : reads) independent = independent && !run.written.count(v);
    for (ValueId v : writes) independent = independent && !run.touched.count(v);
    if (!independent) close();
    if (!work) continue;
    run.kernels.push_back(s.kernel);
    run.parallel += *work >= parallel_work ? 1 : 0;
    run.written.insert(writes.begin(), writes.end());
    run.touched.insert(reads.begin(), reads.end());
    run.touched.insert(writes.begin(), writes.end());
  }
  close();
  return static_cast<int>(p.regions.size());
}

}  // namespace kiln::compiler::schedule
