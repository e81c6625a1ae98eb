// The report's SVG charts (src/report/svg_chart.h): tick choice, escaping,
// gaps for non-finite values (never a NaN in a path), the markup tests and
// kiln report's browser test read back, and the errors for charts with
// nothing to draw.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <regex>
#include <string>
#include <vector>

#include "report/markup.h"
#include "report/svg_chart.h"
#include "testing/errors.h"

namespace kiln::report {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// The d attributes of the <path class="series"> elements, in order.
std::vector<std::string> series_paths(const std::string& svg) {
  std::vector<std::string> out;
  std::regex path_re("<path class=\"series\"[^>]* d=\"([^\"]*)\"");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), path_re); it != std::sregex_iterator(); ++it)
    out.push_back((*it)[1]);
  return out;
}

TEST(SvgChart, NiceTicksCoverTheRangeWithRoundSteps) {
  std::vector<double> t = nice_ticks(0.0, 1.0, 6);
  std::vector<double> want = {0, 0.2, 0.4, 0.6, 0.8, 1.0};
  ASSERT_EQ(t.size(), want.size());
  for (size_t i = 0; i < t.size(); ++i) EXPECT_NEAR(t[i], want[i], 1e-12);
  t = nice_ticks(13, 987, 5);  // rough step 243.5: the next of 1, 2, 5 x 100 is 500
  EXPECT_EQ(t.front(), 0);
  EXPECT_GE(t.back(), 987);
  EXPECT_DOUBLE_EQ(t[1] - t[0], 500);
  // Whole-number axes (epochs) never step by fractions.
  t = nice_ticks(1, 3, 6, /*integer=*/true);
  EXPECT_EQ(t, (std::vector<double>{1, 2, 3}));
  // One value: a band around it, still at least two ticks.
  t = nice_ticks(5, 5, 5);
  ASSERT_GE(t.size(), 2u);
  EXPECT_LE(t.front(), 5);
  EXPECT_GE(t.back(), 5);
  t = nice_ticks(0, 0, 5);
  EXPECT_EQ(t.front(), 0);
  EXPECT_GE(t.back(), 1);
}

TEST(SvgChart, TickLabelsShowTheDecimalsTheStepNeeds) {
  EXPECT_EQ(tick_label(0.6000000000000001, 0.2), "0.6");
  EXPECT_EQ(tick_label(1500, 500), "1500");
  EXPECT_EQ(tick_label(0.05, 0.05), "0.05");
  EXPECT_EQ(tick_label(-0.0, 1), "0");
}

TEST(SvgChart, EscapesEveryMarkupCharacter) {
  EXPECT_EQ(html_escape("a<b>&\"c'"), "a&lt;b&gt;&amp;&quot;c&#39;");
  LineChart c;
  c.title = "loss <script>alert(1)</script>";
  c.x_label = "epoch";
  c.y_label = "loss & more";
  c.series = {{"run \"A\"", {1, 2}, {0.5, 0.4}}};
  std::string svg = line_chart_svg(c);
  EXPECT_EQ(svg.find("<script>"), std::string::npos) << svg;
  EXPECT_NE(svg.find("loss &lt;script&gt;"), std::string::npos);
  EXPECT_NE(svg.find("loss &amp; more"), std::string::npos);
  EXPECT_NE(svg.find("data-series=\"run &quot;A&quot;\""), std::string::npos);
}

TEST(SvgChart, LineChartDrawsOnePathPerSeriesWithAMarkerPerPoint) {
  LineChart c;
  c.title = "test accuracy";
  c.x_label = "epoch";
  c.y_label = "%";
  c.integer_x = true;
  c.series = {{"eager", {1, 2, 3}, {40, 55, 61}}, {"compiled", {1, 2, 3}, {42, 54, 60}, true}};
  std::string svg = line_chart_svg(c);
  EXPECT_EQ(svg.rfind("<svg class=\"chart\" data-chart=\"line\"", 0), 0u) << svg.substr(0, 80);
  EXPECT_NE(svg.find("<title>test accuracy</title>"), std::string::npos);
  std::vector<std::string> d = series_paths(svg);
  ASSERT_EQ(d.size(), 2u) << svg;
  for (const std::string& p : d) {
    EXPECT_EQ(count(p, "M"), 1) << p;
    EXPECT_EQ(count(p, "L"), 2) << p;
  }
  EXPECT_EQ(count(svg, "<circle class=\"point\""), 6);
  EXPECT_EQ(count(svg, "stroke-dasharray"), 2);  // the dashed series and its legend swatch
  EXPECT_EQ(count(svg, "class=\"legend\""), 2);
  // The lowest value sits lower on the page (larger y) than the highest.
  std::regex first_point("M([0-9.]+) ([0-9.]+) L([0-9.]+) ([0-9.]+) L([0-9.]+) ([0-9.]+)");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(d[0], m, first_point)) << d[0];
  EXPECT_GT(std::stod(m[2]), std::stod(m[6]));  // 40 % below 61 %
  EXPECT_LT(std::stod(m[1]), std::stod(m[5]));  // epoch 1 left of epoch 3
}

TEST(SvgChart, NonFiniteValuesAreGapsNeverNaNInAPath) {
  LineChart c;
  c.title = "loss";
  c.series = {{"with a gap", {1, 2, 3, 4}, {1.0, kNaN, 0.8, 0.7}},
              {"not run", {1, 2}, {kNaN, std::numeric_limits<double>::infinity()}}};
  std::string svg = line_chart_svg(c);
  std::vector<std::string> d = series_paths(svg);
  ASSERT_EQ(d.size(), 1u) << "a series with no finite point draws no path, only its legend row\n" << svg;
  EXPECT_EQ(count(d[0], "M"), 2) << "the gap starts a new piece: " << d[0];
  for (const char* bad : {"nan", "NaN", "inf"}) EXPECT_EQ(svg.find(bad), std::string::npos) << bad << "\n" << svg;
  EXPECT_NE(svg.find(">not run</text>"), std::string::npos);

  BarChart b;
  b.title = "img/s";
  b.groups = {"train", "eval"};
  b.series = {"eager", "default"};
  b.values = {{100, 300}, {kNaN, 320}};
  svg = bar_chart_svg(b);
  EXPECT_EQ(count(svg, "<rect class=\"bar\""), 3);
  EXPECT_EQ(count(svg, ">n/a</text>"), 1);
  for (const char* bad : {"nan", "NaN", "inf"}) EXPECT_EQ(svg.find(bad), std::string::npos) << bad;
}

TEST(SvgChart, BarHeightsAreProportionalToTheValues) {
  BarChart b;
  b.title = "images/s";
  b.y_label = "img/s";
  b.groups = {"train"};
  b.series = {"eager", "default"};
  b.values = {{200}, {400}};
  std::string svg = bar_chart_svg(b);
  std::regex bar_re("<rect class=\"bar\" data-series=\"([a-z]+)\" data-group=\"train\" data-value=\"([0-9.]+)\" "
                    "x=\"[0-9.]+\" y=\"[0-9.]+\" width=\"[0-9.]+\" height=\"([0-9.]+)\"");
  std::vector<double> heights;
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), bar_re); it != std::sregex_iterator(); ++it)
    heights.push_back(std::stod((*it)[3]));
  ASSERT_EQ(heights.size(), 2u) << svg;
  EXPECT_NEAR(heights[1] / heights[0], 2.0, 0.02);
  EXPECT_NE(svg.find("data-value=\"400\""), std::string::npos);
}

TEST(SvgChart, ChartsWithNothingToDrawAreErrors) {
  LineChart c;
  c.title = "loss";
  c.series = {{"eager", {1, 2}, {kNaN, kNaN}}};
  EXPECT_TRUE(kiln::testing::error_says([&] { line_chart_svg(c); }, {"loss", "no series has a finite point"}));
  c.series = {{"eager", {1, 2}, {0.5}}};
  EXPECT_TRUE(kiln::testing::error_says([&] { line_chart_svg(c); }, {"2 x values and 1 y values"}));
  c.title = "";
  c.series = {{"eager", {1}, {0.5}}};
  EXPECT_TRUE(kiln::testing::error_says([&] { line_chart_svg(c); }, {"needs a title"}));

  BarChart b;
  b.title = "img/s";
  b.groups = {"train"};
  b.series = {"eager"};
  b.values = {{kNaN}};
  EXPECT_TRUE(kiln::testing::error_says([&] { bar_chart_svg(b); }, {"img/s", "no finite value"}));
  b.values = {};
  EXPECT_TRUE(kiln::testing::error_says([&] { bar_chart_svg(b); }, {"0 value rows for 1 series"}));
}

}  // namespace
}  // namespace kiln::report
