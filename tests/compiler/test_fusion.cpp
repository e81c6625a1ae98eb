// Vertical fusion on the loop IR (TVM-style expected texts).
#include <gtest/gtest.h>

#include "compiler/lower/lower_graph.h"
#include "compiler/schedule/fuse_horizontal.h"
#include "compiler/schedule/fuse_vertical.h"
#include "compiler/schedule/hoist_fills.h"
#include "compiler/schedule/store_copy_backs.h"
#include "compiler/backend/cpp_executable.h"
#include "compiler/graph/interpreter.h"
#include "testing/compare.h"
#include "graph_builder.h"

namespace kiln::compiler::schedule {
namespace {

using lower::LoopProgram;
using testing::GraphBuilder;

LoopProgram lower_and_fuse(const Graph& g) {
  LoopProgram p = lower::lower_graph(g);
  fuse_vertical(p);
  return p;
}

TEST(FuseVertical, PointwiseChainIsOneKernelWithOneLoadPerInput) {
  GraphBuilder b;
  ValueId x = b.input(randn({8, 16})), a = b.input(randn({8, 16})), c = b.input(randn({16}));
  ValueId m = b.op(OpId::mul, {x, a});
  ValueId s = b.op(OpId::add, {m, c});
  ValueId r = b.op(OpId::relu, {s});
  b.output(r);
  LoopProgram p = lower_and_fuse(b.g);
  ASSERT_EQ(p.kernels.size(), 1u) << print(p);
  EXPECT_EQ(print(p),
            "kernel k0 covers #3, 4, 5 {\n"
            "  for i0 in [0, 8):\n"
            "    for i1 in [0, 16):\n"
            "      t0 = mul(%0[16*i0 + i1], %1[16*i0 + i1])\n"
            "      t1 = add(t0, %2[i1])\n"
            "      t2 = lt(t1, 0)\n"
            "      t3 = select(t2, 0, t1)\n"
            "      %5[16*i0 + i1] = t3\n"
            "}\n");
  EXPECT_EQ(p.kernels[0].loads.size(), 3u);
  EXPECT_EQ(p.kernels[0].stores.size(), 1u);
}

TEST(FuseVertical, ProducerInlinesThroughATranspose) {
  GraphBuilder b;
  ValueId x = b.input(randn({4, 6}));
  ValueId e = b.op(OpId::exp, {x});
  ValueId t = b.op(OpId::permute, {e}, Attrs().set("dims", std::vector<int64_t>{1, 0}));
  ValueId y = b.op(OpId::neg, {t});
  b.output(y);
  LoopProgram p = lower_and_fuse(b.g);
  EXPECT_EQ(print(p),
            "view %2 = permute(%1)  # #2\n"
            "kernel k0 covers #1, 3 {\n"
            "  for i0 in [0, 6):\n"
            "    for i1 in [0, 4):\n"
            "      t0 = exp(%0[i0 + 6*i1])\n"
            "      t1 = neg(t0)\n"
            "      %3[4*i0 + i1] = t1\n"
            "}\n");
}

TEST(FuseVertical, PointwisePrologueIntoAReduction) {
  // softmax's second half: sum(exp(x - max)) over the last dim.
  GraphBuilder b;
  ValueId x = b.input(randn({3, 5}));
  ValueId mx = b.op(OpId::amax, {x}, Attrs().set("dims", std::vector<int64_t>{1}).set("keepdim", true));
  ValueId d = b.op(OpId::sub, {x, mx});
  ValueId e = b.op(OpId::exp, {d});
  ValueId s = b.op(OpId::sum, {e}, Attrs().set("dims", std::vector<int64_t>{1}).set("keepdim", true));
  ValueId y = b.op(OpId::div, {e, s});
  b.output(y);
  LoopProgram p = lower_and_fuse(b.g);
  // Three kernels: the max, the sum with exp(x - max) inlined, the division
  // with exp(x - max) recomputed (cheaper than storing and reloading it).
  EXPECT_EQ(print(p),
            "kernel k0 covers #1 {\n"
            "  for i0 in [0, 3):\n"
            "    acc0 = max identity\n"
            "    for r0 in [0, 5):  # reduce\n"
            "      acc0 = max(acc0, %0[5*i0 + r0])\n"
            "    %1[i0] = acc0\n"
            "}\n"
            "kernel k1 covers #2, 3, 4 {\n"
            "  for i0 in [0, 3):\n"
            "    acc0 = sum identity\n"
            "    for r0 in [0, 5):  # reduce\n"
            "      t0 = sub(%0[5*i0 + r0], %1[i0])\n"
            "      t1 = exp(t0)\n"
            "      acc0 = sum(acc0, t1)\n"
            "    %4[i0] = acc0\n"
            "}\n"
            "kernel k2 covers #2, 3, 5 {\n"
            "  for i0 in [0, 3):\n"
            "    for i1 in [0, 5):\n"
            "      t0 = sub(%0[5*i0 + i1], %1[i0])\n"
            "      t1 = exp(t0)\n"
            "      t2 = div(t1, %4[i0])\n"
            "      %5[5*i0 + i1] = t2\n"
            "}\n");
}

TEST(FuseVertical, KeepsWhatATensorIsNeededFor) {
  GraphBuilder b;
  ValueId x = b.input(randn({4, 4}));
  ValueId e = b.op(OpId::exp, {x});
  ValueId y = b.op(OpId::neg, {e});
  b.output(e);  // a graph output: stored
  b.output(y);
  LoopProgram p = lower_and_fuse(b.g);
  EXPECT_EQ(p.kernels.size(), 2u) << print(p);
}

TEST(FuseVertical, NeverMovesAReadPastAnInPlaceWrite) {
  GraphBuilder b;
  ValueId x = b.input(randn({4})), d = b.input(randn({4}));
  ValueId e = b.op(OpId::exp, {x});
  b.op(OpId::add_, {x, d}, Attrs().set("alpha", 1.0));
  ValueId y = b.op(OpId::neg, {e});
  b.output(y);
  LoopProgram p = lower_and_fuse(b.g);
  EXPECT_EQ(p.kernels.size(), 2u) << print(p);
}

TEST(FuseHorizontal, ReductionsOverOneSpaceShareTheirLoads) {
  // A batch norm's statistics: sum(x) and sum(x * x) per channel.
  GraphBuilder b;
  ValueId x = b.input(randn({4, 3, 5}));
  Attrs per_channel = Attrs().set("dims", std::vector<int64_t>{0, 2}).set("keepdim", false);
  ValueId s1 = b.op(OpId::sum, {x}, per_channel);
  ValueId s2 = b.op(OpId::sum, {b.op(OpId::mul, {x, x})}, per_channel);
  b.output(s1);
  b.output(s2);
  LoopProgram p = lower_and_fuse(b.g);
  fuse_horizontal(p);
  EXPECT_EQ(print(p),
            "kernel k0 covers #1, 2, 3 {\n"
            "  for i0 in [0, 3):\n"
            "    acc0 = sum identity\n"
            "    acc1 = sum identity\n"
            "    for r0 in [0, 4):  # reduce\n"
            "      for r1 in [0, 5):  # reduce\n"
            "        t0 = mul(%0[5*i0 + 15*r0 + r1], %0[5*i0 + 15*r0 + r1])\n"
            "        acc0 = sum(acc0, %0[5*i0 + 15*r0 + r1])\n"
            "        acc1 = sum(acc1, t0)\n"
            "    %1[i0] = acc0\n"
            "    %3[i0] = acc1\n"
            "}\n");
  EXPECT_EQ(p.kernels[0].loads.size(), 1u);
}

TEST(FuseHorizontal, WaitsForWhatTheLaterKernelReads) {
  GraphBuilder b;
  ValueId x = b.input(randn({6}));
  ValueId e = b.op(OpId::exp, {x});
  ValueId m = b.op(OpId::sum, {e}, Attrs().set("dims", std::vector<int64_t>{0}).set("keepdim", true));
  ValueId d = b.op(OpId::div, {e, m});  // reads the sum: cannot join exp's kernel
  b.output(e);
  b.output(d);
  LoopProgram p = lower_and_fuse(b.g);
  size_t before = p.kernels.size();
  fuse_horizontal(p);
  EXPECT_EQ(p.kernels.size(), before) << print(p);
  EXPECT_EQ(before, 3u);
}

// A 0-d fill as the capture writes a learning rate: full() of a scalar.
ValueId scalar_fill(GraphBuilder& b, double v) {
  return b.op(OpId::full, {},
              Attrs().set("shape", Shape{}).set("dtype", DType::Float32).set("device", std::string("cpu")).set("value", v));
}

TEST(FuseHorizontal, AKeptValueAndItsElementwiseReaderAreOneKernel) {
  // SGD with momentum for one parameter: the new buffer (kept: the step
  // copies it back) and the new parameter computed from it. The learning
  // rate's fill sat between the two kernels; moved first, the second joins
  // the first and reads the buffer's expression instead of its store.
  GraphBuilder b;
  ValueId buf = b.input(randn({6})), grad = b.input(randn({6})), w = b.input(randn({6}));
  ValueId m = b.op(OpId::add, {b.op(OpId::mul, {buf, scalar_fill(b, 0.9)}), grad});
  ValueId nw = b.op(OpId::add, {w, b.op(OpId::mul, {m, scalar_fill(b, -0.1)})});
  b.output(m);
  b.output(nw);
  LoopProgram p = lower_and_fuse(b.g);
  ASSERT_EQ(p.kernels.size(), 2u) << print(p);
  EXPECT_EQ(hoist_fills(p), 2);
  fuse_horizontal(p);
  EXPECT_EQ(print(p),
            "extern %3 = full()  # #3\n"
            "extern %6 = full()  # #6\n"
            "kernel k0 covers #4, 5, 7, 8 {\n"
            "  for i0 in [0, 6):\n"
            "    t0 = mul(%0[i0], %3[0])\n"
            "    t1 = add(t0, %1[i0])\n"
            "    t2 = mul(t1, %6[0])\n"
            "    t3 = add(%2[i0], t2)\n"
            "    %5[i0] = t1\n"
            "    %8[i0] = t3\n"
            "}\n");
}

// One parameter's SGD step as a functionalized graph: the new momentum
// buffer and parameter, copied back at the end.
struct SgdStep {
  GraphBuilder b;
  ValueId buf, grad, w, m, nw;
  SgdStep() {
    manual_seed(7);
    buf = b.input(randn({6})), grad = b.input(randn({6})), w = b.input(randn({6}));
    m = b.op(OpId::add, {b.op(OpId::mul, {buf, scalar_fill(b, 0.9)}), grad});
    nw = b.op(OpId::add, {w, b.op(OpId::mul, {m, scalar_fill(b, -0.1)})});
  }
  void copy_back() {
    b.op(OpId::copy_, {w, nw});
    b.op(OpId::copy_, {buf, m});
  }
  LoopProgram program() {
    LoopProgram p = lower_and_fuse(b.g);
    hoist_fills(p);
    fuse_horizontal(p);
    return p;
  }
};

TEST(StoreCopyBacks, TheUpdateKernelStoresIntoTheParameterAndItsBuffer) {
  SgdStep sgd;
  sgd.b.output(sgd.b.op(OpId::relu, {sgd.grad}));
  sgd.copy_back();
  LoopProgram p = sgd.program();
  EXPECT_EQ(store_copy_backs(p), 2);
  EXPECT_EQ(print(p),
            "extern %3 = full()  # #3\n"
            "extern %6 = full()  # #6\n"
            "kernel k0 covers #4, 5, 7, 8, 9 {\n"
            "  for i0 in [0, 6):\n"
            "    t0 = mul(%0[i0], %3[0])\n"
            "    t1 = add(t0, %1[i0])\n"
            "    t2 = mul(t1, %6[0])\n"
            "    t3 = add(%2[i0], t2)\n"
            "    t4 = lt(%1[i0], 0)\n"
            "    t5 = select(t4, 0, %1[i0])\n"
            "    %5[i0] = t1\n"
            "    %8[i0] = t3\n"
            "    %9[i0] = t5\n"
            "}\n"
            "  # %5 is stored in %0's memory (its copy-back)\n"
            "  # %8 is stored in %2's memory (its copy-back)\n");
  // Run: the inputs end as the interpreter leaves them.
  Tensors want = {sgd.b.example_inputs[0].clone(), sgd.b.example_inputs[1].clone(), sgd.b.example_inputs[2].clone()};
  Tensors got = {want[0].clone(), want[1].clone(), want[2].clone()};
  EXPECT_TENSOR_CLOSE(CppExecutable(sgd.b.g).run(got)[0], interpret(sgd.b.g, want)[0], 0, 0);
  for (size_t i = 0; i < 3; ++i) EXPECT_TENSOR_CLOSE(got[i], want[i], 1e-6, 1e-7) << "input " << i;
}

TEST(StoreCopyBacks, NotWhenTheOldValueIsReadAfterTheKernel) {
  // The old parameter read by a later step before its copy-back (a sum
  // over it: another kernel): storing early would change what it sees.
  // (A read in the update kernel itself is element for element: fine.)
  SgdStep sgd;
  sgd.b.output(sgd.b.op(OpId::sum, {sgd.w}, Attrs().set("dims", std::vector<int64_t>{0}).set("keepdim", false)));
  sgd.copy_back();
  LoopProgram p = sgd.program();
  EXPECT_EQ(store_copy_backs(p), 1) << print(p);  // the buffer's copy-back still goes
  EXPECT_NE(print(p).find("= copy_(%2, %8)"), std::string::npos) << print(p);
}

TEST(FuseVertical, AWriteAfterTheConsumersDoesNotStopIt) {
  // A train step: the bias is read by the forward and updated at the end.
  GraphBuilder b;
  ValueId x = b.input(randn({4, 3})), bias = b.input(randn({3})), d = b.input(randn({3}));
  ValueId r = b.op(OpId::relu, {b.op(OpId::add, {x, bias})});
  b.op(OpId::add_, {bias, d}, Attrs().set("alpha", -0.1));
  b.output(r);
  LoopProgram p = lower_and_fuse(b.g);
  EXPECT_EQ(p.kernels.size(), 1u) << print(p);
}

TEST(FusionScore, CountsSavedBytes) {
  GraphBuilder b;
  ValueId x = b.input(randn({256})), a = b.input(randn({256}));
  ValueId m = b.op(OpId::mul, {x, a});
  b.output(b.op(OpId::neg, {m}));
  LoopProgram p = lower::lower_graph(b.g);
  // Stored: read x and a, write m, read m once = 4 KiB; inlined: x and a once.
  EXPECT_EQ(inline_score(p, p.kernels[0], 1), 1024 + 1024 + 1024 + 1024 - 2048);
  // Three consumers would read x and a three times: 2 KiB + 1 + 3 KiB - 6 KiB.
  EXPECT_EQ(inline_score(p, p.kernels[0], 3), 2048 + 1024 + 3072 - 6144);
}

}  // namespace
}  // namespace kiln::compiler::schedule
