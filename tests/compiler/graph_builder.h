// Building test graphs: each op node's output types come from running the op
// eagerly on example tensors, so a test states only ops, inputs and attrs,
// and the eager results are at hand as the reference.
#pragma once
#include <vector>

#include "compiler/graph/graph.h"
#include "compiler/graph/interpreter.h"
#include "compiler/graph/verifier.h"
#include "testing/compare.h"
#include "kiln/kiln.h"
#include "ops/op_def.h"

namespace kiln::compiler::testing {

struct GraphBuilder {
  Graph g;
  std::vector<Tensor> eager;  // per value: its eager result
  std::vector<Tensor> example_inputs;

  explicit GraphBuilder(std::string name = "graph") { g.name = std::move(name); }

  // An input with symbolic dim 0 makes every later value whose dim 0 has
  // that size symbolic there too (what capture's shape rules would derive).
  ValueId input(const Tensor& example, uint64_t symbolic_dims = 0) {
    ValueType t = ValueType::of(example);
    t.symbolic_dims = symbolic_dims;
    if ((symbolic_dims & 1u) != 0) batch_ = example.shape().at(0);
    ValueId v = g.add_input(t);
    record(v, example);
    example_inputs.push_back(example);
    return v;
  }
  ValueId constant(const Tensor& value) {
    ValueId v = g.add_constant(value);
    record(v, value);
    return v;
  }
  int scalar(std::string name, AttrValue example) { return g.add_scalar_input(std::move(name), std::move(example)); }

  std::vector<ValueId> ops(OpId op, const std::vector<ValueId>& inputs, Attrs attrs = {},
                           std::vector<AttrInput> attr_inputs = {}, std::string where = {}) {
    Tensors args;
    for (ValueId v : inputs) args.push_back(v == kNoValue ? Tensor() : eager.at(static_cast<size_t>(v)));
    Attrs run_attrs = attrs;
    for (const AttrInput& a : attr_inputs) run_attrs.set(a.attr, g.scalar_inputs.at(static_cast<size_t>(a.scalar_index)).example);
    Tensors out = dispatch(op, args, run_attrs);
    std::vector<ValueType> types;
    for (const Tensor& t : out) {
      types.push_back(ValueType::of(t));
      if (batch_ >= 0 && t.dim() > 0 && t.shape()[0] == batch_) types.back().symbolic_dims = 1;
    }
    std::vector<ValueId> ids = g.add_op(op, std::move(attrs), inputs, types, std::move(attr_inputs));
    g.nodes.back().where = std::move(where);
    for (size_t i = 0; i < ids.size(); ++i) record(ids[i], out[i]);
    return ids;
  }
  ValueId op(OpId op, const std::vector<ValueId>& inputs, Attrs attrs = {}, std::vector<AttrInput> attr_inputs = {},
             std::string where = {}) {
    return ops(op, inputs, std::move(attrs), std::move(attr_inputs), std::move(where))[0];
  }
  void output(ValueId v) { g.outputs.push_back(v); }

 private:
  int64_t batch_ = -1;
  void record(ValueId v, const Tensor& t) {
    if (eager.size() <= static_cast<size_t>(v)) eager.resize(static_cast<size_t>(v) + 1);
    eager[static_cast<size_t>(v)] = t;
  }
};

// A factory op's attributes (float32 on the CPU); random ops add a seed.
inline Attrs full_attrs(Shape shape, double value) {
  return Attrs().set("shape", std::move(shape)).set("dtype", DType::Float32).set("device", std::string("cpu")).set(
      "value", value);
}
inline Attrs random_attrs(Shape shape, int64_t seed) {
  return Attrs().set("shape", std::move(shape)).set("dtype", DType::Float32).set("device", std::string("cpu")).set(
      "seed", seed).set("offset", int64_t{0});
}

// max_pool2d's attributes for a square window (no padding or dilation).
inline Attrs max_pool_attrs(int64_t kernel, int64_t stride) {
  return Attrs()
      .set("kernel_size", std::vector<int64_t>{kernel, kernel})
      .set("stride", std::vector<int64_t>{stride, stride})
      .set("padding", std::vector<int64_t>{0, 0})
      .set("dilation", std::vector<int64_t>{1, 1})
      .set("ceil_mode", false);
}

// conv2d's attributes: stride 1, the given padding, no dilation or groups.
inline Attrs conv2d_attrs(int64_t padding) {
  return Attrs()
      .set("stride", std::vector<int64_t>{1, 1})
      .set("padding", std::vector<int64_t>{padding, padding})
      .set("dilation", std::vector<int64_t>{1, 1})
      .set("groups", int64_t{1});
}

// A pass test's second half: the rewritten graph verifies and computes what
// the original computed, on the builder's example inputs.
inline void expect_same_results(const Graph& before, const Graph& after, const Tensors& inputs, double rtol = 1e-5,
                                double atol = 1e-6) {
  EXPECT_EQ(verify(after), std::vector<std::string>{});
  Tensors want = interpret(before, inputs), got = interpret(after, inputs);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_TENSOR_CLOSE(got[i], want[i], rtol, atol) << "output " << i;
}

}  // namespace kiln::compiler::testing
