// The two chart kinds of svg_chart.h. Both share one frame: a title on top,
// the plot area with horizontal grid lines at the y ticks, the y label turned
// on the left, and the legend on the right.
#include "report/svg_chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "kiln/error.h"
#include "report/markup.h"

namespace kiln::report {
namespace {

constexpr double kMinWidth = 760, kPlotLeft = 72, kPlotRight = 560, kPlotTop = 40, kLegendX = 576;
constexpr const char* kPalette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728",
                                    "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"};

const char* color(size_t i) { return kPalette[i % (sizeof kPalette / sizeof kPalette[0])]; }

// A coordinate in the SVG: callers pass only finite values.
std::string num(double v) {
  KILN_ASSERT(std::isfinite(v), "svg chart: non-finite coordinate");
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

struct Range {
  double lo = std::numeric_limits<double>::infinity();
  double hi = -std::numeric_limits<double>::infinity();
  void add(double v) {
    if (!std::isfinite(v)) return;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  bool empty() const { return lo > hi; }
};

// Maps [ticks.front(), ticks.back()] onto [from, to] (pixels).
struct Axis {
  std::vector<double> ticks;
  double from, to;
  double step() const { return ticks.size() > 1 ? ticks[1] - ticks[0] : 1.0; }
  double operator()(double v) const {
    double lo = ticks.front(), hi = ticks.back();
    return from + (v - lo) / (hi - lo) * (to - from);
  }
};

// Wide enough for the longest legend label (about 7 px a character at 12 px).
double chart_width(const std::vector<std::string>& labels) {
  size_t longest = 0;
  for (const std::string& l : labels) longest = std::max(longest, l.size());
  return std::max(kMinWidth, kLegendX + 36 + 7 * static_cast<double>(longest));
}

void svg_open(std::string& s, const char* kind, const std::string& title, double width, double height) {
  const std::string t = html_escape(title), w = num(width), h = num(height);
  append(s, "<svg class=\"chart\" data-chart=\"", kind, "\" xmlns=\"http://www.w3.org/2000/svg\" width=\"", w,
      "\" height=\"", h, "\" viewBox=\"0 0 ", w, " ", h, "\" role=\"img\" aria-label=\"", t, "\">\n<title>", t,
      "</title>\n<text class=\"chart-title\" x=\"", num((kPlotLeft + kPlotRight) / 2),
      "\" y=\"22\" text-anchor=\"middle\" font-size=\"15\" font-weight=\"bold\">", t, "</text>\n");
}

void text(std::string& s, const char* cls, double x, double y, const char* anchor, const char* size,
          const std::string& content) {
  append(s, "<text class=\"", cls, "\" x=\"", num(x), "\" y=\"", num(y), "\" text-anchor=\"", anchor, "\" font-size=\"",
      size, "\">", html_escape(content), "</text>\n");
}

void line(std::string& s, const char* cls, double x1, double y1, double x2, double y2, const char* stroke) {
  append(s, "<line class=\"", cls, "\" x1=\"", num(x1), "\" y1=\"", num(y1), "\" x2=\"", num(x2), "\" y2=\"", num(y2),
      "\" stroke=\"", stroke, "\"/>\n");
}

// Grid lines and labels at the y ticks, the y label, and the two axis lines.
void y_axis(std::string& s, const Axis& y, const std::string& label, double plot_bottom) {
  for (double v : y.ticks) {
    line(s, "grid", kPlotLeft, y(v), kPlotRight, y(v), "#e3e3e3");
    text(s, "tick", kPlotLeft - 6, y(v) + 4, "end", "11", tick_label(v, y.step()));
  }
  const std::string mid = num((kPlotTop + plot_bottom) / 2);
  append(s, "<text class=\"axis-label\" x=\"16\" y=\"", mid,
      "\" text-anchor=\"middle\" font-size=\"12\" transform=\"rotate(-90 16 ", mid, ")\">", html_escape(label),
      "</text>\n");
  line(s, "axis", kPlotLeft, kPlotTop, kPlotLeft, plot_bottom, "#333");
  line(s, "axis", kPlotLeft, plot_bottom, kPlotRight, plot_bottom, "#333");
}

// One legend row per label, a swatch in the series' colour.
void legend(std::string& s, const std::vector<std::string>& labels, const std::vector<bool>& dashed) {
  for (size_t i = 0; i < labels.size(); ++i) {
    const double y = kPlotTop + 8 + 20 * static_cast<double>(i);
    append(s, "<line class=\"legend-swatch\" x1=\"", num(kLegendX), "\" y1=\"", num(y), "\" x2=\"", num(kLegendX + 22),
        "\" y2=\"", num(y), "\" stroke=\"", color(i), "\" stroke-width=\"3\"",
        dashed[i] ? " stroke-dasharray=\"6 4\"" : "", "/>\n");
    text(s, "legend", kLegendX + 28, y + 4, "start", "12", labels[i]);
  }
}

// The chart's height grows with the legend so a long legend never overflows.
double chart_height(size_t legend_rows, double min_height) {
  return std::max(min_height, kPlotTop + 8 + 20 * static_cast<double>(legend_rows) + 56);
}

}  // namespace

std::vector<double> nice_ticks(double lo, double hi, int target, bool integer) {
  KILN_ASSERT(std::isfinite(lo) && std::isfinite(hi) && lo <= hi && target >= 2, "nice_ticks: bad range");
  if (hi - lo < 1e-12 * std::max(1.0, std::abs(hi))) {
    // One value: a band around it (around 0: [0, 1]).
    const double pad = lo == 0 ? 1.0 : std::abs(lo) * 0.1;
    lo -= lo == 0 ? 0 : pad;
    hi += pad;
  }
  const double rough = (hi - lo) / (target - 1);
  const double mag = std::pow(10.0, std::floor(std::log10(rough)));
  double step = 10 * mag;
  for (double m : {1.0, 2.0, 5.0})
    if (m * mag >= rough) {
      step = m * mag;
      break;
    }
  if (integer) step = std::max(1.0, std::round(step));
  const double first = std::floor(lo / step + 1e-9) * step;
  std::vector<double> ticks;
  for (int i = 0; i < 1000; ++i) {  // 1000: a guard; there are about `target` ticks
    const double v = first + i * step;
    ticks.push_back(std::abs(v) < step * 1e-9 ? 0.0 : v);
    if (v >= hi - step * 1e-9) break;
  }
  if (ticks.size() < 2) ticks.push_back(first + step);
  return ticks;
}

std::string tick_label(double value, double step) {
  const int decimals = step > 0 ? std::clamp(static_cast<int>(std::ceil(-std::log10(step) - 1e-9)), 0, 9) : 0;
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, value);
  const std::string s = buf;
  return s == "-0" ? "0" : s;
}

std::string line_chart_svg(const LineChart& c) {
  KILN_CHECK(!c.title.empty(), "line chart: every chart needs a title");
  Range xr, yr;
  for (const LineSeries& s : c.series) {
    KILN_CHECK(s.x.size() == s.y.size(), "line chart '", c.title, "': series '", s.label, "' has ", s.x.size(),
               " x values and ", s.y.size(), " y values; give one y per x");
    for (size_t i = 0; i < s.x.size(); ++i)
      if (std::isfinite(s.x[i]) && std::isfinite(s.y[i])) {
        xr.add(s.x[i]);
        yr.add(s.y[i]);
      }
  }
  KILN_CHECK(!xr.empty(), "line chart '", c.title, "': no series has a finite point to draw");

  std::vector<std::string> labels;
  std::vector<bool> dashed;
  for (const LineSeries& s : c.series) {
    labels.push_back(s.label);
    dashed.push_back(s.dashed);
  }
  const double height = chart_height(labels.size(), 320);
  const double plot_bottom = height - 48;
  const Axis x{nice_ticks(xr.lo, xr.hi, 6, c.integer_x), kPlotLeft, kPlotRight};
  const Axis y{nice_ticks(yr.lo, yr.hi, 6), plot_bottom, kPlotTop};

  std::string s;
  svg_open(s, "line", c.title, chart_width(labels), height);
  y_axis(s, y, c.y_label, plot_bottom);
  for (double v : x.ticks) text(s, "tick", x(v), plot_bottom + 16, "middle", "11", tick_label(v, x.step()));
  text(s, "axis-label", (kPlotLeft + kPlotRight) / 2, plot_bottom + 36, "middle", "12", c.x_label);

  for (size_t i = 0; i < c.series.size(); ++i) {
    const LineSeries& ser = c.series[i];
    std::string d, dots;
    bool pen_down = false;
    for (size_t k = 0; k < ser.x.size(); ++k) {
      if (!std::isfinite(ser.x[k]) || !std::isfinite(ser.y[k])) {
        pen_down = false;  // a gap: the next point starts a new piece
        continue;
      }
      const std::string px = num(x(ser.x[k])), py = num(y(ser.y[k]));
      append(d, d.empty() ? "" : " ", pen_down ? "L" : "M", px, " ", py);
      pen_down = true;
      // A marker per point: a series of one point (or an isolated one) still shows.
      append(dots, "<circle class=\"point\" cx=\"", px, "\" cy=\"", py, "\" r=\"3\" fill=\"", color(i), "\"/>\n");
    }
    if (d.empty()) continue;
    append(s, "<path class=\"series\" data-series=\"", html_escape(ser.label), "\" d=\"", d,
        "\" fill=\"none\" stroke=\"", color(i), "\" stroke-width=\"2\"", ser.dashed ? " stroke-dasharray=\"6 4\"" : "",
        "/>\n", dots);
  }
  legend(s, labels, dashed);
  s += "</svg>\n";
  return s;
}

std::string bar_chart_svg(const BarChart& c) {
  KILN_CHECK(!c.title.empty(), "bar chart: every chart needs a title");
  KILN_CHECK(!c.groups.empty() && !c.series.empty(), "bar chart '", c.title,
             "': needs at least one group and one series");
  KILN_CHECK(c.values.size() == c.series.size(), "bar chart '", c.title, "': ", c.values.size(), " value rows for ",
             c.series.size(), " series; give one row per series");
  Range yr;
  yr.add(0.0);  // bars grow from zero
  bool any = false;
  for (size_t i = 0; i < c.values.size(); ++i) {
    KILN_CHECK(c.values[i].size() == c.groups.size(), "bar chart '", c.title, "': series '", c.series[i], "' has ",
               c.values[i].size(), " values for ", c.groups.size(), " groups");
    for (double v : c.values[i]) {
      yr.add(v);
      any = any || std::isfinite(v);
    }
  }
  KILN_CHECK(any, "bar chart '", c.title, "': no finite value to draw");
  yr.add(yr.hi * 1.08);  // headroom for the value printed above the tallest bar

  const double height = chart_height(c.series.size(), 300);
  const double plot_bottom = height - 48;
  const Axis y{nice_ticks(yr.lo, yr.hi, 6), plot_bottom, kPlotTop};
  std::string s;
  svg_open(s, "bar", c.title, chart_width(c.series), height);
  y_axis(s, y, c.y_label, plot_bottom);

  const double group_w = (kPlotRight - kPlotLeft) / static_cast<double>(c.groups.size());
  const double bar_w = std::min(48.0, group_w * 0.8 / static_cast<double>(c.series.size()));
  for (size_t g = 0; g < c.groups.size(); ++g) {
    const double center = kPlotLeft + group_w * (static_cast<double>(g) + 0.5);
    const double left = center - bar_w * static_cast<double>(c.series.size()) / 2;
    for (size_t i = 0; i < c.series.size(); ++i) {
      const double v = c.values[i][g];
      const double bx = left + bar_w * static_cast<double>(i);
      if (!std::isfinite(v)) {
        append(s, "<text class=\"missing\" x=\"", num(bx + bar_w / 2), "\" y=\"", num(y(0) - 4),
            "\" text-anchor=\"middle\" font-size=\"10\" fill=\"#888\">n/a</text>\n");
        continue;
      }
      const double top = std::min(y(v), y(0)), h = std::abs(y(v) - y(0));
      const std::string value = tick_label(v, std::abs(v) >= 100 ? 1.0 : std::abs(v) >= 1 ? 0.1 : 0.001);
      append(s, "<rect class=\"bar\" data-series=\"", html_escape(c.series[i]), "\" data-group=\"",
          html_escape(c.groups[g]), "\" data-value=\"", value, "\" x=\"", num(bx + 1), "\" y=\"", num(top),
          "\" width=\"", num(bar_w - 2), "\" height=\"", num(h), "\" fill=\"", color(i), "\"><title>",
          html_escape(c.series[i]), ", ", html_escape(c.groups[g]), ": ", value, "</title></rect>\n");
      text(s, "value", bx + bar_w / 2, top - 4, "middle", "10", value);
    }
    text(s, "tick", center, plot_bottom + 16, "middle", "12", c.groups[g]);
  }
  legend(s, c.series, std::vector<bool>(c.series.size(), false));
  s += "</svg>\n";
  return s;
}

}  // namespace kiln::report
