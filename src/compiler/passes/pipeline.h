// Running passes: a straight list, each named, the verifier after each, the
// IR printed after each when asked (Halide's lowering style, DESIGN.md).
//
// KILN_DUMP is a comma list of what to print to stderr; `passes` prints the
// graph after every pass under a header line naming the pass.
#pragma once
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "compiler/graph/graph.h"

namespace kiln::compiler {

struct Pass {
  std::string name;
  std::function<void(Graph&)> run;
};

// Runs the passes in order; after each, the verifier (an InternalError naming
// the pass when the graph broke) and, under KILN_DUMP=passes, a dump.
void run_passes(Graph& g, const std::vector<Pass>& passes);
// Constant folding first (it makes constants for no-op removal to see),
// then no-op removal, eval batch norm folded into convolutions, CSE (which
// merges what the others exposed) and dead-code elimination last (it sweeps
// what the others left unused).
std::vector<Pass> default_passes();
// Whether KILN_DUMP's comma list names `what` (read on every call).
bool dump_enabled(std::string_view what);
// The header line printed before a graph dumped after a pass.
std::string dump_header(const Graph& g, const std::string& pass);

}  // namespace kiln::compiler
