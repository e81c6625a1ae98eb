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
#include "compiler/passes/float32_regions.h"

namespace kiln::compiler {

struct Pass {
  std::string name;
  std::function<void(Graph&)> run;
};

// Runs the passes in order; after each, the verifier (an InternalError naming
// the pass when the graph broke) and, under KILN_DUMP=passes, a dump. A pass
// named in KILN_DISABLE_PASSES (a comma list) is skipped: to measure what one
// pass buys, or to rule one out when a compiled result looks wrong.
void run_passes(Graph& g, const std::vector<Pass>& passes);
// Constant folding first (it makes constants for no-op removal to see),
// then no-op removal, eval batch norm folded into convolutions, ReLU/GELU
// fused into the convolution before them as a post-op (conv2d's fused form
// has a derivative), CSE (which
// merges what the others exposed) and dead-code elimination last (it sweeps
// what the others left unused). Compile mode "max-autotune" adds
// autotune_convolutions at the end (per-layer oneDNN algorithm, timed once).
// The result is still differentiable: the ahead-of-time backward splits it.
std::vector<Pass> default_passes(std::string_view mode = "default");
// What runs after default_passes on a graph about to execute and never to be
// differentiated again (the forms these passes make have no derivative):
// float32_regions (bfloat16 convolutions and products that run in float32
// anyway read and write float32 values; where it changed something,
// fold_batch_norm and fuse_conv_activation again on those values),
// fuse_norm_activation (ReLU/GELU and their backward into batch norm's),
// then blocked_layouts (nChw16c values between the convolutions, on AVX-512
// hosts; it keeps the fused batch norms' layout group). `regions`:
// Everywhere makes the whole graph float32 (capture's precision trial).
std::vector<Pass> execution_passes(Float32Regions regions = Float32Regions::WhereFloat32Wins);
// Whether KILN_DUMP's comma list names `what` (read on every call).
bool dump_enabled(std::string_view what);
// Whether KILN_DISABLE_PASSES's comma list names the pass (read on every call).
bool pass_disabled(std::string_view name);
// The header line printed before a graph dumped after a pass.
std::string dump_header(const Graph& g, const std::string& pass);

}  // namespace kiln::compiler
