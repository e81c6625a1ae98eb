// The ops table is complete: every op listed in ops.def has a definition with
// what its kind needs (a view function, a decomposition, or a shape rule and
// a CPU kernel).
#include <set>

#include <gtest/gtest.h>

#include "kiln/kiln.h"
#include "ops/op_def.h"

namespace kiln {
namespace {

TEST(OpsTable, EveryOpIsDefined) {
  std::vector<std::string> problems = verify_op_table();
  std::string all;
  for (const std::string& p : problems) all += "  " + p + "\n";
  EXPECT_TRUE(problems.empty()) << problems.size() << " problem(s) in the ops table:\n" << all;
}

TEST(OpsTable, NamesAndKinds) {
  EXPECT_STREQ(op_name(OpId::view), "view");
  EXPECT_EQ(op_kind(OpId::view), OpKind::View);
  EXPECT_STREQ(op_name(OpId::add), "add");
  EXPECT_EQ(op_kind(OpId::add), OpKind::Pointwise);
  EXPECT_EQ(op_kind(OpId::sum), OpKind::Reduction);
  EXPECT_EQ(op_kind(OpId::conv2d), OpKind::Extern);
  EXPECT_EQ(op_kind(OpId::reshape), OpKind::Composite);
  EXPECT_EQ(op_kind(OpId::add_), OpKind::Inplace);
  std::set<std::string> names;
  for (int i = 0; i < kNumOps; ++i) EXPECT_TRUE(names.insert(op_name(static_cast<OpId>(i))).second);
}

// Multi-output ops declare how many outputs carry gradients.
TEST(OpsTable, OutputCounts) {
  for (int i = 0; i < kNumOps; ++i) {
    OpId id = static_cast<OpId>(i);
    const OpDef* d = nullptr;
    try {
      d = &op_def(id);
    } catch (const InternalError&) {
      continue;  // reported by EveryOpIsDefined
    }
    EXPECT_EQ(d->id, id) << op_name(id);
    EXPECT_GE(d->num_outputs, 1) << op_name(id);
    EXPECT_LE(d->num_differentiable_outputs, d->num_outputs) << op_name(id);
  }
  for (OpId id : {OpId::max_pool2d, OpId::dropout}) {
    try {
      EXPECT_EQ(op_def(id).num_outputs, 2) << op_name(id);
    } catch (const InternalError&) {
    }
  }
  try {
    EXPECT_EQ(op_def(OpId::batch_norm).num_outputs, 3);
  } catch (const InternalError&) {
  }
}

}  // namespace
}  // namespace kiln
