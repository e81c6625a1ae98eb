// Merging adjacent loops (merge_loops.h).
#include "compiler/lower/merge_loops.h"

#include <map>

namespace kiln::compiler::lower {

namespace {

// Every access's flat index reads outer * (B * c) + inner * c.
bool mergeable(const Kernel& k, const Loop& outer, const Loop& inner) {
  auto fits = [&](const IndexExpr& flat) {
    auto co = flat.coefficient_of(outer.var), ci = flat.coefficient_of(inner.var);
    return co && ci && *co == inner.extent * *ci;
  };
  for (const Load& l : k.loads)
    if (!fits(l.flat())) return false;
  for (const Store& s : k.stores)
    if (!fits(s.flat())) return false;
  return true;
}

// outer -> 0, inner -> the merged variable (named as the outer loop): the
// flat index is linear in the coordinates, so it becomes merged * c.
void substitute(std::vector<IndexExpr>& coords, const std::map<std::string, IndexExpr>& with) {
  for (IndexExpr& c : coords) c = c.substitute(with);
}

void merge_in(Kernel& k, std::vector<Loop>& loops) {
  for (size_t d = 0; d + 1 < loops.size();) {
    Loop& outer = loops[d];
    const Loop& inner = loops[d + 1];
    if (!mergeable(k, outer, inner)) {
      ++d;
      continue;
    }
    std::map<std::string, IndexExpr> with = {{outer.var, IndexExpr(0)}, {inner.var, IndexExpr::symbol(outer.var)}};
    for (Load& l : k.loads) substitute(l.coords, with);
    for (Store& s : k.stores) substitute(s.coords, with);
    outer.extent = outer.extent * inner.extent;
    loops.erase(loops.begin() + static_cast<std::ptrdiff_t>(d) + 1);
  }
}

}  // namespace

void merge_loops(Kernel& k) {
  merge_in(k, k.loops);
  merge_in(k, k.reduce_loops);
}

void merge_loops(LoopProgram& p) {
  for (Kernel& k : p.kernels) merge_loops(k);
}

}  // namespace kiln::compiler::lower
