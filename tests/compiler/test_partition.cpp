// The min-cut partitioner and saved-bytes accounting.
#include <gtest/gtest.h>

#include "capture_checks.h"
#include "compiler/aot/partition.h"
#include "compiler/aot/saved_bytes.h"
#include "compiler/capture/compiled_state.h"
#include "graph_builder.h"
#include "kiln/compile.h"
#include "kiln/kiln.h"

namespace kiln::compiler {
namespace {

using testing::GraphBuilder;

// matmul -> cast to f64 -> exp, and a backward reading exp's output: saving
// the 64-byte matmul result and recomputing cast and exp beats saving the
// 128-byte exp result, which is what eager autograd keeps.
TEST(Partition, RecomputesCheapOpsFromASmallerSavedValue) {
  GraphBuilder b;
  ValueId x = b.input(randn({4, 4}));
  ValueId w = b.input(randn({4, 4}));
  ValueId a = b.op(OpId::matmul, {x, w});
  ValueId c64 = b.op(OpId::cast, {a}, Attrs().set("dtype", DType::Float64));
  ValueId e = b.op(OpId::exp, {c64});
  ValueId l = b.op(OpId::sum, {e}, Attrs().set("dims", std::vector<int64_t>{}).set("keepdim", false));
  for (ValueId v : {w, a, c64, e, l}) b.g.values[v].type.requires_grad = true;
  ValueId back = b.op(OpId::mul, {e, e});
  b.g.nodes.back().region = Node::Region::Backward;
  b.output(back);
  Partition p = min_cut_partition(b.g);
  ASSERT_EQ(p.saved.size(), 1u);
  EXPECT_EQ(p.saved[0], a);
  EXPECT_EQ(p.saved_bytes, 64);
  ASSERT_EQ(p.recomputed_nodes.size(), 2u);
  EXPECT_EQ(b.g.nodes[p.recomputed_nodes[0]].op, OpId::cast);
  EXPECT_EQ(b.g.nodes[p.recomputed_nodes[1]].op, OpId::exp);
  EXPECT_EQ(eager_saved_bytes(b.g), 128);
  SavedBytes s = saved_bytes(b.g);
  EXPECT_EQ(s.eager, 128);
  EXPECT_EQ(s.partitioned, 64);
}

TEST(Partition, NeverRecomputesMatmulOrRandomOps) {
  GraphBuilder b;
  ValueId x = b.input(randn({8, 8}));
  ValueId w = b.input(randn({8, 2}));
  ValueId r = b.op(OpId::randn, {}, testing::random_attrs({8, 8}, 7));
  ValueId xr = b.op(OpId::add, {x, r});  // 256 bytes
  ValueId a = b.op(OpId::matmul, {xr, w});  // 64 bytes, not recomputable
  for (ValueId v : {w, a}) b.g.values[v].type.requires_grad = true;
  ValueId back = b.op(OpId::neg, {a});
  b.g.nodes.back().region = Node::Region::Backward;
  b.output(back);
  Partition p = min_cut_partition(b.g);
  ASSERT_EQ(p.saved.size(), 1u);
  EXPECT_EQ(p.saved[0], a);
  EXPECT_TRUE(p.recomputed_nodes.empty());
  EXPECT_FALSE(recomputable(b.g.nodes[b.g.values[r].node]));
  EXPECT_FALSE(recomputable(b.g.nodes[b.g.values[a].node]));
}

TEST(Partition, CapturedTrainStepSavesNoMoreThanEagerAutograd) {
  manual_seed(5);
  auto model = models::airbench(0.5);
  optim::SGD opt(model->parameters(), optim::SGDOptions(0.1).momentum(0.9).nesterov(true));
  auto step = kiln::testing::compile_train_step(model, opt);
  step(randn({4, 3, 32, 32}), randint(0, 10, {4}));
  const Graph& g = step.state().variants.at(0)->segments.at(0)->graph;
  int regions[3] = {0, 0, 0};
  for (const Node& n : g.nodes)
    if (n.kind == NodeKind::Op) ++regions[static_cast<int>(n.region)];
  EXPECT_GT(regions[0], 10);  // forward
  EXPECT_GT(regions[1], 10);  // backward
  EXPECT_GT(regions[2], 10);  // optimizer update
  SavedBytes s = saved_bytes(g);
  EXPECT_GT(s.eager, 0);
  EXPECT_GT(s.partitioned, 0);
  EXPECT_LE(s.partitioned, s.eager);
}

}  // namespace
}  // namespace kiln::compiler
