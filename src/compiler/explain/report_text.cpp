// ExplainReport::str and ::json: the report as a human summary and as one
// JSON object (docs/explain.md describes each field).
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "kiln/explain.h"

namespace kiln {
namespace {

std::string plural(int64_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

// "1234567 bytes (1.2 MiB)".
std::string bytes_str(int64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double x = static_cast<double>(b);
  int u = 0;
  while (x >= 1024.0 && u < 4) {
    x /= 1024.0;
    ++u;
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, "%lld bytes (%.1f %s)", static_cast<long long>(b), x, units[u]);
  return buf;
}

}  // namespace

std::string ExplainReport::str(bool as_run) const {
  int64_t total_ops = 0;
  for (const auto& [name, n] : ops) total_ops += n;
  std::string s = "explain: " + plural(calls, "call", "calls") + ", " + plural(variants, "variant", "variants") + " (" +
                  plural(recompiles, "recompile", "recompiles") + "), " + plural(static_cast<int64_t>(graphs.size()), "graph", "graphs") +
                  ", " + plural(static_cast<int64_t>(graph_breaks.size()), "graph break", "graph breaks") + ", " +
                  plural(total_ops, "op", "ops") + "\n";
  if (fell_back) s += "fell back to eager: " + fallback_reason + "\n";

  s += "\ngraph breaks:\n";
  if (graph_breaks.empty()) s += "  none\n";
  for (size_t i = 0; i < graph_breaks.size(); ++i) {
    const ExplainBreak& b = graph_breaks[i];
    s += "  " + std::to_string(i + 1) + ". " + b.reason + " of " + b.op + " at " + b.location +
         ": the graph so far runs, capture continues in a new graph\n";
  }

  s += "\nguards (a call that fails one records a new variant):\n";
  for (const std::string& g : guards) s += "  " + g + "\n";

  s += "\nop counts (over all graphs):\n";
  size_t width = 0;
  for (const auto& [name, n] : ops) width = std::max(width, name.size());
  for (const auto& [name, n] : ops) s += "  " + name + std::string(width - name.size() + 2, ' ') + std::to_string(n) + "\n";

  s += "\nsaved for backward:\n";
  s += "  eager autograd:      " + bytes_str(saved_bytes_eager) + "\n";
  s += "  partitioned forward: " + bytes_str(saved_bytes_partitioned) + "\n";

  s += "\nfused kernels (backend " + backend + "):\n";
  if (fused_kernels.empty())
    s += backend == "cpp" ? "  none: no two ops shared a loop nest\n"
                          : "  none: this backend runs each op on its own kernel; compile with backend(\"cpp\") to fuse\n";
  int64_t not_written = 0;
  for (const ExplainFusedKernel& f : fused_kernels) {
    std::string ops_list;
    for (const std::string& op : f.ops) ops_list += (ops_list.empty() ? "" : " + ") + op;
    s += "  " + f.graph + "/" + f.kernel + ": " + ops_list + "; does not write " + bytes_str(f.bytes_not_written) + "\n";
    not_written += f.bytes_not_written;
  }
  if (!fused_kernels.empty())
    s += "  " + plural(static_cast<int64_t>(fused_kernels.size()), "fused kernel", "fused kernels") +
         ", intermediates not written: " + bytes_str(not_written) + "\n";

  if (!parallel_regions.empty()) {
    s += "\nparallel regions (kernels that share no memory, one OpenMP thread team each):\n";
    for (const ExplainParallelRegion& r : parallel_regions) {
      std::string list;
      for (const std::string& k : r.kernels) list += (list.empty() ? "" : " ") + k;
      s += "  " + r.graph + "/" + r.region + ": " + list + "\n";
    }
  }

  bool any_precision = false;
  for (const ExplainGraph& g : graphs) any_precision = any_precision || !g.precision.empty();
  if (any_precision) {
    s += "\nprecision under bf16 autocast, per graph (docs/autocast.md, \"Whole graphs\"):\n";
    for (const ExplainGraph& g : graphs)
      if (!g.precision.empty()) s += "  " + g.name + ": " + g.precision + "\n";
  }

  if (!convolutions.empty()) {
    s += "\nconvolutions (oneDNN or generated loops, after the per-layer choices; docs/compile.md, \"max-autotune\"):\n";
    for (const ExplainConvolution& c : convolutions)
      s += "  " + c.graph + ": " + c.node + " " + c.shapes + ": " + c.precision + ", algorithm " + c.algorithm +
           (c.impl.empty() ? "" : ", " + c.impl) + "\n";
  }

  for (const ExplainGraph& g : graphs) {
    const bool run = as_run && !g.executable.empty();
    s += "\ngraph " + g.name + " (variant " + std::to_string(g.variant) + ", segment " + std::to_string(g.segment) +
         ", " + plural(g.num_ops, "op", "ops") + (g.has_backward ? ", forward + backward" : "") +
         (run ? "; as it runs, after functionalization and the passes" : "") + "):\n" + (run ? g.executable : g.text);
  }
  return s;
}

nlohmann::json ExplainReport::json() const {
  nlohmann::json j;
  j["graphs"] = nlohmann::json::array();
  for (const ExplainGraph& g : graphs) {
    j["graphs"].push_back({{"name", g.name},
                           {"variant", g.variant},
                           {"segment", g.segment},
                           {"text", g.text},
                           {"dot", g.dot},
                           {"executable", g.executable},
                           {"num_ops", g.num_ops},
                           {"has_backward", g.has_backward},
                           {"precision", g.precision}});
  }
  j["graph_breaks"] = nlohmann::json::array();
  for (const ExplainBreak& b : graph_breaks)
    j["graph_breaks"].push_back({{"op", b.op}, {"reason", b.reason}, {"location", b.location}});
  j["guards"] = guards;
  j["ops"] = nlohmann::json::object();
  for (const auto& [name, n] : ops) j["ops"][name] = n;
  j["calls"] = calls;
  j["variants"] = variants;
  j["recompiles"] = recompiles;
  j["fell_back"] = fell_back;
  if (fell_back) j["fallback_reason"] = fallback_reason;
  j["saved_bytes_eager"] = saved_bytes_eager;
  j["saved_bytes_partitioned"] = saved_bytes_partitioned;
  j["backend"] = backend;
  j["fused_kernels"] = nlohmann::json::array();
  for (const ExplainFusedKernel& f : fused_kernels)
    j["fused_kernels"].push_back(
        {{"graph", f.graph}, {"kernel", f.kernel}, {"ops", f.ops}, {"bytes_not_written", f.bytes_not_written}});
  j["parallel_regions"] = nlohmann::json::array();
  for (const ExplainParallelRegion& r : parallel_regions)
    j["parallel_regions"].push_back({{"graph", r.graph}, {"region", r.region}, {"kernels", r.kernels}});
  j["convolutions"] = nlohmann::json::array();
  for (const ExplainConvolution& c : convolutions)
    j["convolutions"].push_back({{"graph", c.graph}, {"node", c.node}, {"shapes", c.shapes}, {"precision", c.precision},
                                 {"algorithm", c.algorithm}, {"impl", c.impl}});
  return j;
}

namespace detail {
void print_report(const ExplainReport& report) { std::cout << report.str() << std::flush; }
}  // namespace detail

}  // namespace kiln
