// kiln::explain's fused-kernel list (ExplainReport::fused_kernels): what the
// cpp backend's scheduler fused, with the intermediate bytes it does not write.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "compiler/explain/html.h"
#include "kiln/explain.h"
#include "kiln/kiln.h"

namespace kiln {
namespace {

TEST(ExplainFusedKernels, CppBackendListsTheChainWithItsUnwrittenIntermediates) {
  auto f = [](const Tensor& x) { return relu(add(mul(x, 2.0), 1.0)); };
  Tensor x = randn({64, 32});
  ExplainReport r = explain(ExplainOptions().compile(CompileOptions().backend("cpp")), f, x);
  EXPECT_EQ(r.backend, "cpp");
  ASSERT_EQ(r.fused_kernels.size(), 1u) << r.str();
  const ExplainFusedKernel& k = r.fused_kernels[0];
  EXPECT_EQ(k.ops, (std::vector<std::string>{"mul", "add", "relu"}));
  // mul's and add's outputs stay in registers: 2 x 64 x 32 float32.
  EXPECT_EQ(k.bytes_not_written, 2 * 64 * 32 * 4);
  EXPECT_NE(r.str().find("mul + add + relu; does not write 16384 bytes"), std::string::npos) << r.str();
  nlohmann::json j = r.json();
  ASSERT_EQ(j["fused_kernels"].size(), 1u);
  EXPECT_EQ(j["fused_kernels"][0]["bytes_not_written"], 16384);
  EXPECT_EQ(j["fused_kernels"][0]["ops"][2], "relu");
  std::string html = compiler::explain_html(r, "chain");
  EXPECT_NE(html.find("<h2>Fused kernels</h2>"), std::string::npos);
  EXPECT_NE(html.find("<td>mul + add + relu</td><td>16384</td>"), std::string::npos) << html;
}

// Independent large kernels run as one OpenMP region (parallel_regions.h):
// explain lists it with its kernels, in text and JSON.
TEST(ExplainFusedKernels, ListsParallelRegionsWithTheirKernels) {
  auto f = [](const Tensor& x, const Tensor& y) { return add(sum(sigmoid(x)), sum(exp(y))); };
  ExplainReport r = explain(f, randn({300, 257}), randn({200, 300}));
  ASSERT_EQ(r.parallel_regions.size(), 1u) << r.str();
  EXPECT_EQ(r.parallel_regions[0].region, "r0");
  EXPECT_EQ(r.parallel_regions[0].kernels, (std::vector<std::string>{"k0", "k1"})) << r.str();
  EXPECT_NE(r.str().find("/r0: k0 k1\n"), std::string::npos) << r.str();
  nlohmann::json j = r.json();
  ASSERT_EQ(j["parallel_regions"].size(), 1u);
  EXPECT_EQ(j["parallel_regions"][0]["kernels"][1], "k1");
  ExplainReport small = explain(f, randn({8, 8}), randn({4, 8}));  // too small to start a thread team
  EXPECT_TRUE(small.parallel_regions.empty()) << small.str();
}

TEST(ExplainFusedKernels, TheDefaultBackendIsCpp) {
  auto f = [](const Tensor& x) { return relu(add(mul(x, 2.0), 1.0)); };
  ExplainReport r = explain(f, randn({8, 8}));
  EXPECT_EQ(r.backend, "cpp");
  EXPECT_EQ(r.fused_kernels.size(), 1u) << r.str();
}

TEST(ExplainFusedKernels, InterpreterFusesNothingAndSaysSo) {
  auto f = [](const Tensor& x) { return relu(add(mul(x, 2.0), 1.0)); };
  ExplainReport r = explain(CompileOptions().backend("interpreter"), f, randn({8, 8}));
  EXPECT_EQ(r.backend, "interpreter");
  EXPECT_TRUE(r.fused_kernels.empty());
  EXPECT_NE(r.str().find("runs each op on its own kernel"), std::string::npos) << r.str();
}

}  // namespace
}  // namespace kiln
