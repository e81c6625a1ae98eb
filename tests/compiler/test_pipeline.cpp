// The pass pipeline: default passes end to end, the verifier after each
// pass, KILN_DUMP=passes; and the rewrite helpers the passes share.
#include <gtest/gtest.h>

#include <cstdlib>

#include "compiler/graph/printer.h"
#include "compiler/graph/rewrite.h"
#include "compiler/passes/pipeline.h"
#include "graph_builder.h"
#include "testing/scoped_env.h"

namespace kiln::compiler {
namespace {

using testing::GraphBuilder;
using testing::expect_same_results;

using kiln::testing::ScopedEnv;

GraphBuilder messy_graph() {
  GraphBuilder b("messy");
  ValueId x = b.input(randn({2, 3}), 1);
  ValueId w = b.constant(from_vector(std::vector<float>{1, 4, 9}, {3}));
  ValueId sw = b.op(OpId::sqrt, {w});                       // folds to a constant
  ValueId one = b.constant(scalar_tensor(1.0));
  ValueId scaled = b.op(OpId::mul, {x, one});               // x * 1 -> x
  ValueId y1 = b.op(OpId::mul, {scaled, sw});
  ValueId y2 = b.op(OpId::mul, {x, sw});                    // equal to y1 once x * 1 is gone
  ValueId unused = b.op(OpId::exp, {y2});                   // dead
  (void)unused;
  b.output(b.op(OpId::add, {y1, y2}));
  return b;
}

TEST(PassPipeline, DefaultPassesCleanUp) {
  GraphBuilder b = messy_graph();
  Graph before = b.g;
  run_passes(b.g, default_passes());
  EXPECT_EQ(print(b.g),
            "graph messy(%0: f32[s0, 3]) {\n"
            "  %1: f32[3] = constant([1, 2, 3])\n"
            "  %2: f32[s0, 3] = mul(%0, %1)\n"
            "  %3: f32[s0, 3] = add(%2, %2)\n"
            "  return (%3)\n"
            "}\n");
  expect_same_results(before, b.g, b.example_inputs);
  Tensor x5 = randn({5, 3});  // the batch dim stayed symbolic
  expect_same_results(before, b.g, {x5});
}

TEST(PassPipeline, DefaultPassOrder) {
  std::vector<std::string> names;
  for (const Pass& p : default_passes()) names.push_back(p.name);
  EXPECT_EQ(names, (std::vector<std::string>{"constant_folding", "noop_removal", "fold_batch_norm",
                                             "fuse_conv_activation", "cse", "copy_back_removal", "dead_code"}));
  names.clear();
  for (const Pass& p : execution_passes()) names.push_back(p.name);
  EXPECT_EQ(names, (std::vector<std::string>{"float32_regions", "fuse_norm_activation", "fuse_conv_residual",
                                             "blocked_layouts", "fuse_pool_norm"}));
}

TEST(PassPipeline, DumpsAfterEachPassWhenAsked) {
  GraphBuilder b = messy_graph();
  ScopedEnv env("KILN_DUMP", "graph, passes");
  ::testing::internal::CaptureStderr();
  run_passes(b.g, default_passes());
  std::string err = ::testing::internal::GetCapturedStderr();
  for (const char* pass : {"constant_folding", "noop_removal", "cse", "dead_code"})
    EXPECT_NE(err.find(std::string("// ---- graph messy after pass ") + pass + " ("), std::string::npos) << pass << err;
  EXPECT_NE(err.find("// ---- graph messy after pass dead_code (2 ops) ----\n" + print(b.g)), std::string::npos) << err;
}

TEST(PassPipeline, QuietWithoutKilnDump) {
  GraphBuilder b = messy_graph();
  ScopedEnv env("KILN_DUMP", "graph,passesx");
  ::testing::internal::CaptureStderr();
  run_passes(b.g, default_passes());
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  EXPECT_TRUE(dump_enabled("graph"));
  EXPECT_FALSE(dump_enabled("passes"));
}

TEST(PassPipeline, SkipsThePassesKilnDisablePassesNames) {
  GraphBuilder all = messy_graph(), some = messy_graph();
  run_passes(all.g, default_passes());
  ScopedEnv dump("KILN_DUMP", "passes");
  ScopedEnv env("KILN_DISABLE_PASSES", "cse,dead_code");
  EXPECT_TRUE(pass_disabled("cse"));
  EXPECT_FALSE(pass_disabled("noop_removal"));
  ::testing::internal::CaptureStderr();
  run_passes(some.g, default_passes());
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("after pass noop_removal"), std::string::npos) << err;
  EXPECT_EQ(err.find("after pass cse"), std::string::npos) << err;
  EXPECT_EQ(err.find("after pass dead_code"), std::string::npos) << err;
  EXPECT_GT(some.g.num_ops(), all.g.num_ops());  // what CSE and dead-code removal would have removed is still there
}

TEST(PassPipeline, ABrokenPassIsAnInternalErrorNamingIt) {
  GraphBuilder b = messy_graph();
  Pass breaker{"breaker", [](Graph& g) { g.outputs.push_back(99); }};
  try {
    run_passes(b.g, {breaker});
    FAIL() << "expected InternalError";
  } catch (const InternalError& e) {
    EXPECT_NE(std::string(e.what()).find("after pass breaker"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("graph output 1 is %99"), std::string::npos) << e.what();
  }
}

TEST(GraphRewrite, ReplaceUsesAndRemoveNodesRenumbers) {
  GraphBuilder b;
  ValueId x = b.input(randn({2}));
  ValueId a = b.op(OpId::exp, {x});
  ValueId c = b.op(OpId::neg, {a});
  ValueId d = b.op(OpId::relu, {c});
  b.output(d);
  b.output(a);
  EXPECT_EQ(use_counts(b.g), (std::vector<int>{1, 2, 1, 1}));
  replace_all_uses(b.g, c, x);  // relu reads x now; neg is unused
  remove_nodes(b.g, {false, false, true, false});
  EXPECT_EQ(print(b.g),
            "graph graph(%0: f32[2]) {\n"
            "  %1: f32[2] = exp(%0)\n"
            "  %2: f32[2] = relu(%0)\n"
            "  return (%2, %1)\n"
            "}\n");
  EXPECT_EQ(verify(b.g), std::vector<std::string>{});
  EXPECT_THROW(remove_nodes(b.g, {false, true, false}), InternalError);  // exp is still read
  EXPECT_THROW(remove_nodes(b.g, {true, false, false}), InternalError);  // inputs stay
}

TEST(GraphRewrite, AliasingAndMutation) {
  GraphBuilder b;
  ValueId x = b.input(randn({2, 3}));
  ValueId y = b.input(randn({2, 3}));
  ValueId t = b.op(OpId::permute, {x}, Attrs().set("dims", std::vector<int64_t>{1, 0}));
  ValueId s = b.op(OpId::select, {t}, Attrs().set("dim", int64_t{0}).set("index", int64_t{1}));
  ValueId upd = b.op(OpId::mul_, {s, b.constant(scalar_tensor(2.0))});
  ValueId e = b.op(OpId::exp, {y});
  b.output(upd);
  b.output(e);
  EXPECT_EQ(alias_root(b.g, s), x);
  EXPECT_EQ(alias_root(b.g, upd), x);
  EXPECT_EQ(alias_root(b.g, e), e);
  std::vector<bool> m = mutated_storage(b.g);
  EXPECT_TRUE(m[static_cast<size_t>(x)] && m[static_cast<size_t>(t)] && m[static_cast<size_t>(s)]);
  EXPECT_FALSE(m[static_cast<size_t>(y)] || m[static_cast<size_t>(e)]);
  EXPECT_TRUE(has_side_effects(b.g.producer(upd)));
  EXPECT_FALSE(has_side_effects(b.g.producer(e)));
}

}  // namespace
}  // namespace kiln::compiler
