// The fused kernels of a graph compiled by the cpp backend, for kiln::explain.
#pragma once
#include <string>
#include <vector>

#include "compiler/lower/loop_ir.h"
#include "kiln/explain.h"

namespace kiln::detail {

// Each kernel of the scheduled program `p` that covers more than one graph
// node: its ops and the bytes of the covered nodes' outputs it does not
// store (they live only inside the kernel's loop body).
std::vector<ExplainFusedKernel> fused_kernels(const std::string& graph_name, const compiler::lower::LoopProgram& p);

// Each parallel region of `p` (compiler/schedule/parallel_regions.h) with its kernels.
std::vector<ExplainParallelRegion> parallel_regions(const std::string& graph_name,
                                                    const compiler::lower::LoopProgram& p);

}  // namespace kiln::detail
