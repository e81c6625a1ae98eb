// kiln report's page (report_page.h): the summary, then per model the speed
// charts, the training curves, the layer-fusion runs and the compiled graph.
#include "cli/report_page.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <set>

#include "kiln/error.h"
#include "report/markup.h"
#include "report/svg_chart.h"

namespace kiln::cli {
namespace {

using report::append;
using report::html_escape;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

const char* const kStyle =
    "body{font-family:system-ui,sans-serif;margin:24px auto;max-width:1100px;padding:0 16px;color:#222}"
    "h1{margin-bottom:4px}h2{border-bottom:2px solid #ddd;padding-bottom:4px;margin-top:40px}"
    "h3{margin-top:28px}.meta{color:#555;font-size:14px}"
    "table{border-collapse:collapse;margin:8px 0 16px}"
    "th,td{border:1px solid #ccc;padding:3px 10px;text-align:left;font-size:14px}"
    "td.num{text-align:right;font-variant-numeric:tabular-nums}th{background:#f4f4f4}"
    "code{background:#f4f4f4;padding:1px 4px}"
    ".note{background:#fff8e1;border-left:4px solid #f0b400;padding:6px 12px;margin:8px 0;font-size:14px}"
    ".charts{display:flex;flex-wrap:wrap;gap:12px}.chart{background:#fff;border:1px solid #e5e5e5}";

// `v` with `decimals` decimals; "-" for a value not measured (negative or not finite).
std::string fixed(double v, int decimals) {
  if (!std::isfinite(v) || v < 0) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}
std::string percent(double fraction) { return fixed(100 * fraction, 2) + " %"; }
double or_nan(double v) { return v < 0 ? kNaN : v; }

std::string cell(const std::string& text, bool number = false) {
  std::string s;
  append(s, number ? "<td class=\"num\">" : "<td>", html_escape(text), "</td>");
  return s;
}
std::string header_row(const std::vector<std::string>& names) {
  std::string s = "<tr>";
  for (const std::string& n : names) append(s, "<th>", html_escape(n), "</th>");
  return s + "</tr>\n";
}
std::string note(const std::string& text) {
  std::string s;
  append(s, "<p class=\"note\">", html_escape(text), "</p>\n");
  return s;
}

const ModelBenchCase* find_case(const ModelReport& m, const std::string& mode, const std::string& phase) {
  for (const ModelBenchCase& c : m.bench)
    if (c.mode == mode && c.phase == phase) return &c;
  return nullptr;
}

// The modes and phases measured, in the order they were.
std::vector<std::string> distinct(const std::vector<ModelBenchCase>& cases, std::string ModelBenchCase::*field) {
  std::vector<std::string> out;
  for (const ModelBenchCase& c : cases)
    if (std::find(out.begin(), out.end(), c.*field) == out.end()) out.push_back(c.*field);
  return out;
}

std::string machine_section(const MachineInfo& m) {
  std::string s = "<h2 id=\"machine\">Machine</h2>\n<table>\n";
  auto row = [&](const char* key, const std::string& value) {
    append(s, "<tr><th>", key, "</th>", cell(value), "</tr>\n");
  };
  row("CPU", m.cpu_model);
  row("logical CPUs", std::to_string(m.logical_cpus));
  row("threads (OpenMP)", std::to_string(m.threads));
  row("kernels' ISA", m.isa);
  row("memory", m.memory);
  row("OS", m.os);
  row("device", m.device);
  row("kiln", m.kiln_version);
  row("commit", m.commit);
  row("date", m.date);
  return s + "</table>\n";
}

std::string summary_section(const ReportData& d) {
  std::string s = "<h2 id=\"summary\">Summary</h2>\n<table>\n";
  s += header_row({"model", "phase", "mode", "img/s", "vs eager", "cold compile s", "warm start s"});
  for (const ModelReport& m : d.models)
    for (const ModelBenchCase& c : m.bench) {
      const ModelBenchCase* eager = find_case(m, "eager", c.phase);
      const double vs = eager && eager->img_per_s > 0 ? c.img_per_s / eager->img_per_s : -1;
      append(s, "<tr>", cell(m.model), cell(c.phase), cell(c.mode), cell(fixed(c.img_per_s, 1), true),
             cell(vs < 0 ? "-" : fixed(vs, 2) + "x", true), cell(fixed(c.compile_s, 2), true),
             cell(fixed(c.warm_s, 2), true), "</tr>\n");
    }
  append(s, "</table>\n<table>\n",
         header_row({"model", "training run", "epochs", "final train loss", "final test accuracy", "train img/s"}));
  for (const ModelReport& m : d.models)
    for (const TrainingRun& r : m.training) {
      if (r.epochs.empty()) {
        append(s, "<tr>", cell(m.model), cell(r.label), "<td colspan=\"4\">not run: ", html_escape(r.missing),
               "</td></tr>\n");
        continue;
      }
      append(s, "<tr>", cell(m.model), cell(r.label), cell(std::to_string(r.epochs.size()), true),
             cell(fixed(r.epochs.back().train_loss, 4), true), cell(percent(r.test_acc), true),
             cell(fixed(r.train_img_per_s, 1), true), "</tr>\n");
    }
  return s + "</table>\n";
}

std::string speed_section(const ModelReport& m) {
  KILN_CHECK(!m.bench.empty(), "report: model ", m.model, " has no bench case to draw");
  const std::vector<std::string> modes = distinct(m.bench, &ModelBenchCase::mode);
  const std::vector<std::string> phases = distinct(m.bench, &ModelBenchCase::phase);
  std::string s = "<h3>Eager against compiled: images/s</h3>\n<div class=\"charts\">\n";

  report::BarChart rate;
  rate.title = m.model + ": images/s per mode and phase";
  rate.y_label = "images/s (higher is better)";
  rate.groups = phases;
  rate.series = modes;
  for (const std::string& mode : modes) {
    std::vector<double> row;
    for (const std::string& phase : phases) {
      const ModelBenchCase* c = find_case(m, mode, phase);
      row.push_back(c ? c->img_per_s : kNaN);
    }
    rate.values.push_back(row);
  }
  s += report::bar_chart_svg(rate);

  // Cold compile and warm start of each compiled mode and phase.
  report::BarChart compile;
  compile.title = m.model + ": compile seconds, cold and warm";
  compile.y_label = "seconds (lower is better)";
  compile.series = {"cold compile (empty cache)", "warm start (second process)"};
  compile.values.resize(2);
  for (const ModelBenchCase& c : m.bench) {
    if (c.mode == "eager") continue;
    compile.groups.push_back(c.phase + " " + c.mode);
    compile.values[0].push_back(or_nan(c.compile_s));
    compile.values[1].push_back(or_nan(c.warm_s));
  }
  if (!compile.groups.empty()) s += report::bar_chart_svg(compile);
  s += "</div>\n";
  if (compile.groups.empty()) s += note("No compiled mode was measured (--modes eager), so there is no compile chart.");
  s += "<p>Each case is one <code>kiln bench models</code> case (docs/benchmarks.md): random inputs at the recipe's "
       "batch of 128, no data loader; a train step is the recipe's whole SGD step, eval a forward under no_grad. "
       "The cold compile is the first call less the second; the warm start is the same in a second process that "
       "finds the kernel cache filled.</p>\n";
  return s;
}

// A line chart over the runs' epochs: one series per run, a run without data
// a legend row that says so.
std::string epoch_chart(const std::string& title, const std::string& y_label, const std::vector<TrainingRun>& runs,
                        double (*value)(const EpochRecord&)) {
  report::LineChart c;
  c.title = title;
  c.x_label = "epoch";
  c.y_label = y_label;
  c.integer_x = true;
  for (size_t i = 0; i < runs.size(); ++i) {
    const TrainingRun& r = runs[i];
    report::LineSeries ser;
    ser.label = r.epochs.empty() ? r.label + ": not run (see below)" : r.label;
    ser.dashed = i > 0;
    for (const EpochRecord& e : r.epochs) {
      ser.x.push_back(static_cast<double>(e.epoch));
      ser.y.push_back(value(e));
    }
    c.series.push_back(ser);
  }
  return report::line_chart_svg(c);
}

double loss_of(const EpochRecord& e) { return e.train_loss; }
double accuracy_of(const EpochRecord& e) { return 100 * e.test_acc; }

std::string missing_runs_notes(const std::vector<TrainingRun>& runs) {
  std::string s;
  for (const TrainingRun& r : runs)
    if (r.epochs.empty()) s += note(r.label + " is a gap in these charts: " + r.missing);
  return s;
}

std::string training_section(const ModelReport& m) {
  std::string s = "<h3>Training curves: eager against compiled</h3>\n<div class=\"charts\">\n";
  s += epoch_chart(m.model + ": training loss per epoch", "mean training loss", m.training, loss_of);
  s += epoch_chart(m.model + ": test accuracy per epoch", "test accuracy (%)", m.training, accuracy_of);
  append(s, "</div>\n", missing_runs_notes(m.training));
  return s;
}

std::string layer_fusion_section(const ModelReport& m) {
  std::string s = "<h3>Layer fusion: k = 0..K frozen pairs</h3>\n";
  if (!m.layer_fusion_note.empty()) s += note(m.layer_fusion_note);
  s += "<div class=\"charts\">\n";
  s += epoch_chart(m.model + ": test accuracy per epoch, layer fusion", "test accuracy (%)", m.layer_fusion,
                   accuracy_of);
  report::BarChart speed;
  speed.title = m.model + ": training images/s, layer fusion";
  speed.y_label = "train images/s (higher is better)";
  speed.series = {"train img/s"};
  speed.values.resize(1);
  for (const TrainingRun& r : m.layer_fusion) {
    speed.groups.push_back(r.label);
    speed.values[0].push_back(r.epochs.empty() ? kNaN : r.train_img_per_s);
  }
  s += report::bar_chart_svg(speed) + "</div>\n<table>\n";
  s += header_row({"run", "final test accuracy", "train img/s", "frozen pairs"});
  for (const TrainingRun& r : m.layer_fusion)
    append(s, "<tr>", cell(r.label), cell(r.epochs.empty() ? "not run" : percent(r.test_acc), true),
           cell(r.epochs.empty() ? "-" : fixed(r.train_img_per_s, 1), true), cell(r.detail), "</tr>\n");
  return s + "</table>\n" + missing_runs_notes(m.layer_fusion);
}

// A JSON value as table text: strings bare, lists joined, the rest as JSON.
std::string json_text(const nlohmann::json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_array()) {
    std::string s;
    for (const auto& e : v) append(s, s.empty() ? "" : ", ", json_text(e));
    return s;
  }
  return v.dump();
}

std::string graph_section(const ModelReport& m) {
  const nlohmann::json& j = m.explain;
  std::string s;
  append(s, "<h3>The compiled ", html_escape(m.explain_what), ": graphs and fused kernels</h3>\n",
         "<p>From <code>kiln explain --model ", html_escape(m.model), " --train --json</code> (docs/explain.md).</p>\n",
         "<table>\n", header_row({"graph", "ops", "holds the backward"}));
  const nlohmann::json graphs = j.value("graphs", nlohmann::json::array());
  for (const auto& g : graphs)
    append(s, "<tr>", cell(g.value("name", "?")), cell(std::to_string(g.value("num_ops", 0)), true),
           cell(g.value("has_backward", false) ? "yes" : "no"), "</tr>\n");
  s += "</table>\n<table>\n";
  auto row = [&](const char* key, const std::string& value) {
    append(s, "<tr><th>", key, "</th>", cell(value, true), "</tr>\n");
  };
  row("graph breaks", std::to_string(j.value("graph_breaks", nlohmann::json::array()).size()));
  row("variants", std::to_string(j.value("variants", 0)));
  row("bytes eager autograd saves for the backward", std::to_string(j.value("saved_bytes_eager", int64_t{0})));
  row("bytes the partitioned forward hands the backward", std::to_string(j.value("saved_bytes_partitioned", int64_t{0})));
  s += "</table>\n";

  // Fused kernels: each kernel with the ops it covers and the bytes it no
  // longer writes, read as explain lists them (any fields it has).
  const auto kernels = j.value("fused_kernels", nlohmann::json::array());
  if (kernels.is_array() && !kernels.empty() && kernels.front().is_object()) {
    std::vector<std::string> keys;
    for (const auto& k : kernels)
      for (const auto& [key, value] : k.items())
        if (std::find(keys.begin(), keys.end(), key) == keys.end()) keys.push_back(key);
    append(s, "<table>\n", header_row(keys));
    for (const auto& k : kernels) {
      s += "<tr>";
      for (const std::string& key : keys) s += cell(k.contains(key) ? json_text(k[key]) : "", k.contains(key) && k[key].is_number());
      s += "</tr>\n";
    }
    s += "</table>\n";
  } else {
    s += note("kiln explain does not list fused kernels in this build (its JSON has no \"fused_kernels\"); the op "
              "counts below are the graph's nodes. The fused-kernel table fills in here, unchanged, once explain "
              "lists them.");
  }
  std::vector<std::pair<std::string, int64_t>> ops;
  const nlohmann::json op_counts = j.value("ops", nlohmann::json::object());
  for (const auto& [name, n] : op_counts.items())
    if (n.is_number_integer()) ops.emplace_back(name, n.get<int64_t>());
  std::stable_sort(ops.begin(), ops.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  append(s, "<details><summary>op counts (", std::to_string(ops.size()), " ops)</summary><table>\n",
         header_row({"op", "nodes"}));
  for (const auto& [name, n] : ops) append(s, "<tr>", cell(name), cell(std::to_string(n), true), "</tr>\n");
  return s + "</table></details>\n";
}

}  // namespace

std::string report_html(const ReportData& d) {
  std::string s = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                  "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
                  "<title>kiln report</title><style>";
  s += kStyle;
  s += "</style></head><body>\n<h1>kiln report</h1>\n";
  append(s, "<p class=\"meta\"><code>", html_escape(d.command), "</code><br>", html_escape(d.settings), "<br>",
         html_escape(d.machine.date), ", ", fixed(d.wall_s, 1), " s to make</p>\n");
  s += "<p>Contents: <a href=\"#summary\">summary</a>, <a href=\"#machine\">machine</a>";
  for (const ModelReport& m : d.models) append(s, ", <a href=\"#model-", html_escape(m.model), "\">", html_escape(m.model), "</a>");
  s += "</p>\n";
  s += summary_section(d) + machine_section(d.machine);
  for (const ModelReport& m : d.models) {
    append(s, "<h2 id=\"model-", html_escape(m.model), "\">", html_escape(m.model), "</h2>\n");
    s += speed_section(m) + training_section(m) + layer_fusion_section(m) + graph_section(m);
  }
  s += "<p class=\"meta\">Written by <code>kiln report</code> (docs/report.md). One file: inline style and SVG, "
       "no script, nothing fetched.</p>\n</body></html>\n";
  return s;
}

}  // namespace kiln::cli
