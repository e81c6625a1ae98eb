// No-op removal: before/expected graphs.
#include <gtest/gtest.h>

#include "compiler/graph/printer.h"
#include "compiler/passes/dead_code.h"
#include "compiler/passes/noop_removal.h"
#include "graph_builder.h"

namespace kiln::compiler {
namespace {

using testing::GraphBuilder;
using testing::expect_same_results;

Attrs shape_attr(Shape s) { return Attrs().set("shape", std::move(s)); }
Attrs dims_attr(std::vector<int64_t> d) { return Attrs().set("dims", std::move(d)); }

TEST(NoopRemoval, ArithmeticIdentities) {
  GraphBuilder b;
  ValueId x = b.input(randn({2, 3}));
  ValueId r = b.op(OpId::relu, {x});
  ValueId zero = b.constant(scalar_tensor(0.0));
  ValueId one = b.constant(scalar_tensor(1.0));
  ValueId ones_row = b.constant(ones({3}));
  ValueId a = b.op(OpId::add, {r, zero});
  ValueId a2 = b.op(OpId::add, {zero, a});
  ValueId s = b.op(OpId::sub, {a2, zero});
  ValueId m = b.op(OpId::mul, {s, one});
  ValueId m2 = b.op(OpId::mul, {ones_row, m});  // broadcasts to m's shape: still m
  ValueId d = b.op(OpId::div, {m2, one});
  ValueId kept = b.op(OpId::sub, {zero, d});     // 0 - x is -x
  ValueId wide = b.op(OpId::mul, {r, b.constant(ones({4, 2, 3}))});  // a bigger result: kept
  b.output(d);
  b.output(kept);
  b.output(wide);
  Graph before = b.g;
  remove_noops(b.g);
  EXPECT_EQ(print(b.g),
            "graph graph(%0: f32[2, 3]) {\n"
            "  %1: f32[2, 3] = relu(%0)\n"
            "  %2: f32[] = constant(0)\n"
            "  %3: f32[] = constant(1)\n"
            "  %4: f32[3] = constant([1, 1, 1])\n"
            "  %5: f32[2, 3] = sub(%2, %1)\n"
            "  %6: f32[4, 2, 3] = constant(...)\n"
            "  %7: f32[4, 2, 3] = mul(%1, %6)\n"
            "  return (%1, %5, %7)\n"
            "}\n");
  expect_same_results(before, b.g, b.example_inputs);
}

TEST(NoopRemoval, DtypeChangesAreKept) {
  GraphBuilder b;
  ValueId x = b.input(arange(6).view({2, 3}));  // int64
  ValueId r = b.op(OpId::neg, {x});
  b.output(b.op(OpId::mul, {r, b.constant(scalar_tensor(1.0))}));  // int64 * 1.0 is float32
  b.output(b.op(OpId::cast, {r}, Attrs().set("dtype", DType::Float64)));
  std::string before = print(b.g);
  remove_noops(b.g);
  EXPECT_EQ(print(b.g), before);
}

TEST(NoopRemoval, IdentityViewsCastsAndCopies) {
  GraphBuilder b;
  ValueId x = b.input(randn({2, 3}));
  ValueId r = b.op(OpId::exp, {x});
  ValueId v = b.op(OpId::view, {r}, shape_attr({2, 3}));
  ValueId e = b.op(OpId::expand, {v}, shape_attr({2, 3}));
  ValueId p = b.op(OpId::permute, {e}, dims_attr({0, 1}));
  ValueId sl = b.op(OpId::slice, {p}, Attrs().set("dim", int64_t{1}).set("start", int64_t{0}).set("end", int64_t{3}).set(
                                          "step", int64_t{1}));
  ValueId c = b.op(OpId::cast, {sl}, Attrs().set("dtype", DType::Float32));
  ValueId cp = b.op(OpId::copy, {c});
  ValueId t = b.op(OpId::permute, {cp}, dims_attr({1, 0}));
  ValueId tcopy = b.op(OpId::copy, {t});  // not contiguous: a real copy
  b.output(cp);
  b.output(tcopy);
  Graph before = b.g;
  remove_noops(b.g);
  EXPECT_EQ(print(b.g),
            "graph graph(%0: f32[2, 3]) {\n"
            "  %1: f32[2, 3] = exp(%0)\n"
            "  %2: f32[3, 2]{strides=[1, 3]} = permute(%1) {dims=[1, 0]}\n"
            "  %3: f32[3, 2] = copy(%2)\n"
            "  return (%1, %3)\n"
            "}\n");
  expect_same_results(before, b.g, b.example_inputs);
}

TEST(NoopRemoval, CollapsesViewAndPermuteChains) {
  GraphBuilder b;
  ValueId x = b.input(randn({2, 3, 4}));
  ValueId r = b.op(OpId::exp, {x});
  ValueId v1 = b.op(OpId::view, {r}, shape_attr({6, 4}));
  ValueId u = b.op(OpId::unsqueeze, {v1}, Attrs().set("dim", int64_t{0}));
  ValueId v2 = b.op(OpId::view, {u}, shape_attr({4, -1}));
  ValueId p1 = b.op(OpId::permute, {r}, dims_attr({2, 0, 1}));
  ValueId p2 = b.op(OpId::permute, {p1}, dims_attr({0, 2, 1}));
  ValueId p3 = b.op(OpId::permute, {r}, dims_attr({1, 2, 0}));
  ValueId back = b.op(OpId::permute, {p3}, dims_attr({2, 0, 1}));  // undoes p3: r itself
  b.output(v2);
  b.output(p2);
  b.output(back);
  Graph before = b.g;
  remove_noops(b.g);
  eliminate_dead_code(b.g);
  EXPECT_EQ(print(b.g),
            "graph graph(%0: f32[2, 3, 4]) {\n"
            "  %1: f32[2, 3, 4] = exp(%0)\n"
            "  %2: f32[4, 6] = view(%1) {shape=[4, -1]}\n"
            "  %3: f32[4, 3, 2]{strides=[1, 4, 12]} = permute(%1) {dims=[2, 1, 0]}\n"
            "  return (%2, %3, %1)\n"
            "}\n");
  expect_same_results(before, b.g, b.example_inputs);
}

TEST(NoopRemoval, KeepsWhatWouldBeObservable) {
  GraphBuilder b;
  ValueId x = b.input(randn({3}));
  ValueId zero = b.constant(scalar_tensor(0.0));
  ValueId fresh = b.op(OpId::add, {x, zero});    // the caller gets a new tensor, not its input
  ValueId y = b.op(OpId::exp, {x});
  ValueId y0 = b.op(OpId::add, {y, zero});
  b.op(OpId::mul_, {y0, b.constant(scalar_tensor(2.0))});  // written in place: y must not change
  ValueId c = b.op(OpId::copy, {y});
  b.op(OpId::fill_, {c}, Attrs().set("value", 0.0));
  ValueId z = b.op(OpId::neg, {x});
  ValueId z1 = b.op(OpId::mul, {z, b.constant(scalar_tensor(1.0))});  // z is an output too
  b.output(z);
  b.output(z1);
  b.output(fresh);
  b.output(y);
  b.output(y0);
  b.output(c);
  std::string before = print(b.g);
  remove_noops(b.g);
  EXPECT_EQ(print(b.g), before);
  Tensor xs = randn({3});
  Tensors out = interpret(b.g, Tensors{xs});
  EXPECT_NE(out[2].impl(), xs.impl());
  EXPECT_FALSE(out[0].shares_storage(out[1]));
}

}  // namespace
}  // namespace kiln::compiler
