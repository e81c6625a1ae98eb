// The ops table is complete: every op listed in ops.def has a definition with
// what its kind needs (a view function, a decomposition, or a shape rule and
// a CPU kernel).
#include <algorithm>
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

namespace kiln {
namespace {

// The schema's mutation and alias facts match what the kernels do: the
// inputs it names are the ones whose versions move, and aliasing outputs
// share their input's storage.
TEST(OpsTable, SchemaMutationsMatchTheKernels) {
  for (int i = 0; i < kNumOps; ++i) {
    OpId id = static_cast<OpId>(i);
    if (op_kind(id) == OpKind::Inplace) {
      EXPECT_EQ(op_def(id).mutated_inputs, 1u) << op_name(id);
      EXPECT_EQ(op_def(id).output0_aliases, 0) << op_name(id);
    } else if (op_kind(id) == OpKind::View) {
      EXPECT_EQ(op_def(id).output0_aliases, 0) << op_name(id);
      EXPECT_EQ(op_def(id).mutated_inputs, 0u) << op_name(id);
    }
  }
  // batch_norm in training writes its running statistics (inputs 3 and 4), nothing else.
  Tensor x = randn({4, 3, 2, 2}), w = ones({3}), b = zeros({3}), rm = zeros({3}), rv = ones({3});
  std::vector<uint64_t> before = {x.version(), w.version(), b.version(), rm.version(), rv.version()};
  batch_norm(x, w, b, rm, rv, true, 0.1, 1e-5);
  std::vector<Tensor> in = {x, w, b, rm, rv};
  uint32_t mask = op_def(OpId::batch_norm).mutated_inputs;
  for (size_t k = 0; k < in.size(); ++k)
    EXPECT_EQ(in[k].version() != before[k], (mask >> k & 1u) != 0) << "batch_norm input " << k;
  // An in-place op's output is its first input.
  Tensor p = zeros({3});
  Tensor& r = add_(p, ones({3}), 2.0);
  EXPECT_TRUE(r.shares_storage(p));
  Tensor v = p.view({3, 1});
  EXPECT_TRUE(v.shares_storage(p));
}

TEST(OpsTable, StepVaryingScalarsAreStepAttributes) {
  auto has = [](OpId id, std::string_view a) {
    const auto& s = op_def(id).step_attrs;
    return std::find(s.begin(), s.end(), a) != s.end();
  };
  EXPECT_TRUE(has(OpId::add_, "alpha"));
  EXPECT_TRUE(has(OpId::addcdiv_, "value"));
  EXPECT_TRUE(has(OpId::addcmul_, "value"));
  EXPECT_TRUE(has(OpId::lerp_, "weight"));
  for (OpId id : {OpId::rand, OpId::randn, OpId::randint, OpId::dropout, OpId::bernoulli}) {
    EXPECT_TRUE(has(id, "seed")) << op_name(id);
    EXPECT_TRUE(has(id, "offset")) << op_name(id);
  }
  EXPECT_FALSE(has(OpId::conv2d, "stride"));
}

}  // namespace
}  // namespace kiln
