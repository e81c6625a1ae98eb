// explain's HTML page (html.h). Everything is inline (style, SVG), so the
// file can be mailed or attached to an issue as it is.
#include "compiler/explain/html.h"

#include "compiler/graph/dot.h"
#include "report/markup.h"

namespace kiln::compiler {
namespace {

std::string escape(const std::string& s) { return report::html_escape(s); }

// Graphviz writes a whole SVG document; inline SVG starts at <svg.
std::string inline_svg(const std::string& svg) {
  size_t at = svg.find("<svg");
  return at == std::string::npos ? svg : svg.substr(at);
}

std::string row(const std::string& key, const std::string& value) {
  return "<tr><th>" + escape(key) + "</th><td>" + escape(value) + "</td></tr>\n";
}

const char* const kStyle =
    "body{font-family:sans-serif;margin:2em;max-width:100%}"
    "table{border-collapse:collapse;margin:0.5em 0}"
    "th,td{border:1px solid #ccc;padding:2px 8px;text-align:left;font-family:monospace}"
    "pre{background:#f6f8fa;padding:0.5em;overflow-x:auto;font-size:12px}"
    ".svg{overflow:auto;border:1px solid #ddd;max-height:80vh}";

}  // namespace

std::string explain_html(const ExplainReport& r, const std::string& title) {
  std::string h = "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>kiln explain: " + escape(title) +
                  "</title><style>" + kStyle + "</style></head><body>\n";
  h += "<h1>kiln explain: " + escape(title) + "</h1>\n";

  int64_t total_ops = 0;
  for (const auto& [name, n] : r.ops) total_ops += n;
  h += "<h2>Summary</h2>\n<table>\n";
  h += row("calls", std::to_string(r.calls));
  h += row("variants", std::to_string(r.variants));
  h += row("recompiles", std::to_string(r.recompiles));
  h += row("graphs", std::to_string(r.graphs.size()));
  h += row("graph breaks", std::to_string(r.graph_breaks.size()));
  h += row("ops", std::to_string(total_ops));
  if (r.fell_back) h += row("fell back to eager", r.fallback_reason);
  h += row("saved bytes, eager autograd", std::to_string(r.saved_bytes_eager));
  h += row("saved bytes, partitioned", std::to_string(r.saved_bytes_partitioned));
  h += "</table>\n";

  h += "<h2>Graph breaks</h2>\n";
  if (r.graph_breaks.empty()) {
    h += "<p>none</p>\n";
  } else {
    h += "<table><tr><th>op</th><th>reason</th><th>location</th></tr>\n";
    for (const ExplainBreak& b : r.graph_breaks)
      h += "<tr><td>" + escape(b.op) + "</td><td>" + escape(b.reason) + "</td><td>" + escape(b.location) + "</td></tr>\n";
    h += "</table>\n";
  }

  h += "<h2>Guards</h2>\n<ul>\n";
  for (const std::string& g : r.guards) h += "<li><code>" + escape(g) + "</code></li>\n";
  h += "</ul>\n";

  h += "<h2>Fused kernels</h2>\n";
  if (r.fused_kernels.empty()) {
    h += "<p>none (backend " + escape(r.backend) + ")</p>\n";
  } else {
    h += "<table><tr><th>graph</th><th>kernel</th><th>ops it covers</th><th>intermediate bytes not written</th></tr>\n";
    for (const ExplainFusedKernel& f : r.fused_kernels) {
      std::string ops;
      for (const std::string& op : f.ops) ops += (ops.empty() ? "" : " + ") + op;
      h += "<tr><td>" + escape(f.graph) + "</td><td>" + escape(f.kernel) + "</td><td>" + escape(ops) + "</td><td>" +
           std::to_string(f.bytes_not_written) + "</td></tr>\n";
    }
    h += "</table>\n";
  }

  if (!r.parallel_regions.empty()) {
    h += "<h2>Parallel regions</h2>\n<p>consecutive generated kernels that run as one OpenMP team</p>\n";
    h += "<table><tr><th>graph</th><th>region</th><th>its kernels</th></tr>\n";
    for (const ExplainParallelRegion& pr : r.parallel_regions) {
      std::string kernels;
      for (const std::string& k : pr.kernels) kernels += (kernels.empty() ? "" : ", ") + k;
      h += "<tr><td>" + escape(pr.graph) + "</td><td>" + escape(pr.region) + "</td><td>" + escape(kernels) +
           "</td></tr>\n";
    }
    h += "</table>\n";
  }

  h += "<h2>Op counts</h2>\n<table><tr><th>op</th><th>count</th></tr>\n";
  for (const auto& [name, n] : r.ops) h += "<tr><td>" + escape(name) + "</td><td>" + std::to_string(n) + "</td></tr>\n";
  h += "</table>\n";

  for (const ExplainGraph& g : r.graphs) {
    h += "<h2>Graph " + escape(g.name) + "</h2>\n<p>variant " + std::to_string(g.variant) + ", segment " +
         std::to_string(g.segment) + ", " + std::to_string(g.num_ops) + " ops" +
         (g.has_backward ? ", forward + backward" : "") + "</p>\n";
    if (!g.precision.empty()) h += "<p>precision under bf16 autocast: " + escape(g.precision) + "</p>\n";
    h += "<div class=\"svg\">" + inline_svg(dot_to_svg(g.dot, g.name)) + "</div>\n";
    h += "<pre>" + escape(g.text) + "</pre>\n";
    if (!g.executable.empty())
      h += "<details><summary>after functionalization and the passes (what runs)</summary><pre>" +
           escape(g.executable) + "</pre></details>\n";
  }
  h += "</body></html>\n";
  return h;
}

void write_explain_html(const ExplainReport& report, const std::string& title, const std::string& path) {
  write_file_atomically(path, explain_html(report, title), "explain --html");
}

}  // namespace kiln::compiler
