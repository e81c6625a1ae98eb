// KILN_LOGS: category filtering, once-only events, the warning for unknown
// names, and the kept events tests read.
#include <gtest/gtest.h>

#include <cstdlib>
#include "kiln/source_location.h"
#include <string>
#include <vector>

#include "compiler/log.h"

namespace kiln::compiler {
namespace {

using testing::internal::CaptureStderr;
using testing::internal::GetCapturedStderr;

// Leaves the log as the environment says once a test ends.
class CompilerLog : public testing::Test {
 protected:
  void TearDown() override {
    ::unsetenv("KILN_LOGS");
    reset_logs();
  }
};

TEST_F(CompilerLog, PrintsOnlyTheEnabledCategories) {
  ::setenv("KILN_LOGS", "recompiles,guards", 1);
  reset_logs();
  EXPECT_TRUE(log_enabled(LogCategory::Recompiles));
  EXPECT_TRUE(log_enabled(LogCategory::Guards));
  EXPECT_FALSE(log_enabled(LogCategory::GraphBreaks));
  EXPECT_FALSE(log_enabled(LogCategory::Graphs));
  EXPECT_FALSE(log_enabled(LogCategory::Aot));
  CaptureStderr();
  log_event(LogCategory::Recompiles, "f: input 0 shape [4, 3] != [8, 3]");
  log_event(LogCategory::GraphBreaks, "item() at f.cpp:3");
  log_event(LogCategory::Guards, "shape(x) == [4, 3]");
  EXPECT_EQ(GetCapturedStderr(),
            "[kiln:recompiles] f: input 0 shape [4, 3] != [8, 3]\n"
            "[kiln:guards] shape(x) == [4, 3]\n");
  EXPECT_EQ(logged_events(LogCategory::Recompiles), (std::vector<std::string>{"f: input 0 shape [4, 3] != [8, 3]"}));
  EXPECT_TRUE(logged_events(LogCategory::GraphBreaks).empty());  // off: neither printed nor kept
}

TEST_F(CompilerLog, LogOncePrintsEachKeyOncePerCategory) {
  configure_logs("graph_breaks, recompiles");
  CaptureStderr();
  for (int i = 0; i < 3; ++i) {
    log_once(LogCategory::GraphBreaks, "item@f.cpp:10", "item() at f.cpp:10");
    log_once(LogCategory::GraphBreaks, "item@f.cpp:20", "item() at f.cpp:20");
    log_once(LogCategory::Recompiles, "item@f.cpp:10", "same key, other category");
  }
  EXPECT_EQ(GetCapturedStderr(),
            "[kiln:graph_breaks] item() at f.cpp:10\n"
            "[kiln:graph_breaks] item() at f.cpp:20\n"
            "[kiln:recompiles] same key, other category\n");
  EXPECT_EQ(logged_events(LogCategory::GraphBreaks).size(), 2u);
  // Forgetting the keys (a new configuration) lets the event print again.
  configure_logs("graph_breaks");
  CaptureStderr();
  log_once(LogCategory::GraphBreaks, "item@f.cpp:10", "item() at f.cpp:10");
  EXPECT_EQ(GetCapturedStderr(), "[kiln:graph_breaks] item() at f.cpp:10\n");
}

TEST_F(CompilerLog, AllEnablesEveryCategoryAndNothingIsTheDefault) {
  ::unsetenv("KILN_LOGS");
  reset_logs();
  for (int c = 0; c < kNumLogCategories; ++c) EXPECT_FALSE(log_enabled(static_cast<LogCategory>(c)));
  CaptureStderr();
  log_event(LogCategory::Aot, "silent");
  EXPECT_EQ(GetCapturedStderr(), "");
  EXPECT_TRUE(logged_events(LogCategory::Aot).empty());

  configure_logs("all");
  for (int c = 0; c < kNumLogCategories; ++c) EXPECT_TRUE(log_enabled(static_cast<LogCategory>(c)));
  EXPECT_STREQ(log_category_name(LogCategory::GraphBreaks), "graph_breaks");
  EXPECT_STREQ(log_category_name(LogCategory::Aot), "aot");
}

TEST_F(CompilerLog, UnknownNamesGetOneWarningListingTheValidOnes) {
  CaptureStderr();
  configure_logs("recompile,graphs,dynamo");
  std::string err = GetCapturedStderr();
  EXPECT_EQ(err,
            "[kiln] KILN_LOGS: unknown category 'recompile', 'dynamo'; valid: graph_breaks, recompiles, guards, "
            "graphs, aot, precision, all\n");
  EXPECT_TRUE(log_enabled(LogCategory::Graphs));  // the known names still count
  EXPECT_FALSE(log_enabled(LogCategory::Recompiles));
}

TEST_F(CompilerLog, ZeroRecompilesCanBeAssertedFromTheKeptEvents) {
  configure_logs("recompiles");
  EXPECT_TRUE(logged_events(LogCategory::Recompiles).empty());
  CaptureStderr();
  log_event(LogCategory::Recompiles, "step: lr changed");
  (void)GetCapturedStderr();
  EXPECT_EQ(logged_events(LogCategory::Recompiles).size(), 1u);
  reset_logs();  // KILN_LOGS unset: off, and the kept events are gone
  EXPECT_TRUE(logged_events(LogCategory::Recompiles).empty());
}

TEST_F(CompilerLog, SourceLocationNamesFileLineAndFunction) {
  const SourceLocation here = SourceLocation::current();
  std::string s = source_location_str(here);
  EXPECT_NE(s.find("test_log.cpp:" + std::to_string(here.line())), std::string::npos) << s;
  EXPECT_NE(s.find(" in "), std::string::npos) << s;
}

}  // namespace
}  // namespace kiln::compiler
