// The verifier's type check (verifier.h): re-derives each op node's output
// types with the op's shape rule, or for a view op its view function, on
// meta tensors (views only touch metadata), and compares shape and dtype
// with the recorded types.
#include <sstream>

#include "compiler/graph/printer.h"
#include "compiler/graph/verifier.h"
#include "ops/dispatch_mode.h"

namespace kiln::compiler {
namespace {

// What an op sees for a value: a constant's own tensor (its wrapped-number
// flag steers type promotion), else a meta tensor of the recorded type.
Tensor stand_in(const Graph& g, ValueId v) {
  if (v == kNoValue) return Tensor();
  const Node& producer = g.producer(v);
  if (producer.kind == NodeKind::Constant) return producer.constant;
  const ValueType& t = g.type(v);
  return Tensor::meta(t.shape, t.dtype, t.device, t.strides);
}

std::vector<TensorMeta> derive_outputs(const Graph& g, const Node& n) {
  Tensors args;
  for (ValueId v : n.inputs) args.push_back(stand_in(g, v));
  Attrs attrs = n.attrs;
  for (const AttrInput& a : n.attr_inputs) attrs.set(a.attr, g.scalar_inputs[static_cast<size_t>(a.scalar_index)].example);
  ExcludeModesGuard below_modes;  // as dispatch runs shape rules and view functions
  const OpDef& def = op_def(n.op);
  if (op_kind(n.op) == OpKind::View) {
    Tensor view = def.view(args, attrs);
    return {{view.shape(), view.dtype(), view.device()}};
  }
  KILN_ASSERT(def.infer != nullptr, "op '", op_name(n.op), "' has no shape rule");
  return def.infer(args, attrs);
}

}  // namespace

std::vector<std::string> verify_types(const Graph& g) {
  std::vector<std::string> problems;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (n.kind == NodeKind::Constant) {
      const ValueType& recorded = g.type(n.outputs[0]);
      if (n.constant.shape() != recorded.shape || n.constant.dtype() != recorded.dtype)
        problems.push_back(detail::concat("node ", i, " (constant): %", n.outputs[0], " is recorded as ",
                                          type_str(recorded), " but the tensor is ",
                                          type_str(ValueType::of(n.constant))));
      continue;
    }
    if (n.kind != NodeKind::Op || op_kind(n.op) == OpKind::Composite) continue;
    auto problem = [&](auto&&... parts) {
      problems.push_back(detail::concat("node ", i, " (", op_name(n.op), "): ", parts...));
    };
    std::vector<TensorMeta> derived;
    try {
      derived = derive_outputs(g, n);
    } catch (const Error& e) {
      problem("its shape rule rejects the recorded inputs: ", e.what());
      continue;
    }
    if (derived.size() != n.outputs.size()) {
      problem("the shape rule gives ", derived.size(), " outputs, the node has ", n.outputs.size());
      continue;
    }
    for (size_t k = 0; k < derived.size(); ++k) {
      const ValueType& recorded = g.type(n.outputs[k]);
      if (derived[k].shape == recorded.shape && derived[k].dtype == recorded.dtype) continue;
      ValueType want = ValueType::contiguous(derived[k].shape, derived[k].dtype, recorded.device, recorded.symbolic_dims);
      ValueType got = ValueType::contiguous(recorded.shape, recorded.dtype, recorded.device, recorded.symbolic_dims);
      problem("output %", n.outputs[k], " is recorded as ", type_str(got), " but the op gives ", type_str(want));
    }
  }
  return problems;
}

}  // namespace kiln::compiler
