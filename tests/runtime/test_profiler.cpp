// kiln::Profile: exact op counts, nesting of composites, self times that add
// up, ranges around backward and the optimizer step, and a trace file in the
// Chrome trace event format.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "kiln/kiln.h"
#include "ops/dispatch_mode.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string temp_path(const std::string& name) {
  return (fs::temp_directory_path() / ("kiln_prof_" + std::to_string(::getpid()) + "_" + name)).string();
}

json read_json(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  return json::parse(in);
}

// The events of one name, in trace order.
std::vector<json> events_named(const json& trace, const std::string& name) {
  std::vector<json> out;
  for (const json& e : trace["traceEvents"])
    if (e["name"] == name) out.push_back(e);
  return out;
}

bool inside(const json& inner, const json& outer) {
  const double b = inner["ts"], e = b + inner["dur"].get<double>();
  const double ob = outer["ts"], oe = ob + outer["dur"].get<double>();
  return b >= ob && e <= oe;
}

TEST(Profiler, CountsEachOpCallExactly) {
  Tensor x = randn({8, 16}), w = randn({16, 4}), b = randn({4});
  Profile p;
  for (int i = 0; i < 3; ++i) x = relu(matmul(x, randn({16, 16})));
  Tensor y = addmm(b, x, w, 1.0, 1.0);  // a composite: matmul, then add
  p.stop();
  EXPECT_EQ(p.op_stats("matmul").calls, 4);  // 3 direct + 1 inside addmm
  EXPECT_EQ(p.op_stats("relu").calls, 3);
  EXPECT_EQ(p.op_stats("addmm").calls, 1);
  EXPECT_EQ(p.op_stats("add").calls, 1);  // addmm's bias
  EXPECT_EQ(p.op_stats("conv2d").calls, 0);
  EXPECT_EQ(y.shape(), (Shape{8, 4}));

  std::string table = p.table_string();
  EXPECT_NE(table.find("matmul"), std::string::npos) << table;
  EXPECT_NE(table.find("ops total "), std::string::npos) << table;
  EXPECT_NE(table.find(" ms wall ("), std::string::npos) << table;
  // Rows are sorted by self time, largest first.
  std::vector<OpStats> rows = p.op_stats();
  for (size_t i = 1; i < rows.size(); ++i) EXPECT_GE(rows[i - 1].self_ms, rows[i].self_ms);
}

TEST(Profiler, SelfTimesAddUpAndCompositesAreNotCountedTwice) {
  Tensor x = randn({64, 256}), w = randn({256, 256}), b = randn({256});
  Profile p;
  for (int i = 0; i < 4; ++i) x = addmm(b, x, w, 1.0, 1.0);
  p.stop();
  double self = 0, share = 0;
  for (const OpStats& s : p.op_stats()) {
    self += s.self_ms;
    share += s.share;
    EXPECT_LE(s.self_ms, s.total_ms + 1e-9) << s.name;
  }
  EXPECT_NEAR(self, p.ops_ms(), 1e-6);
  EXPECT_LE(p.ops_ms(), p.wall_ms());
  EXPECT_LE(share, 1.0 + 1e-9);
  // addmm's total holds its constituents; its self time excludes them.
  OpStats lin = p.op_stats("addmm"), mm = p.op_stats("matmul");
  EXPECT_GE(lin.total_ms, mm.total_ms);
  EXPECT_LT(lin.self_ms, lin.total_ms);
}

// A compute-heavy step: the time in ops should be nearly all of the wall
// time (the benchmark bench/profile_overhead measures the real figure; this
// only checks loosely, as timings vary on a shared machine).
TEST(Profiler, OpsCoverMostOfAComputeHeavyStep) {
  auto model = models::tutorial_cnn();
  optim::SGD opt(model->parameters(), optim::SGDOptions(0.01).momentum(0.9));
  Tensor x = randn({64, 3, 32, 32}), y = randint(0, 10, {64});
  auto step = [&] {
    Tensor loss = cross_entropy(model->forward(x), y);
    opt.zero_grad();
    loss.backward();
    opt.step();
  };
  step();  // warm-up: allocator cache, oneDNN primitives
  // The best of three profiles: another process taking the core between two
  // ops (ctest -j2, a build beside it) lengthens the wall time only, so one
  // quiet profile shows what the ops cover.
  double best = 0;
  std::string table;
  for (int attempt = 0; attempt < 3 && best < 0.8; ++attempt) {
    Profile p;
    for (int i = 0; i < 2; ++i) step();
    p.stop();
    best = std::max(best, p.ops_ms() / p.wall_ms());
    table = p.table_string();
  }
  EXPECT_GE(best, 0.8) << table;
}

TEST(Profiler, TraceFollowsTheChromeTraceEventFormat) {
  const std::string path = temp_path("trace.json");
  auto model = models::tutorial_cnn();
  optim::SGD opt(model->parameters(), optim::SGDOptions(0.01).momentum(0.9));
  Tensor x = randn({4, 3, 32, 32}), y = randint(0, 10, {4});
  size_t recorded = 0;
  {
    Profile p(path);
    Tensor loss = cross_entropy(model->forward(x), y);
    opt.zero_grad();
    loss.backward();
    opt.step();
    recorded = p.num_events();
  }  // written here
  ASSERT_TRUE(fs::exists(path));
  json trace = read_json(path);
  ASSERT_TRUE(trace.is_object());
  EXPECT_EQ(trace["displayTimeUnit"], "ms");
  ASSERT_TRUE(trace["traceEvents"].is_array());
  EXPECT_EQ(trace["traceEvents"].size(), recorded);
  for (const json& e : trace["traceEvents"]) {
    ASSERT_TRUE(e.contains("name") && e["name"].is_string()) << e;
    ASSERT_TRUE(e.contains("cat") && e["cat"].is_string()) << e;
    EXPECT_EQ(e["ph"], "X") << e;
    ASSERT_TRUE(e.contains("ts") && e["ts"].is_number()) << e;
    ASSERT_TRUE(e.contains("dur") && e["dur"].is_number()) << e;
    EXPECT_GE(e["dur"].get<double>(), 0.0) << e;
    ASSERT_TRUE(e.contains("pid") && e["pid"].is_number_integer()) << e;
    ASSERT_TRUE(e.contains("tid") && e["tid"].is_number_integer()) << e;
    EXPECT_EQ(e["pid"], static_cast<int>(::getpid()));
  }
  // The first conv2d's args name its input shapes.
  std::vector<json> convs = events_named(trace, "conv2d");
  ASSERT_EQ(convs.size(), 2u);  // the tutorial CNN's forward; backward has its own ops
  EXPECT_EQ(convs[0]["cat"], "op");
  EXPECT_EQ(convs[0]["args"]["inputs"].get<std::string>().rfind("float32[4, 3, 32, 32], float32[6, 3, 5, 5]", 0), 0u)
      << convs[0];
  // Backward's ops lie inside the backward range; so do the optimizer's.
  std::vector<json> backward = events_named(trace, "backward"), steps = events_named(trace, "optimizer.step");
  ASSERT_EQ(backward.size(), 1u);
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_EQ(backward[0]["cat"], "range");
  int ops_in_backward = 0, ops_in_step = 0;
  for (const json& e : trace["traceEvents"]) {
    if (e["cat"] != "op") continue;
    ops_in_backward += inside(e, backward[0]);
    ops_in_step += inside(e, steps[0]);
  }
  EXPECT_GT(ops_in_backward, 10);
  EXPECT_GE(ops_in_step, 10);  // 10 parameters, at least one update op each
  fs::remove(path);
}

TEST(Profiler, CompositeConstituentsNestInsideItsSpan) {
  const std::string path = temp_path("nest.json");
  Tensor x = randn({8, 16}), w = randn({16, 4}), b = randn({4});
  {
    Profile p;
    (void)addmm(b, x, w, 1.0, 1.0);
    p.stop();
    p.write_chrome_trace(path);
  }
  json trace = read_json(path);
  std::vector<json> lin = events_named(trace, "addmm");
  ASSERT_EQ(lin.size(), 1u);
  const auto& all = trace["traceEvents"];
  ASSERT_GE(all.size(), 3u);
  EXPECT_EQ(all[0]["name"], "addmm");  // events in order of begin: the composite first
  std::vector<std::string> nested;
  for (size_t i = 1; i < all.size(); ++i) {
    EXPECT_TRUE(inside(all[i], lin[0])) << all[i];
    nested.push_back(all[i]["name"]);
  }
  EXPECT_NE(std::find(nested.begin(), nested.end(), "matmul"), nested.end());
  EXPECT_NE(std::find(nested.begin(), nested.end(), "add"), nested.end());
  fs::remove(path);
}

TEST(Profiler, AFailingOpIsClosedAndLaterOpsDoNotNestUnderIt) {
  Profile p;
  EXPECT_THROW(matmul(randn({2, 3}), randn({4, 5})), Error);
  Tensor s = add(full({}, 1.0), full({}, 2.0));
  p.stop();
  EXPECT_EQ(p.op_stats("matmul").calls, 1);
  OpStats a = p.op_stats("add");
  EXPECT_EQ(a.calls, 1);
  EXPECT_DOUBLE_EQ(a.self_ms, a.total_ms);
  EXPECT_EQ(s.item(), 3.0);
}

TEST(Profiler, StopsRecordingAndLeavesTheModeStackEmpty) {
  EXPECT_TRUE(active_modes().empty());
  Profile p;
  EXPECT_TRUE(p.active());
  ASSERT_EQ(active_modes().size(), 1u);
  EXPECT_STREQ(active_modes()[0]->mode_name(), "profile");
  (void)relu(randn({4}));
  p.stop();
  p.stop();  // idempotent
  EXPECT_FALSE(p.active());
  EXPECT_TRUE(active_modes().empty());
  const double wall = p.wall_ms();
  (void)relu(randn({4}));
  { ProfileRange r("after"); }
  EXPECT_EQ(p.op_stats("relu").calls, 1);
  EXPECT_TRUE(p.range_stats().empty());
  EXPECT_EQ(p.wall_ms(), wall);  // the clock stopped too
}

TEST(Profiler, RangesWithoutAProfileDoNothingAndOtherThreadsAreNotRecorded) {
  { ProfileRange r("nobody listens"); }
  Profile p;
  {
    ProfileRange r("phase");
    std::thread([] { (void)relu(randn({4})); }).join();
    (void)neg(randn({4}));
  }
  p.stop();
  EXPECT_EQ(p.op_stats("relu").calls, 0);  // ran on another thread
  EXPECT_EQ(p.op_stats("neg").calls, 1);
  std::vector<RangeStats> ranges = p.range_stats();
  ASSERT_EQ(ranges.size(), 1u);
  EXPECT_EQ(ranges[0].name, "phase");
  EXPECT_EQ(ranges[0].calls, 1);
  EXPECT_GE(ranges[0].total_ms, p.op_stats("neg").total_ms);
  EXPECT_NE(p.table_string().find("phase"), std::string::npos);
}

TEST(Profiler, FromEnvProfilesOnlyWhenKilnProfileIsSet) {
  ::unsetenv("KILN_PROFILE");
  EXPECT_EQ(Profile::from_env(), nullptr);
  const std::string path = temp_path("env.json");
  ::setenv("KILN_PROFILE", path.c_str(), 1);
  {
    std::unique_ptr<Profile> p = Profile::from_env();
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(p->trace_path(), path);
    (void)relu(randn({4}));
  }
  ::unsetenv("KILN_PROFILE");
  json trace = read_json(path);
  EXPECT_EQ(events_named(trace, "relu").size(), 1u);
  fs::remove(path);
}

TEST(Profiler, AnUnwritableTracePathIsAClearError) {
  Profile p;
  p.stop();
  try {
    p.write_chrome_trace("/nonexistent-kiln-dir/trace.json");
    FAIL() << "expected kiln::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot create"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("directory exists"), std::string::npos) << e.what();
  }
  EXPECT_THROW(p.write_chrome_trace(""), Error);
}

}  // namespace
}  // namespace kiln
