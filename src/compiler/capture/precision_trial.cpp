// Whole-graph precision under bf16 autocast, timed in place (precision_trial.h).
#include "compiler/capture/precision_trial.h"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <utility>

#include "compiler/codegen/cpp/cache_key.h"
#include "compiler/graph/printer.h"
#include "compiler/passes/float32_regions.h"
#include "compiler/passes/pipeline.h"
#include "ops/conv_autotune.h"
#include "ops/conv_fused.h"

namespace kiln::compiler {
namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::string ms(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f ms", seconds * 1e3);
  return buf;
}

}  // namespace

PrecisionTrial::PrecisionTrial(std::string key, Graph float32) : float32_graph(std::move(float32)), key_(std::move(key)) {}

void PrecisionTrial::ran(double seconds, uint64_t sizes) {
  // The first run of each builds oneDNN's primitives and touches fresh
  // buffers: not what the step costs from then on.
  if (runs_ >= 2) {
    if (runs_ == 2) sizes_ = sizes;
    if (sizes != sizes_) return;  // the same graph runs again next time
    (next() == GraphPrecision::Autocast ? autocast_s_ : float32_s_).push_back(seconds);
  }
  ++runs_;
}

GraphPrecision PrecisionTrial::winner() const {
  return median(autocast_s_) <= kAutocastMargin * median(float32_s_) ? GraphPrecision::Autocast
                                                                      : GraphPrecision::Float32;
}

std::string PrecisionTrial::summary() const {
  const double a = median(autocast_s_), f = median(float32_s_);
  const std::string timing = " (whole graph timed in place: " + ms(a) + " as autocast wrote it, " + ms(f) +
                             " in float32; medians of " + std::to_string(kTimedRuns) + " runs each)";
  return winner() == GraphPrecision::Float32 ? "float32" + timing : "bfloat16 where autocast asks" + timing;
}

std::string precision_key(const Graph& differentiable) {
  return "graph_precision:" + codegen::sha256_hex({print(differentiable)});
}

Graph float32_everywhere(const Graph& differentiable) {
  Graph g = differentiable;
  run_passes(g, execution_passes(Float32Regions::Everywhere));
  return g;
}

PrecisionPlan plan_precision(const Graph& differentiable, const std::string& backend) {
  PrecisionPlan plan;
  if (count_bfloat16_layers(differentiable) == 0 || backend != "cpp" || !conv_bf16_chosen_by_timing() ||
      pass_disabled("precision_trial"))
    return plan;
  plan.key = precision_key(differentiable);
  const std::optional<std::string> recorded = conv_autotune::lookup(plan.key);
  if (recorded == "bf16") {
    plan.note = "bfloat16 where autocast asks (recorded: faster than the graph in float32 on this machine)";
    return plan;
  }
  if (recorded == "float32") {
    plan.kind = PrecisionPlan::Float32;
    plan.float32 = float32_everywhere(differentiable);
    plan.note = "float32 (recorded: faster than the graph as autocast wrote it on this machine)";
    return plan;
  }
  plan.kind = PrecisionPlan::Trial;
  plan.note = "being timed: as autocast wrote it against float32";
  return plan;
}

}  // namespace kiln::compiler
