// Charts as inline SVG text, for pages that must open offline with no script
// (kiln report): a line chart with axes, ticks, grid and legend, and a grouped
// bar chart. Every chart carries its title, its series' labels (escaped) and
// only finite coordinates: a non-finite value is drawn as a gap (a line) or as
// "n/a" (a bar), never written into a path.
//
// The markup is stable so tests can read it back: the root is
// <svg class="chart" data-chart="line|bar">; each line series is one
// <path class="series" data-series="LABEL" d="M.. L..">, each bar one
// <rect class="bar" data-series="LABEL" data-group="GROUP" data-value="V">.
#pragma once
#include <string>
#include <vector>

namespace kiln::report {

struct LineSeries {
  std::string label;
  std::vector<double> x, y;  // same length; a point with a non-finite x or y is a gap
  bool dashed = false;
};

struct LineChart {
  std::string title, x_label, y_label;
  std::vector<LineSeries> series;
  bool integer_x = false;  // x ticks on whole numbers only (epochs)
};

struct BarChart {
  std::string title, y_label;
  std::vector<std::string> groups;          // categories along the x axis
  std::vector<std::string> series;          // one bar per group for each (the legend)
  std::vector<std::vector<double>> values;  // [series][group]; non-finite: not measured, drawn as "n/a"
};

// kiln::Error when the title is empty, sizes disagree, or no point (bar) is finite.
std::string line_chart_svg(const LineChart& chart);
std::string bar_chart_svg(const BarChart& chart);

// Round tick values ({1, 2, 5} x 10^k steps) covering [lo, hi], about
// `target` of them; the first <= lo and the last >= hi. integer: steps >= 1.
std::vector<double> nice_ticks(double lo, double hi, int target, bool integer = false);
// A tick's text: as many decimals as the step between ticks needs, no more.
std::string tick_label(double value, double step);

}  // namespace kiln::report
