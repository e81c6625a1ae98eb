// The pass pipeline (pipeline.h).
#include "compiler/passes/pipeline.h"

#include <cstdlib>
#include <iostream>

#include "compiler/graph/printer.h"
#include "compiler/log.h"
#include "compiler/graph/verifier.h"
#include "compiler/passes/autotune_convolutions.h"
#include "compiler/passes/blocked_layouts.h"
#include "compiler/passes/constant_folding.h"
#include "compiler/passes/copy_back_removal.h"
#include "compiler/passes/cse.h"
#include "compiler/passes/dead_code.h"
#include "compiler/passes/float32_regions.h"
#include "compiler/passes/fold_batch_norm.h"
#include "compiler/passes/fuse_conv_activation.h"
#include "compiler/passes/fuse_conv_residual.h"
#include "compiler/passes/fuse_norm_activation.h"
#include "compiler/passes/fuse_pool_norm.h"
#include "compiler/passes/noop_removal.h"
#include "core/cpu_features.h"

namespace kiln::compiler {

namespace {
// Whether the comma list in environment variable `var` names `item`.
bool env_list_has(const char* var, std::string_view item) {
  const char* env = std::getenv(var);
  if (env == nullptr) return false;
  for (std::string_view x : comma_list(env))
    if (x == item) return true;
  return false;
}
}  // namespace

bool dump_enabled(std::string_view what) { return env_list_has("KILN_DUMP", what); }

std::string dump_header(const Graph& g, const std::string& pass) {
  return detail::concat("// ---- graph ", g.name, " after pass ", pass, " (", g.num_ops(), " ops) ----");
}

bool pass_disabled(std::string_view name) { return env_list_has("KILN_DISABLE_PASSES", name); }

void run_passes(Graph& g, const std::vector<Pass>& passes) {
  const bool dump = dump_enabled("passes");
  for (const Pass& pass : passes) {
    if (pass_disabled(pass.name)) continue;
    pass.run(g);
    verify_or_throw(g, ("pass " + pass.name).c_str());
    if (dump) std::cerr << dump_header(g, pass.name) << '\n' << print(g) << std::flush;
  }
}

std::vector<Pass> default_passes(std::string_view mode) {
  std::vector<Pass> passes = {
      {"constant_folding", fold_constants},
      {"noop_removal", remove_noops},
      {"fold_batch_norm", [](Graph& g) { fold_batch_norms(g); }},
      {"fuse_conv_activation", [](Graph& g) { fuse_conv_activations(g); }},
      {"cse", eliminate_common_subexpressions},
      {"copy_back_removal", [](Graph& g) { remove_unobserved_copy_backs(g); }},
      {"dead_code", eliminate_dead_code},
  };
  if (mode == "max-autotune") passes.push_back({"autotune_convolutions", [](Graph& g) { autotune_convolutions(g); }});
  return passes;
}

std::vector<Pass> execution_passes(Float32Regions regions) {
  return {
      // A bf16 graph's float32 regions get the float32 graph's peephole
      // fusions, which default_passes could not apply to bfloat16 values:
      // eval batch norm folded into its convolution, ReLU/GELU into it.
      {"float32_regions", [regions](Graph& g) {
         if (compute_float32_regions(g, regions) == 0) return;
         fold_batch_norms(g);
         fuse_conv_activations(g);
       }},
      {"fuse_norm_activation", [](Graph& g) { fuse_norm_activations(g); }},
      {"fuse_conv_residual", [](Graph& g) { fuse_conv_residuals(g); }},
      // nChw16c is oneDNN's float32 block on AVX-512; an AVX2 host computes in
      // nChw8c, where a 16c operand would cost a reorder instead of saving one.
      {"blocked_layouts", [](Graph& g) {
         if (cpu_has_avx512()) keep_blocked_layouts(g);
       }},
      // Eval: a blocked max-pool and the batch norm after it as one generated kernel.
      {"fuse_pool_norm", [](Graph& g) { fuse_pool_norms(g); }},
  };
}

}  // namespace kiln::compiler
