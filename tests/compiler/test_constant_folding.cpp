// Constant folding: before/expected graphs.
#include <gtest/gtest.h>

#include "compiler/graph/printer.h"
#include "compiler/passes/constant_folding.h"
#include "graph_builder.h"
#include "ops/dispatch_mode.h"

namespace kiln::compiler {
namespace {

using testing::GraphBuilder;
using testing::expect_same_results;

TEST(ConstantFolding, FoldsChainsOfConstantOps) {
  GraphBuilder b;
  ValueId x = b.input(randn({3}));
  ValueId c = b.constant(from_vector(std::vector<float>{1, 4, 9}, {3}));
  ValueId s = b.op(OpId::sqrt, {c});
  ValueId t = b.op(OpId::add, {s, b.constant(scalar_tensor(1.0))});  // reads a folded value
  ValueId y = b.op(OpId::mul, {x, t});  // reads an input: stays
  b.output(y);
  Graph before = b.g;
  fold_constants(b.g);
  EXPECT_EQ(print(b.g),
            "graph graph(%0: f32[3]) {\n"
            "  %1: f32[3] = constant([1, 4, 9])\n"
            "  %2: f32[3] = constant([1, 2, 3])\n"
            "  %3: f32[] = constant(1)\n"
            "  %4: f32[3] = constant([2, 3, 4])\n"
            "  %5: f32[3] = mul(%0, %4)\n"
            "  return (%5)\n"
            "}\n");
  expect_same_results(before, b.g, b.example_inputs);
}

TEST(ConstantFolding, FactoriesViewsAndMultipleOutputs) {
  GraphBuilder b;
  ValueId f = b.op(OpId::arange, {}, Attrs().set("start", 0.0).set("end", 4.0).set("step", 1.0).set("dtype", DType::Float32).set(
                                         "device", std::string("cpu")));
  ValueId v = b.op(OpId::view, {f}, Attrs().set("shape", Shape{1, 1, 2, 2}));
  std::vector<ValueId> mp = b.ops(OpId::max_pool2d, {v},
                                  testing::max_pool_attrs(2, 2));
  b.output(mp[0]);
  b.output(mp[1]);
  Graph before = b.g;
  fold_constants(b.g);
  EXPECT_EQ(print(b.g),
            "graph graph() {\n"
            "  %0: f32[4] = constant([0, 1, 2, 3])\n"
            "  %1: f32[1, 1, 2, 2] = constant([0, 1, 2, 3])\n"
            "  %2: f32[1, 1, 1, 1] = constant([3])\n"
            "  %3: i64[1, 1, 1, 1] = constant([3])\n"
            "  return (%2, %3)\n"
            "}\n");
  expect_same_results(before, b.g, b.example_inputs);
}

TEST(ConstantFolding, LeavesRandomInplaceScalarInputBigAndMutatedAlone) {
  GraphBuilder b;
  ValueId c = b.constant(ones({3}));
  ValueId big = b.constant(ones({kMaxFoldedElements + 1}));
  int s = b.scalar("v", 0.5);
  ValueId r = b.op(OpId::randn, {}, testing::random_attrs({3}, 3));
  ValueId cl = b.op(OpId::clamp, {c}, Attrs().set("min", 0.5), {{"min", s}});
  ValueId n = b.op(OpId::neg, {big});
  ValueId m = b.constant(zeros({3}));
  ValueId e = b.op(OpId::exp, {m});  // m is written below: folding would read it too early or too late
  b.op(OpId::fill_, {m}, Attrs().set("value", 2.0));
  b.output(r);
  b.output(cl);
  b.output(n);
  b.output(e);
  std::string before = print(b.g);
  fold_constants(b.g);
  EXPECT_EQ(print(b.g), before);
}

TEST(ConstantFolding, AnOpThatFailsIsLeftForRunTime) {
  GraphBuilder b;
  ValueId c = b.constant(ones({2, 3}));
  ValueId d = b.constant(ones({4, 5}));
  ValueId x = b.input(ones({3, 4}));
  ValueId mm = b.op(OpId::matmul, {c, x});
  b.output(mm);
  // A node recorded with a shape its inputs do not give (a broken graph, or a
  // capture bug): folding leaves it, the run reports it.
  std::vector<ValueId> out = b.g.add_op(OpId::matmul, {}, {c, d}, {ValueType::contiguous({2, 5})});
  b.g.outputs.push_back(out[0]);
  std::string before = print(b.g);
  fold_constants(b.g);
  EXPECT_EQ(print(b.g), before);
}

TEST(ConstantFolding, ModesDoNotSeeCompileTimeWork) {
  class Refuse : public DispatchMode {
   public:
    const char* mode_name() const override { return "refuse"; }
    Tensors handle(OpId, Tensors&, const Attrs&, const NextMode&) override { KILN_FAIL("a mode saw folding"); }
  } refuse;
  GraphBuilder b;
  ValueId c = b.constant(ones({2}));
  b.output(b.op(OpId::neg, {c}));
  ModeGuard guard(refuse);
  fold_constants(b.g);
  EXPECT_EQ(b.g.num_ops(), 0u);
}

}  // namespace
}  // namespace kiln::compiler
