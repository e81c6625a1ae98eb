// Lowering to the loop IR: index simplification, views folded into loads,
// broadcasts, reductions, what stays extern (TVM-style expected texts).
#include <gtest/gtest.h>

#include "compiler/lower/index_expr.h"
#include "compiler/lower/lower_graph.h"
#include "compiler/lower/merge_loops.h"
#include "graph_builder.h"

namespace kiln::compiler::lower {
namespace {

using testing::GraphBuilder;

TEST(IndexExpr, SimplifiesToCanonicalForm) {
  IndexExpr i0 = IndexExpr::symbol("i0"), i1 = IndexExpr::symbol("i1"), s0 = IndexExpr::symbol("s0");
  EXPECT_EQ((IndexExpr(2) * IndexExpr(3)).str(), "6");
  EXPECT_EQ((i0 * IndexExpr(4) + i0 * IndexExpr(2)).str(), "6*i0");
  EXPECT_EQ((i1 * IndexExpr(0) + i0 + IndexExpr(0)).str(), "i0");
  EXPECT_EQ((i1 + IndexExpr(3) + i0 * s0).str(), "i0*s0 + i1 + 3");
  EXPECT_EQ((i0 - i0).str(), "0");
  EXPECT_EQ((IndexExpr(1) - i0 * IndexExpr(2)).str(), "-2*i0 + 1");
  EXPECT_EQ(flat_index({i0, IndexExpr(0), i1}, {s0, IndexExpr(3), IndexExpr(5)}).str(), "15*i0 + i1");
  EXPECT_EQ((i0 * IndexExpr(3) + i1).substitute({{"i0", i1 + IndexExpr(1)}}).str(), "4*i1 + 3");
  EXPECT_EQ((i0 * IndexExpr(3) + i1).stride_of("i0"), 3);
  EXPECT_EQ((i0 * s0).stride_of("i0"), std::nullopt);
  EXPECT_EQ((i0 * s0 + IndexExpr(2)).eval({{"i0", 3}, {"s0", 5}}), 17);
  EXPECT_EQ(IndexExpr(7).constant(), 7);
  EXPECT_TRUE((i0 * s0).uses("s0"));
}

TEST(Lower, PointwiseBroadcastsAndConstantsBecomeLiterals) {
  GraphBuilder b;
  ValueId x = b.input(randn({2, 3})), bias = b.input(randn({3}));
  ValueId half = b.constant(full({}, 0.5, TensorOptions().with_dtype(DType::Float64)));
  ValueId y = b.op(OpId::add, {x, bias});
  ValueId z = b.op(OpId::mul, {y, half});
  b.output(z);
  LoopProgram p = lower_graph(b.g);
  EXPECT_EQ(print(p),
            "kernel k0 covers #3 {\n"
            "  for i0 in [0, 2):\n"
            "    for i1 in [0, 3):\n"
            "      t0 = add(%0[3*i0 + i1], %1[i1])\n"
            "      %3[3*i0 + i1] = t0\n"
            "}\n"
            "kernel k1 covers #4 {\n"
            "  for i0 in [0, 2):\n"
            "    for i1 in [0, 3):\n"
            "      t0 = mul(%3[3*i0 + i1], 0.5)\n"
            "      %4[3*i0 + i1] = t0\n"
            "}\n");
}

TEST(Lower, ViewsFoldIntoIndexing) {
  GraphBuilder b;
  ValueId x = b.input(randn({4, 6}));
  ValueId t = b.op(OpId::permute, {x}, Attrs().set("dims", std::vector<int64_t>{1, 0}));            // [6, 4]
  ValueId s = b.op(OpId::slice, {t}, Attrs().set("dim", int64_t{0}).set("start", int64_t{1}).set(
                                         "end", int64_t{6}).set("step", int64_t{2}));  // [3, 4]
  ValueId u = b.op(OpId::unsqueeze, {s}, Attrs().set("dim", int64_t{0}));                         // [1, 3, 4]
  ValueId e = b.op(OpId::expand, {u}, Attrs().set("shape", Shape{2, 3, 4}));                      // [2, 3, 4]
  ValueId y = b.op(OpId::neg, {e});
  b.output(y);
  LoopProgram p = lower_graph(b.g);
  EXPECT_EQ(print(p),
            "view %1 = permute(%0)  # #1\n"
            "view %2 = slice(%1)  # #2\n"
            "view %3 = unsqueeze(%2)  # #3\n"
            "view %4 = expand(%3)  # #4\n"
            "kernel k0 covers #5 {\n"
            "  for i0 in [0, 2):\n"
            "    for i1 in [0, 3):\n"
            "      for i2 in [0, 4):\n"
            "        t0 = neg(%0[2*i1 + 6*i2 + 1])\n"
            "        %5[12*i0 + 4*i1 + i2] = t0\n"
            "}\n");
  EXPECT_FALSE(p.needs_tensor[static_cast<size_t>(e)]);
}

TEST(Lower, ReshapeOfContiguousBufferReadsTheSameMemory) {
  GraphBuilder b;
  ValueId x = b.input(randn({2, 6}), /*symbolic_dims=*/1);
  ValueId v = b.op(OpId::view, {x}, Attrs().set("shape", Shape{2, 2, 3}));
  ValueId y = b.op(OpId::exp, {v});
  b.output(y);
  // The builder marks y's dim 0 symbolic (size 2 = the batch): the view's
  // input shape stays s0-based.
  LoopProgram p = lower_graph(b.g);
  EXPECT_NE(print(p).find("t0 = exp(%0[6*i0 + 3*i1 + i2])"), std::string::npos) << print(p);
}

TEST(Lower, ReductionsPutTheReducedLoopsInnermost) {
  GraphBuilder b;
  ValueId x = b.input(randn({2, 3, 4}));
  ValueId m = b.op(OpId::mean, {x}, Attrs().set("dims", std::vector<int64_t>{0, 2}).set("keepdim", true));
  ValueId a = b.op(OpId::amax, {x}, Attrs().set("dims", std::vector<int64_t>{-1}).set("keepdim", false));
  b.output(m);
  b.output(a);
  LoopProgram p = lower_graph(b.g);
  EXPECT_EQ(print(p),
            "kernel k0 covers #1 {\n"
            "  for i1 in [0, 3):\n"
            "    acc0 = sum identity\n"
            "    for r0 in [0, 2):  # reduce\n"
            "      for r1 in [0, 4):  # reduce\n"
            "        acc0 = sum(acc0, %0[4*i1 + 12*r0 + r1])\n"
            "    t0 = div(acc0, 8)\n"
            "    %1[i1] = t0\n"
            "}\n"
            "kernel k1 covers #2 {\n"
            "  for i0 in [0, 2):\n"
            "    for i1 in [0, 3):\n"
            "      acc0 = max identity\n"
            "      for r0 in [0, 4):  # reduce\n"
            "        acc0 = max(acc0, %0[12*i0 + 4*i1 + r0])\n"
            "      %2[3*i0 + i1] = acc0\n"
            "}\n");
}

TEST(Lower, WhatDoesNotLowerStaysExtern) {
  GraphBuilder b;
  ValueId x = b.input(randn({2, 3, 8, 8})), w = b.input(randn({4, 3, 3, 3}));
  ValueId c = b.op(OpId::conv2d, {x, w, kNoValue}, testing::conv2d_attrs(1));
  ValueId r = b.op(OpId::relu, {c});
  ValueId d = b.op(OpId::cast, {r}, Attrs().set("dtype", DType::Float64));
  ValueId v = b.op(OpId::argmax, {r}, Attrs().set("dim", int64_t{1}).set("keepdim", false));
  b.output(d);
  b.output(v);
  std::vector<NodeLowering> kinds = classify_nodes(b.g);
  EXPECT_EQ(kinds[2], NodeLowering::Extern);     // conv2d
  EXPECT_EQ(kinds[3], NodeLowering::Pointwise);  // relu
  EXPECT_EQ(kinds[4], NodeLowering::Extern);     // a cast to float64
  EXPECT_EQ(kinds[5], NodeLowering::Extern);     // argmax
  LoopProgram p = lower_graph(b.g);
  EXPECT_TRUE(p.needs_tensor[static_cast<size_t>(r)]);  // read by extern nodes
}

TEST(Lower, VarianceIsAWelfordReduction) {
  GraphBuilder b;
  ValueId x = b.input(randn({3, 5}), /*symbolic_dims=*/1);
  b.output(b.op(OpId::var, {x}, Attrs().set("dims", std::vector<int64_t>{0}).set("keepdim", false).set(
                                    "correction", int64_t{1})));
  LoopProgram p = lower_graph(b.g);
  EXPECT_EQ(print(p),
            "kernel k0 covers #1 {\n"
            "  for i0 in [0, 5):\n"
            "    acc0 = welford identity\n"
            "    for r0 in [0, s0):  # reduce\n"
            "      acc0 = welford(acc0, %0[i0 + 5*r0])\n"
            "    t0 = lt(s0 - 1, 0)\n"
            "    t1 = select(t0, 0, s0 - 1)\n"
            "    t2 = div(acc0, t1)\n"
            "    %1[i0] = t2\n"
            "}\n");
}

TEST(MergeLoops, ContiguousDimsBecomeOneLoop) {
  GraphBuilder b;
  ValueId x = b.input(randn({8, 16, 4, 4}), /*symbolic_dims=*/1), scale = b.input(randn({16, 1, 1}));
  ValueId y = b.op(OpId::mul, {x, scale});
  ValueId s = b.op(OpId::sum, {y}, Attrs().set("dims", std::vector<int64_t>{2, 3}).set("keepdim", false));
  b.output(s);
  b.output(y);
  LoopProgram p = lower_graph(b.g);
  merge_loops(p);
  // i0 and i1 stay apart (scale reads i1 alone); i2 and i3 merge, and so do
  // the two reduced loops.
  EXPECT_EQ(print(p),
            "kernel k0 covers #2 {\n"
            "  for i0 in [0, s0):\n"
            "    for i1 in [0, 16):\n"
            "      for i2 in [0, 16):\n"
            "        t0 = mul(%0[256*i0 + 16*i1 + i2], %1[i1])\n"
            "        %2[256*i0 + 16*i1 + i2] = t0\n"
            "}\n"
            "kernel k1 covers #3 {\n"
            "  for i0 in [0, 16*s0):\n"
            "    acc0 = sum identity\n"
            "    for r0 in [0, 16):  # reduce\n"
            "      acc0 = sum(acc0, %2[16*i0 + r0])\n"
            "    %3[i0] = acc0\n"
            "}\n");
}

}  // namespace
}  // namespace kiln::compiler::lower
