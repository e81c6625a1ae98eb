// Functionalization: before/expected graphs and results equal to the
// in-place graph's.
#include <gtest/gtest.h>

#include "capture_checks.h"
#include "compiler/aot/functionalize.h"
#include "compiler/capture/compiled_state.h"
#include "compiler/graph/printer.h"
#include "graph_builder.h"
#include "kiln/compile.h"

namespace kiln::compiler {
namespace {

using testing::GraphBuilder;

TEST(Functionalize, AnUpdateOfAnInputBecomesPointwiseOpsAndOneCopyBack) {
  GraphBuilder b;
  ValueId p = b.input(full({3}, 1.0));
  ValueId g = b.input(full({3}, 2.0));
  int lr = b.scalar("alpha", -0.5);
  ValueId p1 = b.op(OpId::mul_, {p, g});
  b.op(OpId::add_, {p1, g}, Attrs().set("alpha", -0.5), {{"alpha", lr}});
  EXPECT_EQ(functionalize(b.g), 2);
  EXPECT_EQ(print(b.g),
            "graph graph(%0: f32[3], %1: f32[3]; $0 alpha: f64) {\n"
            "  %2: f32[3] = mul(%0, %1)\n"
            "  %3: f32[] = full() {shape=[], dtype=float32, device=\"cpu\", value=$0}\n"
            "  %4: f32[3] = mul(%1, %3)\n"
            "  %5: f32[3] = add(%2, %4)\n"
            "  %6: f32[3] = copy_(%0, %5)\n"
            "  return ()\n"
            "}\n");
  // The graph still updates the caller's tensor, with this run's alpha.
  Tensor pt = full({3}, 1.0), gt = full({3}, 2.0);
  interpret(b.g, Tensors{pt, gt}, std::vector<AttrValue>{-0.25});
  EXPECT_EQ(pt.to_vector<float>(), (std::vector<float>{1.5f, 1.5f, 1.5f}));  // 1*2 - 0.25*2
}

TEST(Functionalize, AValueMadeInTheGraphNeedsNoCopyBack) {
  GraphBuilder b;
  ValueId x = b.input(full({2}, 3.0));
  ValueId c = b.op(OpId::copy, {x});
  ValueId c1 = b.op(OpId::mul_, {c, x});
  b.output(c1);
  EXPECT_EQ(functionalize(b.g), 1);
  EXPECT_EQ(print(b.g),
            "graph graph(%0: f32[2]) {\n"
            "  %1: f32[2] = copy(%0)\n"
            "  %2: f32[2] = mul(%1, %0)\n"
            "  return (%2)\n"
            "}\n");
  EXPECT_EQ(interpret(b.g, Tensors{full({2}, 3.0)})[0].to_vector<float>(), (std::vector<float>{9, 9}));
}

TEST(Functionalize, AWriteSeenThroughAnEarlierViewStaysInPlace) {
  GraphBuilder b;
  ValueId x = b.input(zeros({4}));
  ValueId c = b.op(OpId::copy, {x});
  ValueId v = b.op(OpId::view, {c}, Attrs().set("shape", Shape{2, 2}));
  b.op(OpId::fill_, {c}, Attrs().set("value", 1.0));
  b.output(b.op(OpId::sum, {v}, Attrs().set("dims", std::vector<int64_t>{}).set("keepdim", false)));
  EXPECT_EQ(functionalize(b.g), 0);  // v, made before the fill, is read after it
  EXPECT_FLOAT_EQ(interpret(b.g, Tensors{zeros({4})})[0].item<float>(), 4.0f);
}

TEST(Functionalize, CapturedTrainStepRunsWithOnlyCopyBacksInPlace) {
  manual_seed(6);
  auto model = models::tutorial_cnn();
  optim::SGD opt(model->parameters(), optim::SGDOptions(0.1).momentum(0.9));
  auto step = kiln::testing::compile_train_step(model, opt);
  for (int i = 0; i < 2; ++i) step(randn({4, 3, 32, 32}), randint(0, 10, {4}));
  const Segment& s = *step.state().variants.back()->segments.at(0);
  int inplace = 0, copy_backs = 0;
  for (const Node& n : s.executable.nodes) {
    if (n.kind != NodeKind::Op || op_kind(n.op) != OpKind::Inplace) continue;
    ++inplace;
    copy_backs += n.op == OpId::copy_ && s.executable.nodes[s.executable.values[n.inputs[0]].node].kind == NodeKind::Input;
  }
  // Each parameter and each momentum buffer is written back once.
  EXPECT_EQ(copy_backs, 2 * static_cast<int>(model->parameters().size()));
  EXPECT_EQ(inplace, copy_backs);
}

}  // namespace
}  // namespace kiln::compiler

#include "compiler/passes/copy_back_removal.h"

namespace kiln::compiler {
namespace {

TEST(CopyBackRemoval, DropsAWriteIntoATemporaryNobodyReadsKeepsInputWrites) {
  testing::GraphBuilder b;
  ValueId x = b.input(full({2}, 1.0));
  ValueId y = b.input(full({2}, 2.0));
  ValueId t = b.op(OpId::copy, {x});
  b.op(OpId::copy_, {t, y});  // into a temporary nobody reads: unobserved
  b.op(OpId::copy_, {x, y});  // into the caller's tensor: observed
  b.output(b.op(OpId::neg, {y}));
  EXPECT_EQ(remove_unobserved_copy_backs(b.g), 1);
  EXPECT_EQ(print(b.g),
            "graph graph(%0: f32[2], %1: f32[2]) {\n"
            "  %2: f32[2] = copy(%0)\n"
            "  %3: f32[2] = copy_(%0, %1)\n"
            "  %4: f32[2] = neg(%1)\n"
            "  return (%4)\n"
            "}\n");
}

}  // namespace
}  // namespace kiln::compiler
