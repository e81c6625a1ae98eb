// kiln::explain: the report states what capture recorded — graphs, graph
// breaks with their op, reason and the caller's location, guards, op counts —
// and its JSON, text and HTML forms carry the same.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "compiler/capture/compiled_state.h"
#include "compiler/explain/html.h"
#include "compiler/graph/dot.h"
#include "compiler/graph/printer.h"
#include "kiln/explain.h"
#include "kiln/kiln.h"
#include "testing/compare.h"

namespace kiln {
namespace {

size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

bool has(const std::vector<std::string>& list, const std::string& item) {
  return std::find(list.begin(), list.end(), item) != list.end();
}

Tensor branchy(const Tensor& x) {
  Tensor s = x.sum();
  if (s.item() > 0) return mul(x, x);
  return neg(x);
}

TEST(Explain, OneItemBreakIsReportedWithItsOpReasonAndLocation) {
  ExplainReport r = explain(branchy, full({3}, 1.0));
  ASSERT_EQ(r.graph_breaks.size(), 1u);
  EXPECT_EQ(r.graph_breaks[0].op, "sum");
  EXPECT_EQ(r.graph_breaks[0].reason, "item()");
  EXPECT_NE(r.graph_breaks[0].location.find("test_explain.cpp"), std::string::npos) << r.graph_breaks[0].location;
  // The break splits the one variant into two graphs: the sum, then the branch taken.
  EXPECT_EQ(r.calls, 1);
  EXPECT_EQ(r.variants, 1);
  EXPECT_EQ(r.recompiles, 0);
  ASSERT_EQ(r.graphs.size(), 2u);
  EXPECT_EQ(r.graphs[0].segment, 0);
  EXPECT_EQ(r.graphs[1].segment, 1);
  EXPECT_EQ(r.ops, (std::map<std::string, int64_t>{{"mul", 1}, {"sum", 1}}));
  // Both graphs read x: each lists its input.
  EXPECT_TRUE(has(r.guards, "compiled: input 0: f32[3] requires_grad=false")) << r.str();
  EXPECT_TRUE(has(r.guards, "compiled_1: input 0: f32[3] requires_grad=false")) << r.str();
}

TEST(Explain, TheOtherBranchIsASecondVariantSharingTheFirstGraph) {
  auto f = [](const Tensor& x) { return branchy(x); };
  Tensor pos = full({3}, 1.0), neg_x = full({3}, -1.0);
  auto compiled = compile(f);
  compiled(pos);
  compiled(neg_x);
  ExplainReport r = detail::explain_state(compiled.state(), {});
  EXPECT_EQ(r.variants, 2);
  EXPECT_EQ(r.recompiles, 1);
  ASSERT_EQ(r.graph_breaks.size(), 1u);  // the shared graph before the break is reported once
  ASSERT_EQ(r.graphs.size(), 3u);
  EXPECT_EQ(r.graphs[0].name, "compiled@v1");
  EXPECT_EQ(r.graphs[2].name, "compiled_1@v2");
  EXPECT_EQ(r.graphs[2].variant, 2);
  EXPECT_EQ(r.ops, (std::map<std::string, int64_t>{{"mul", 1}, {"neg", 1}, {"sum", 1}}));
}

TEST(Explain, OpCountsGuardsAndGraphsOfASmallFunction) {
  manual_seed(1);
  Tensor w = randn({4, 3}), b = randn({3}).requires_grad_();
  auto f = [&](const Tensor& x) { return relu(add(matmul(x, w), b)).sum({1}); };
  Tensor x = randn({5, 4});
  ExplainReport r = explain(ExplainOptions().calls(3), f, x);
  EXPECT_EQ(r.ops, (std::map<std::string, int64_t>{{"add", 1}, {"matmul", 1}, {"relu", 1}, {"sum", 1}}));
  EXPECT_EQ(r.calls, 3);
  EXPECT_EQ(r.variants, 1);
  EXPECT_TRUE(r.graph_breaks.empty());
  ASSERT_EQ(r.graphs.size(), 1u);
  EXPECT_EQ(r.graphs[0].num_ops, 4);
  EXPECT_FALSE(r.graphs[0].has_backward);
  const std::vector<std::string> want = {
      "input 0: f32[5, 4] requires_grad=false", "input 1: f32[4, 3] requires_grad=false",
      "input 2: f32[3] requires_grad=true",     "grad mode: enabled",
      "dynamic dims: none; every input shape is guarded exactly", "recompile limit: 8 variants"};
  EXPECT_EQ(r.guards, want);
  // The graph's text and DOT are the printer's and to_dot's.
  auto compiled = compile(f);
  compiled(x);
  const compiler::Graph& g = compiled.state().variants.at(0)->segments.at(0)->graph;
  EXPECT_EQ(r.graphs[0].text, compiler::print(g));
  EXPECT_EQ(r.graphs[0].dot, compiler::to_dot(g));
  EXPECT_EQ(r.graphs[0].executable, compiler::print(compiled.state().variants.at(0)->segments.at(0)->executable));
  EXPECT_EQ(r.graphs[0].name, "compiled");
}

TEST(Explain, GuardsNameTheTransposedStridesGradModeAndDynamicBatch) {
  Tensor x = randn({3, 6}).transpose(0, 1);  // [6, 3], strides [1, 6]
  NoGradGuard off;
  ExplainReport r = explain(CompileOptions().dynamic(true).recompile_limit(3).name("dyn"),
                            [](const Tensor& t) { return exp(t); }, x);
  EXPECT_TRUE(has(r.guards, "input 0: f32[s0, 3]{strides=[1, 6]} requires_grad=false")) << r.str();
  EXPECT_TRUE(has(r.guards, "grad mode: disabled")) << r.str();
  EXPECT_TRUE(has(r.guards, "recompile limit: 3 variants")) << r.str();
  EXPECT_TRUE(has(r.guards,
                  "dynamic dims: dim 0 of the tensor arguments is the symbol s0 (the batch size); other sizes reuse "
                  "the graph"))
      << r.str();
  EXPECT_EQ(r.graphs.at(0).name, "dyn");
}

TEST(Explain, AModuleForwardStatesItsModeAndNonTensorArgumentsTheirGuard) {
  manual_seed(2);
  auto lin = std::make_shared<nn::Linear>(4, 2);
  lin->eval();
  Tensor x = randn({3, 4});
  ExplainReport r = explain(std::shared_ptr<nn::Module>(lin), x);
  EXPECT_TRUE(has(r.guards, "module mode: eval()")) << r.str();
  // The captured op is linear itself (the compiler expands it into matmul + add when it compiles).
  EXPECT_EQ(r.ops, (std::map<std::string, int64_t>{{"linear", 1}})) << r.str();
  // Inputs in order of first use: linear's x, weight, bias.
  EXPECT_EQ(r.guards.at(0), "input 0: f32[3, 4] requires_grad=false");
  EXPECT_EQ(r.guards.at(1), "input 1: f32[2, 4] requires_grad=true");
  EXPECT_EQ(r.guards.at(2), "input 2: f32[2] requires_grad=true");

  ExplainReport s = explain([](const Tensor& t, double k, int n) { return mul(t, k * n); }, x, 2.0, 3);
  EXPECT_TRUE(has(s.guards, "non-tensor arguments: 2, guarded by value")) << s.str();
}

TEST(Explain, AWholeTrainStepIsOneGraphWithItsBackward) {
  manual_seed(3);
  auto model = std::make_shared<nn::Linear>(4, 3);
  optim::SGD opt(model->parameters(), optim::SGDOptions(0.1).momentum(0.9).nesterov(true));
  Tensor x = randn({8, 4}), y = randint(0, 3, {8});
  auto step = [&](const Tensor& xb, const Tensor& yb) {
    Tensor loss = cross_entropy(model->forward(xb), yb);
    opt.zero_grad();
    loss.backward();
    opt.step();
    return loss;
  };
  ExplainReport r = explain(ExplainOptions().calls(2), step, x, y);
  EXPECT_TRUE(r.graph_breaks.empty()) << r.str();
  // The momentum buffers exist before the first step, so both calls run the
  // same ops: one variant, one graph, the second call replays it.
  EXPECT_EQ(r.variants, 1);
  ASSERT_EQ(r.graphs.size(), 1u);
  EXPECT_TRUE(r.graphs[0].has_backward);
  EXPECT_EQ(r.ops.at("nll_loss_backward"), 1);
  EXPECT_EQ(r.ops.at("mul_"), 2) << r.str();  // each step scales the two momentum buffers
  // Learning-rate-dependent factors are scalars read on every call, not guards.
  bool scalars_listed = false;
  for (const std::string& gd : r.guards)
    scalars_listed = scalars_listed || (gd.find("alpha") != std::string::npos &&
                                        gd.find("read on every call, never guarded") != std::string::npos);
  EXPECT_TRUE(scalars_listed) << r.str();
  EXPECT_LE(r.saved_bytes_partitioned, r.saved_bytes_eager);
}

TEST(Explain, JsonHasEveryDocumentedKey) {
  ExplainReport r = explain(branchy, full({3}, 1.0));
  nlohmann::json j = r.json();
  for (const char* key : {"graphs", "graph_breaks", "guards", "ops", "calls", "variants", "recompiles", "fell_back",
                          "saved_bytes_eager", "saved_bytes_partitioned", "fused_kernels", "convolutions"})
    EXPECT_TRUE(j.contains(key)) << key;
  ASSERT_TRUE(j["graphs"].is_array());
  ASSERT_EQ(j["graphs"].size(), r.graphs.size());
  for (size_t i = 0; i < r.graphs.size(); ++i) {
    EXPECT_EQ(j["graphs"][i]["name"], r.graphs[i].name);
    EXPECT_EQ(j["graphs"][i]["text"], r.graphs[i].text);
    EXPECT_EQ(j["graphs"][i]["dot"], r.graphs[i].dot);
    EXPECT_EQ(j["graphs"][i]["num_ops"], r.graphs[i].num_ops);
  }
  ASSERT_EQ(j["graph_breaks"].size(), 1u);
  EXPECT_EQ(j["graph_breaks"][0]["op"], "sum");
  EXPECT_EQ(j["graph_breaks"][0]["reason"], "item()");
  EXPECT_EQ(j["graph_breaks"][0]["location"], r.graph_breaks[0].location);
  EXPECT_EQ(j["guards"].get<std::vector<std::string>>(), r.guards);
  EXPECT_EQ(j["ops"]["sum"], 1);
  EXPECT_EQ(j["ops"]["mul"], 1);
  EXPECT_TRUE(j["saved_bytes_eager"].is_number_integer());
  EXPECT_TRUE(j["saved_bytes_partitioned"].is_number_integer());
}

TEST(Explain, TextSummaryNamesTheBreakGuardsOpsAndGraphsAndPrintsWhenAsked) {
  ::testing::internal::CaptureStdout();
  ExplainReport r = explain(ExplainOptions().print(true), branchy, full({3}, 1.0));
  std::string printed = ::testing::internal::GetCapturedStdout();
  std::string s = r.str();
  EXPECT_EQ(printed, s);
  EXPECT_NE(s.find("1 call, 1 variant (0 recompiles), 2 graphs, 1 graph break, 2 ops"), std::string::npos) << s;
  EXPECT_NE(s.find("1. item() of sum at "), std::string::npos) << s;
  EXPECT_NE(s.find("test_explain.cpp"), std::string::npos) << s;
  EXPECT_NE(s.find("compiled: input 0: f32[3] requires_grad=false"), std::string::npos) << s;
  EXPECT_NE(s.find("  mul  1\n"), std::string::npos) << s;
  for (const ExplainGraph& g : r.graphs) EXPECT_NE(s.find(g.text), std::string::npos) << s;
  // As they run: each graph's executable (after the passes) in its place.
  const std::string run = r.str(/*as_run=*/true);
  for (const ExplainGraph& g : r.graphs) {
    ASSERT_FALSE(g.executable.empty()) << g.name;
    EXPECT_NE(run.find("; as it runs, after functionalization and the passes):\n" + g.executable), std::string::npos)
        << run;
  }
}

TEST(Explain, HtmlDrawsEachGraphAsInlineSvgBesideItsEscapedIr) {
  ExplainReport r = explain(branchy, full({3}, 1.0));
  std::string html = compiler::explain_html(r, "branchy <test>");
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_EQ(count_of(html, "<svg"), r.graphs.size());
  EXPECT_EQ(count_of(html, "<?xml"), 0u);  // inline SVG, not whole documents
  EXPECT_EQ(count_of(html, "<pre>"), 2 * r.graphs.size());  // as captured, and what runs
  EXPECT_EQ(count_of(html, "<details>"), r.graphs.size());
  EXPECT_NE(html.find("branchy &lt;test&gt;"), std::string::npos);
  EXPECT_NE(html.find("<td>sum</td><td>item()</td>"), std::string::npos);
  EXPECT_EQ(html.find("<test>"), std::string::npos);  // everything from the report is escaped
}

// The parallel regions and a graph's precision choice, as the text lists them.
TEST(Explain, HtmlListsParallelRegionsAndEachGraphsPrecision) {
  ExplainReport r = explain(branchy, full({3}, 1.0));
  ASSERT_FALSE(r.graphs.empty());
  r.parallel_regions.push_back({r.graphs[0].name, "r0", {"k3", "k4"}});
  r.graphs[0].precision = "float32 (whole graph timed in place: 2.00 ms as autocast wrote it, 1.00 ms in float32)";
  std::string html = compiler::explain_html(r, "regions");
  EXPECT_NE(html.find("<h2>Parallel regions</h2>"), std::string::npos);
  EXPECT_NE(html.find("<td>" + r.graphs[0].name + "</td><td>r0</td><td>k3, k4</td>"), std::string::npos) << html;
  EXPECT_NE(html.find("<p>precision under bf16 autocast: float32 (whole graph timed in place: 2.00 ms"),
            std::string::npos);
  r.parallel_regions.clear();
  EXPECT_EQ(compiler::explain_html(r, "none").find("Parallel regions"), std::string::npos);
}

TEST(Explain, CallsMustBePositive) {
  EXPECT_THROW(explain(ExplainOptions().calls(0), branchy, full({3}, 1.0)), Error);
}

}  // namespace
}  // namespace kiln
