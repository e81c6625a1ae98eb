// kiln report end to end: the built program writes a small report (the
// tutorial CNN on Fashion-MNIST, a few steps), and headless Chromium parses
// it and takes a screenshot, kept under the build directory and named in the
// test's output. Every chart must be in the page with data drawn: line series
// with points, bars with height, no NaN in a coordinate, and in the pixels.
//
// Chromium is required, not optional: without it the test fails and says how
// to install it (./kiln test installs it with the report's packages).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/report_page.h"
#include "data/data_internal.h"
#include "kiln/cuda.h"
#include "testing/errors.h"

namespace fs = std::filesystem;

namespace {

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Runs a shell command; its exit status (128 + signal when killed).
int shell(const std::string& cmd) {
  int status = std::system(cmd.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string chromium_path() {
  for (const char* name : {"chromium", "chromium-browser"}) {
    for (const char* dir : {"/usr/bin", "/usr/local/bin", "/bin"}) {
      fs::path p = fs::path(dir) / name;
      if (fs::exists(p)) return p.string();
    }
  }
  return "";
}

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

struct Chart {
  std::string kind, title, body;
};

// Each <svg class="chart" ...>...</svg> of the page, with its kind and <title>.
std::vector<Chart> charts_in(const std::string& html) {
  std::vector<Chart> out;
  std::regex open_re("<svg class=\"chart\" data-chart=\"(line|bar)\"");
  for (auto it = std::sregex_iterator(html.begin(), html.end(), open_re); it != std::sregex_iterator(); ++it) {
    size_t start = static_cast<size_t>(it->position());
    size_t end = html.find("</svg>", start);
    if (end == std::string::npos) break;
    Chart c{(*it)[1], "", html.substr(start, end - start)};
    size_t t0 = c.body.find("<title>"), t1 = c.body.find("</title>");
    if (t0 != std::string::npos && t1 != std::string::npos) c.title = c.body.substr(t0 + 7, t1 - t0 - 7);
    out.push_back(c);
  }
  return out;
}

// Points in a path's d attribute ("M1 2 L3 4 L5 6" has 3).
int points_in(const std::string& d) { return count(d, "M") + count(d, "L"); }

}  // namespace

TEST(CliReport, RendersInHeadlessChromiumWithEveryChartDrawn) {
  const std::string chromium = chromium_path();
  ASSERT_FALSE(chromium.empty())
      << "Chromium is not installed, and this test renders kiln report's page in it. Install it with "
         "`apt-get install chromium` (Debian's package; ./kiln test installs it), then run the test again.";

  const fs::path dir = fs::path(KILN_E2E_OUT_DIR) / "report";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path page = dir / "report.html", dom = dir / "dom.html", png = dir / "report.png";

  // A tiny report: one model, two epochs of a few steps (the page's shape, not its numbers, is under test).
  const std::string report_cmd = std::string("cd '") + dir.string() + "' && OMP_NUM_THREADS=2 '" + KILN_BIN +
                                 "' report --models tutorial --modes eager,default --data fashion-mnist "
                                 "--epochs 2 --steps 4 --out '" + page.string() + "' >out.txt 2>err.txt";
  ASSERT_EQ(shell(report_cmd), 0) << "stdout:\n" << read_file(dir / "out.txt") << "\nstderr:\n" << read_file(dir / "err.txt");
  EXPECT_NE(read_file(dir / "out.txt").find("wrote"), std::string::npos);
  EXPECT_NE(read_file(dir / "err.txt").find("kiln report ["), std::string::npos) << "progress lines on stderr";

  const std::string html = read_file(page);
  ASSERT_FALSE(html.empty());
  // Self-contained: nothing fetched, no script.
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("src=\""), std::string::npos);
  EXPECT_EQ(html.find("href=\"http"), std::string::npos);
  EXPECT_EQ(html.find("@import"), std::string::npos);

  // Every chart the page promises for the model, each with its data drawn.
  std::vector<Chart> charts = charts_in(html);
  std::vector<std::string> titles;
  for (const Chart& c : charts) titles.push_back(c.title);
  const std::vector<std::string> want = {
      "tutorial: images/s per mode and phase",  "tutorial: compile seconds, cold and warm",
      "tutorial: training loss per epoch",      "tutorial: test accuracy per epoch",
      "tutorial: test accuracy per epoch, layer fusion", "tutorial: training images/s, layer fusion"};
  EXPECT_EQ(titles, want);
  std::regex d_re("<path class=\"series\"[^>]* d=\"([^\"]*)\"");
  std::regex height_re("<rect class=\"bar\"[^>]* height=\"([0-9.]+)\"");
  for (const Chart& c : charts) {
    SCOPED_TRACE(c.title);
    for (const char* bad : {"nan", "NaN", "inf\""}) EXPECT_EQ(c.body.find(bad), std::string::npos) << bad;
    if (c.kind == "line") {
      int series = 0;
      for (auto it = std::sregex_iterator(c.body.begin(), c.body.end(), d_re); it != std::sregex_iterator(); ++it) {
        ++series;
        EXPECT_EQ(points_in((*it)[1]), 2) << "two epochs, two points: " << (*it)[1];
      }
      // Training curves: eager and compiled; layer fusion: k = 0, 1, 2.
      EXPECT_EQ(series, c.title.find("layer fusion") != std::string::npos ? 3 : 2);
    } else {
      int bars = 0;
      for (auto it = std::sregex_iterator(c.body.begin(), c.body.end(), height_re); it != std::sregex_iterator(); ++it)
        if (std::stod((*it)[1]) > 0) ++bars;
      EXPECT_GE(bars, 1) << "a bar chart with no visible bar";
    }
  }
  // Every run happened: the compiled one (kiln train --compile) and k = 1, 2.
  EXPECT_EQ(html.find("not run"), std::string::npos);
  EXPECT_NE(html.find("compiled (default)"), std::string::npos);
  EXPECT_NE(html.find("k = 2"), std::string::npos);

  // Chromium parses the page into the same charts (a markup error would drop or nest them).
  const std::string flags = " --headless --no-sandbox --disable-gpu --hide-scrollbars ";
  ASSERT_EQ(shell("'" + chromium + "'" + flags + "--dump-dom 'file://" + page.string() + "' >'" + dom.string() +
                  "' 2>/dev/null"),
            0);
  const std::string parsed = read_file(dom);
  EXPECT_EQ(count(parsed, "<svg class=\"chart\""), static_cast<int>(charts.size()));
  EXPECT_EQ(count(parsed, "<path class=\"series\""), count(html, "<path class=\"series\""));
  EXPECT_EQ(count(parsed, "<rect class=\"bar\""), count(html, "<rect class=\"bar\""));
  EXPECT_GT(count(parsed, "<rect class=\"bar\""), 0);

  // The screenshot: tall enough for the whole page, kept for a person to look at.
  ASSERT_EQ(shell("'" + chromium + "'" + flags + "--window-size=1200,6000 --screenshot='" + png.string() +
                  "' 'file://" + page.string() + "' >/dev/null 2>&1"),
            0);
  ASSERT_TRUE(fs::exists(png));
  std::cout << "kiln report screenshot: " << png.string() << "\n";
  RecordProperty("screenshot", png.string());
  const std::string bytes = read_file(png);
  kiln::data::detail::DecodedImage img =
      kiln::data::detail::decode_image(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), png.string(), 3);
  EXPECT_EQ(img.width, 1200);
  // The charts' first two series colours (#1f77b4, #ff7f0e) are drawn: bars and lines reached the pixels.
  std::map<std::string, int64_t> seen;
  int64_t not_white = 0;
  for (size_t i = 0; i + 2 < img.pixels.size(); i += 3) {
    const uint8_t r = img.pixels[i], g = img.pixels[i + 1], b = img.pixels[i + 2];
    if (r == 0x1f && g == 0x77 && b == 0xb4) ++seen["blue"];
    if (r == 0xff && g == 0x7f && b == 0x0e) ++seen["orange"];
    if (r < 250 || g < 250 || b < 250) ++not_white;
  }
  EXPECT_GT(seen["blue"], 2000) << "the first series' colour hardly appears in " << png.string();
  EXPECT_GT(seen["orange"], 1000) << "the second series' colour hardly appears in " << png.string();
  EXPECT_GT(not_white, img.width * img.height / 50) << png.string() << " is nearly blank";
}

// What a user can get wrong is reported before any measuring, with the fix:
// the command line's usage errors (exit 2), and kiln::Error (exit 1) for an
// --out that cannot be written and a --device cuda with no GPU.
TEST(CliReport, ChecksModelsOutputAndDeviceBeforeMeasuring) {
  const fs::path dir = fs::path(KILN_E2E_OUT_DIR) / "report-errors";
  fs::remove_all(dir);
  fs::create_directories(dir);
  auto run = [&](const std::string& args, std::string* err) {
    int rc = shell(std::string("cd '") + dir.string() + "' && '" + KILN_BIN + "' report " + args +
                   " >out.txt 2>err.txt");
    *err = read_file(dir / "err.txt");
    return rc;
  };
  std::string err;
  EXPECT_EQ(run("--models tutorial,vgg", &err), 2) << err;
  EXPECT_NE(err.find("unknown model 'vgg'"), std::string::npos) << err;

  EXPECT_EQ(run("--models tutorial --out /nonexistent/dir/r.html", &err), 1) << err;
  EXPECT_NE(err.find("/nonexistent/dir does not exist"), std::string::npos) << err;
  EXPECT_EQ(err.find("loading"), std::string::npos) << "checked before the data is loaded\n" << err;

  fs::create_directories(dir / "a_dir");
  EXPECT_EQ(run("--models tutorial --out a_dir", &err), 1) << err;
  EXPECT_NE(err.find("a_dir is a directory"), std::string::npos) << err;

  if (!kiln::cuda::is_available()) {
    EXPECT_EQ(run("--models tutorial --device cuda --out r.html", &err), 1) << err;
    EXPECT_NE(err.find("report --device cuda"), std::string::npos) << err;
    EXPECT_NE(err.find("--device cpu"), std::string::npos) << err;
  }
  EXPECT_FALSE(fs::exists(dir / "r.html"));

  // In-process callers get the same checks as kiln::Error (the command line's validator comes first otherwise).
  kiln::cli::ReportOptions o;
  o.models = {"vgg"};
  EXPECT_TRUE(kiln::testing::error_says([&] { kiln::cli::run_report(o); }, {"unknown model 'vgg'", "airbench"}));
}

// The page from made-up numbers: the sections that wait for other work (a
// compiled training run, layer fusion k > 0, explain's fused kernels) draw
// their data as soon as it is there, with no change to the page code.
TEST(CliReport, PageDrawsEveryRunAndFusedKernelItIsGiven) {
  using kiln::cli::EpochRecord;
  using kiln::cli::TrainingRun;
  kiln::cli::ModelReport m;
  m.model = "airbench";
  m.bench = {{"airbench", "eager", "train", 400, -1, -1, 10},
             {"airbench", "default", "train", 480, 0.8, 0.05, 10},
             {"airbench", "eager", "eval", 1300, -1, -1, 10},
             {"airbench", "default", "eval", 1500, 0.25, 0.01, 10}};
  auto run = [](const std::string& label, double acc0, double ips) {
    TrainingRun r;
    r.label = label;
    r.epochs = {EpochRecord{1, 1.9, acc0, ips, 1000, 30}, EpochRecord{2, 1.5, acc0 + 0.1, ips, 1000, 30}};
    r.train_img_per_s = ips;
    r.test_acc = acc0 + 0.1;
    return r;
  };
  m.training = {run("eager", 0.5, 400), run("compiled (default)", 0.5, 480)};
  m.layer_fusion = {run("k = 0", 0.5, 400), run("k = 2", 0.48, 520)};
  m.layer_fusion.back().detail = "conv3 ~ conv4 (0.91)";
  m.explain = nlohmann::json::parse(R"({"graphs": [{"name": "airbench_train_step", "num_ops": 237, "has_backward": true}],
      "ops": {"conv2d": 8, "add_": 30}, "graph_breaks": [], "variants": 1,
      "saved_bytes_eager": 1000, "saved_bytes_partitioned": 800,
      "fused_kernels": [{"graph": "airbench_train_step", "kernel": "k0", "ops": ["mul", "add", "relu"],
                         "bytes_not_written": 4096}]})");
  m.explain_what = "train step (batch 8)";
  kiln::cli::ReportData d;
  d.command = "kiln report --models airbench <test>";
  d.models = {m};
  const std::string html = kiln::cli::report_html(d);

  EXPECT_EQ(html.find("<test>"), std::string::npos) << "the command line is escaped";
  EXPECT_NE(html.find("&lt;test&gt;"), std::string::npos);
  EXPECT_EQ(html.find("not run"), std::string::npos) << "every run has data, so nothing is marked missing";
  std::vector<Chart> charts = charts_in(html);
  ASSERT_EQ(charts.size(), 6u);
  EXPECT_EQ(count(charts[2].body, "<path class=\"series\""), 2) << "loss: eager and compiled";
  EXPECT_EQ(count(charts[4].body, "<path class=\"series\""), 2) << "layer fusion accuracy: k = 0 and k = 2";
  EXPECT_EQ(count(charts[5].body, "<rect class=\"bar\""), 2) << "layer fusion img/s: k = 0 and k = 2";
  EXPECT_NE(html.find("<td class=\"num\">1.20x</td>"), std::string::npos) << "compiled train 480 / eager 400";
  EXPECT_NE(html.find("data-value=\"480\""), std::string::npos);
  // explain's fused kernels, one row each, one column per field.
  EXPECT_NE(html.find("<th>bytes_not_written</th>"), std::string::npos);
  EXPECT_NE(html.find("<td>mul, add, relu</td>"), std::string::npos);
  EXPECT_NE(html.find("<td class=\"num\">4096</td>"), std::string::npos);
  EXPECT_EQ(html.find("does not list fused kernels"), std::string::npos);
  EXPECT_NE(html.find("conv3 ~ conv4 (0.91)"), std::string::npos);
}
