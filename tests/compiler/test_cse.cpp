// Common-subexpression elimination: before/expected graphs.
#include <gtest/gtest.h>

#include "compiler/graph/printer.h"
#include "compiler/passes/cse.h"
#include "graph_builder.h"

namespace kiln::compiler {
namespace {

using testing::GraphBuilder;
using testing::expect_same_results;

Attrs randn_attrs(int64_t seed) { return testing::random_attrs({3}, seed); }

TEST(CSE, MergesRepeatsAndWhatTheyExpose) {
  GraphBuilder b;
  ValueId x = b.input(randn({2, 3}));
  ValueId y = b.input(randn({2, 3}));
  ValueId a1 = b.op(OpId::add, {x, y});
  ValueId a2 = b.op(OpId::add, {x, y});
  ValueId r1 = b.op(OpId::relu, {a1});
  ValueId r2 = b.op(OpId::relu, {a2});  // the same once a2 is a1
  ValueId s1 = b.op(OpId::sum, {r1}, Attrs().set("dims", std::vector<int64_t>{1}).set("keepdim", false));
  ValueId s2 = b.op(OpId::sum, {r1}, Attrs().set("dims", std::vector<int64_t>{0}).set("keepdim", false));  // other attrs
  ValueId swapped = b.op(OpId::add, {y, x});  // other input order: kept (the pass does not know add commutes)
  b.output(b.op(OpId::mul, {r1, r2}));
  b.output(s1);
  b.output(s2);
  b.output(swapped);
  Graph before = b.g;
  eliminate_common_subexpressions(b.g);
  EXPECT_EQ(print(b.g),
            "graph graph(%0: f32[2, 3], %1: f32[2, 3]) {\n"
            "  %2: f32[2, 3] = add(%0, %1)\n"
            "  %3: f32[2, 3] = relu(%2)\n"
            "  %4: f32[2] = sum(%3) {dims=[1], keepdim=false}\n"
            "  %5: f32[3] = sum(%3) {dims=[0], keepdim=false}\n"
            "  %6: f32[2, 3] = add(%1, %0)\n"
            "  %7: f32[2, 3] = mul(%3, %3)\n"
            "  return (%7, %4, %5, %6)\n"
            "}\n");
  expect_same_results(before, b.g, b.example_inputs);
}

TEST(CSE, MultiOutputNodesAndScalarInputs) {
  GraphBuilder b;
  ValueId x = b.input(randn({1, 1, 4, 4}));
  Attrs pool = testing::max_pool_attrs(2, 2);
  std::vector<ValueId> m1 = b.ops(OpId::max_pool2d, {x}, pool);
  std::vector<ValueId> m2 = b.ops(OpId::max_pool2d, {x}, pool);
  int s0 = b.scalar("lo", 0.0), s1 = b.scalar("hi", 0.0);
  ValueId c1 = b.op(OpId::clamp, {m1[0]}, Attrs().set("min", 0.0), {{"min", s0}});
  ValueId c2 = b.op(OpId::clamp, {m2[0]}, Attrs().set("min", 0.0), {{"min", s1}});  // another scalar: kept
  b.output(c1);
  b.output(c2);
  b.output(m2[1]);
  Graph before = b.g;
  eliminate_common_subexpressions(b.g);
  EXPECT_EQ(print(b.g),
            "graph graph(%0: f32[1, 1, 4, 4]; $0 lo: f64, $1 hi: f64) {\n"
            "  %1: f32[1, 1, 2, 2], %2: i64[1, 1, 2, 2] = max_pool2d(%0) {kernel_size=[2, 2], stride=[2, 2], "
            "padding=[0, 0], dilation=[1, 1], ceil_mode=false}\n"
            "  %3: f32[1, 1, 2, 2] = clamp(%1) {min=$0}\n"
            "  %4: f32[1, 1, 2, 2] = clamp(%1) {min=$1}\n"
            "  return (%3, %4, %2)\n"
            "}\n");
  expect_same_results(before, b.g, b.example_inputs);
}

TEST(CSE, NeverMergesRandomInplaceOrAcrossMutation) {
  GraphBuilder b;
  ValueId x = b.input(randn({3}));
  ValueId r1 = b.op(OpId::randn, {}, randn_attrs(1));
  ValueId r2 = b.op(OpId::randn, {}, randn_attrs(1));  // same attrs, still two draws
  ValueId e1 = b.op(OpId::exp, {x});
  b.op(OpId::mul_, {x, r1});  // x changes here
  ValueId e2 = b.op(OpId::exp, {x});  // not e1
  b.op(OpId::mul_, {x, r1});
  ValueId f1 = b.op(OpId::full, {}, testing::full_attrs({3}, 1.0));
  ValueId f2 = b.op(OpId::full, {}, testing::full_attrs({3}, 2.0));
  b.output(b.op(OpId::add, {r1, r2}));
  b.output(e1);
  b.output(e2);
  b.output(f1);
  b.output(f2);
  std::string before = print(b.g);
  eliminate_common_subexpressions(b.g);
  EXPECT_EQ(print(b.g), before);
}

TEST(CSE, OutputsStaySeparateTensors) {
  GraphBuilder b;
  ValueId x = b.input(randn({3}));
  ValueId e1 = b.op(OpId::exp, {x});
  ValueId e2 = b.op(OpId::exp, {x});
  b.output(e1);
  b.output(e2);
  std::string before = print(b.g);
  eliminate_common_subexpressions(b.g);
  EXPECT_EQ(print(b.g), before);
  Tensors out = interpret(b.g, b.example_inputs);
  EXPECT_FALSE(out[0].shares_storage(out[1]));
}

TEST(CSE, MergesEqualFactories) {
  GraphBuilder b;
  Attrs ones_attrs = testing::full_attrs({3}, 1.0);
  ValueId f1 = b.op(OpId::full, {}, ones_attrs);
  ValueId f2 = b.op(OpId::full, {}, ones_attrs);
  b.output(b.op(OpId::add, {f1, f2}));
  Graph before = b.g;
  eliminate_common_subexpressions(b.g);
  EXPECT_EQ(print(b.g),
            "graph graph() {\n"
            "  %0: f32[3] = full() {shape=[3], dtype=float32, device=\"cpu\", value=1}\n"
            "  %1: f32[3] = add(%0, %0)\n"
            "  return (%1)\n"
            "}\n");
  expect_same_results(before, b.g, b.example_inputs);
}

}  // namespace
}  // namespace kiln::compiler
