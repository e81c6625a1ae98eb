// Building test graphs: each op node's output types come from running the op
// eagerly on example tensors, so a test states only ops, inputs and attrs,
// and the eager results are at hand as the reference.
#pragma once
#include <vector>

#include "compiler/graph/graph.h"
#include "kiln/kiln.h"
#include "ops/op_def.h"

namespace kiln::compiler::testing {

struct GraphBuilder {
  Graph g;
  std::vector<Tensor> eager;  // per value: its eager result
  std::vector<Tensor> example_inputs;

  explicit GraphBuilder(std::string name = "graph") { g.name = std::move(name); }

  ValueId input(const Tensor& example, uint64_t symbolic_dims = 0) {
    ValueType t = ValueType::of(example);
    t.symbolic_dims = symbolic_dims;
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
    for (const Tensor& t : out) types.push_back(ValueType::of(t));
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
  void record(ValueId v, const Tensor& t) {
    if (eager.size() <= static_cast<size_t>(v)) eager.resize(static_cast<size_t>(v) + 1);
    eager[static_cast<size_t>(v)] = t;
  }
};

}  // namespace kiln::compiler::testing
