// kiln::explain's fused-kernel list from the cpp backend's scheduled loop
// program (compiler/schedule decides the fusion; this only reads it).
#include "compiler/explain/fused_kernels.h"

#include <string>
#include <unordered_set>

#include "compiler/graph/graph.h"

namespace kiln::detail {

std::vector<ExplainFusedKernel> fused_kernels(const std::string& graph_name, const compiler::lower::LoopProgram& p) {
  std::vector<ExplainFusedKernel> out;
  if (p.graph == nullptr) return out;
  const compiler::Graph& g = *p.graph;
  for (const compiler::lower::Kernel& k : p.kernels) {
    if (k.nodes.size() < 2) continue;
    std::unordered_set<compiler::ValueId> stored;
    for (const compiler::lower::Store& st : k.stores) stored.insert(st.buffer);
    ExplainFusedKernel f;
    f.graph = graph_name;
    f.kernel = k.name;
    for (int n : k.nodes) {
      const compiler::Node& node = g.nodes[static_cast<size_t>(n)];
      if (node.kind != compiler::NodeKind::Op) continue;
      f.ops.push_back(op_name(node.op));
      for (compiler::ValueId v : node.outputs) {
        if (v == compiler::kNoValue || stored.count(v)) continue;
        const compiler::ValueType t = g.type(v);
        int64_t numel = 1;
        for (int64_t d : t.shape) numel *= d;
        f.bytes_not_written += numel * static_cast<int64_t>(itemsize(t.dtype));
      }
    }
    out.push_back(std::move(f));
  }
  return out;
}

std::vector<ExplainParallelRegion> parallel_regions(const std::string& graph_name,
                                                    const compiler::lower::LoopProgram& p) {
  std::vector<ExplainParallelRegion> out;
  for (size_t r = 0; r < p.regions.size(); ++r) {
    ExplainParallelRegion region{graph_name, std::to_string(r), {}};
    region.region.insert(0, 1, 'r');  // not "r" + ...: GCC 12 warns falsely (-Wrestrict) about that
    for (int k : p.regions[r]) region.kernels.push_back(p.kernels.at(static_cast<size_t>(k)).name);
    out.push_back(std::move(region));
  }
  return out;
}

}  // namespace kiln::detail
