#include "compiler/graph/rebuilder.h"

#include "ops/meta_mode.h"

namespace kiln::compiler {

Rebuilder::Rebuilder(const Graph& in, Graph& out) : in_(in), out_(out), map_(in.values.size(), kNoValue) {
  out_.name = in.name;
  out_.scalar_inputs = in.scalar_inputs;
}

void Rebuilder::copy_node(const Node& n) {
  current_ = &n;
  if (n.kind == NodeKind::Input) {
    map_[n.outputs[0]] = out_.add_input(in_.type(n.outputs[0]));
    return;
  }
  if (n.kind == NodeKind::Constant) {
    map_[n.outputs[0]] = out_.add_constant(n.constant);
    return;
  }
  std::vector<ValueId> ins;
  for (ValueId v : n.inputs) ins.push_back(mapped(v));
  std::vector<ValueType> types;
  for (ValueId o : n.outputs) types.push_back(in_.type(o));
  std::vector<ValueId> outs = out_.add_op(n.op, n.attrs, ins, types, n.attr_inputs);
  finish();
  for (size_t k = 0; k < outs.size(); ++k) map_[n.outputs[k]] = outs[k];
}

std::vector<ValueId> Rebuilder::ops(OpId id, std::vector<ValueId> ins, Attrs attrs,
                                    std::vector<AttrInput> attr_inputs) {
  Tensors metas;
  uint64_t sym = 0;
  bool rg = false;
  for (ValueId v : ins) {
    if (v == kNoValue) {
      metas.emplace_back();
      continue;
    }
    metas.push_back(out_.type(v).meta());
    sym |= out_.type(v).symbolic_dims;
    rg = rg || out_.type(v).requires_grad;
  }
  Attrs run = attrs;
  for (const AttrInput& ai : attr_inputs) run.set(ai.attr, out_.scalar_inputs[ai.scalar_index].example);
  Tensors outs = meta_outputs(id, metas, run);
  std::vector<ValueType> types;
  const OpDef& def = op_def(id);
  for (size_t k = 0; k < outs.size(); ++k) {
    ValueType ty = ValueType::of(outs[k]);
    ty.symbolic_dims = symbolic_dims_for(sym, ty.shape.size());
    // As eager autograd marks them: only the op's differentiable outputs
    // (batch_norm's statistics never need grad).
    ty.requires_grad = rg && is_floating(ty.dtype) && def.backward != nullptr &&
                       static_cast<int>(k) < def.num_differentiable_outputs;
    types.push_back(std::move(ty));
  }
  std::vector<ValueId> r = out_.add_op(id, std::move(attrs), std::move(ins), types, std::move(attr_inputs));
  finish();
  return r;
}

ValueId Rebuilder::constant(const Tensor& value) {
  ValueId v = out_.add_constant(value);
  finish();
  return v;
}

void Rebuilder::finish() {
  if (current_ == nullptr) return;
  out_.nodes.back().where = current_->where;
  out_.nodes.back().region = current_->region;
}

int fuse_pairs(Graph& g, const std::unordered_map<int, int>& producer_of,
               const std::function<ValueId(Rebuilder& rb, const Node& consumer, const Node& producer)>& fuse) {
  if (producer_of.empty()) return 0;
  std::vector<bool> absorbed(g.nodes.size(), false);
  for (const auto& [consumer, producer] : producer_of) absorbed[static_cast<size_t>(producer)] = true;
  Graph out;
  {
    Rebuilder rb(g, out);
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      const Node& n = g.nodes[i];
      if (absorbed[i]) continue;  // emitted at its consumer
      auto it = producer_of.find(static_cast<int>(i));
      if (it == producer_of.end()) {
        rb.copy_node(n);
        continue;
      }
      rb.begin(n);
      rb.set(n.outputs[0], fuse(rb, n, g.nodes[static_cast<size_t>(it->second)]));
    }
    for (ValueId v : g.outputs) out.outputs.push_back(rb.mapped(v));
  }
  out.name = g.name;
  g = std::move(out);
  return static_cast<int>(producer_of.size());
}

}  // namespace kiln::compiler
