// Dead-code elimination: before/expected graphs.
#include <gtest/gtest.h>

#include "compiler/graph/printer.h"
#include "compiler/passes/dead_code.h"
#include "graph_builder.h"

namespace kiln::compiler {
namespace {

using testing::GraphBuilder;
using testing::expect_same_results;

TEST(DeadCode, RemovesUnusedOpsAndConstantsKeepsInputs) {
  GraphBuilder b;
  ValueId x = b.input(randn({3}));
  ValueId unused_in = b.input(randn({3}));
  ValueId c = b.constant(scalar_tensor(2.0));
  ValueId dead = b.op(OpId::exp, {x});
  b.op(OpId::mul, {dead, c});
  ValueId live = b.op(OpId::relu, {x});
  b.output(live);
  (void)unused_in;
  Graph before = b.g;
  eliminate_dead_code(b.g);
  EXPECT_EQ(print(b.g),
            "graph graph(%0: f32[3], %1: f32[3]) {\n"
            "  %2: f32[3] = relu(%0)\n"
            "  return (%2)\n"
            "}\n");
  expect_same_results(before, b.g, b.example_inputs);
}

TEST(DeadCode, KeepsSideEffectsDropsUnusedRandomDraws) {
  GraphBuilder b;
  ValueId p = b.input(randn({4}));
  ValueId g = b.input(randn({4}));
  ValueId mean = b.input(zeros({2})), var = b.input(ones({2}));
  ValueId x = b.input(randn({3, 2}));
  b.op(OpId::add_, {p, g}, Attrs().set("alpha", -0.1));  // updates p: kept although unused
  b.ops(OpId::batch_norm, {x, kNoValue, kNoValue, mean, var},
        Attrs().set("training", true).set("momentum", 0.1).set("eps", 1e-5));  // updates the running stats
  b.ops(OpId::batch_norm, {x, kNoValue, kNoValue, mean, var},
        Attrs().set("training", false).set("momentum", 0.1).set("eps", 1e-5));  // eval: pure, unused
  b.op(OpId::randn, {}, testing::random_attrs({2}, 1));  // unused draw
  b.output(b.op(OpId::neg, {x}));
  eliminate_dead_code(b.g);
  EXPECT_EQ(print(b.g),
            "graph graph(%0: f32[4], %1: f32[4], %2: f32[2], %3: f32[2], %4: f32[3, 2]) {\n"
            "  %5: f32[4] = add_(%0, %1) {alpha=-0.1}\n"
            "  %6: f32[3, 2], %7: f32[2], %8: f32[2] = batch_norm(%4, None, None, %2, %3) {training=true, momentum=0.1, "
            "eps=1e-05}\n"
            "  %9: f32[3, 2] = neg(%4)\n"
            "  return (%9)\n"
            "}\n");
  // The kept updates still happen when the graph runs.
  Tensor p0 = zeros({4}), g0 = ones({4}), m0 = zeros({2}), v0 = ones({2}), x0 = randn({3, 2});
  interpret(b.g, Tensors{p0, g0, m0, v0, x0});
  EXPECT_TENSOR_CLOSE(p0, full({4}, -0.1));
  EXPECT_TENSOR_CLOSE(m0, mul(x0.mean({0}), scalar_tensor(0.1)));
}

TEST(DeadCode, NothingToRemoveLeavesTheGraphAlone) {
  GraphBuilder b;
  ValueId x = b.input(randn({2}));
  b.output(b.op(OpId::sigmoid, {x}));
  std::string before = print(b.g);
  eliminate_dead_code(b.g);
  EXPECT_EQ(print(b.g), before);
}

}  // namespace
}  // namespace kiln::compiler
