#include "compiler/aot/joint.h"

#include "autograd/node.h"
#include "compiler/graph/tensor_values.h"
#include "ops/dispatch_mode.h"

namespace kiln::compiler {
namespace {

// Appends each op to the joint graph, then runs it on the meta tensors below
// (its shape rule, and autograd's recording while grad mode is on).
class TraceIntoGraph final : public DispatchMode {
 public:
  explicit TraceIntoGraph(Graph& g) : g_(g) {}
  const char* mode_name() const override { return "aot_trace"; }

  Tensors handle(OpId id, Tensors& inputs, const Attrs& attrs, const NextMode& next) override {
    if (op_kind(id) == OpKind::Composite) return next(id, inputs, attrs);
    std::vector<ValueId> ins;
    uint64_t sym = 0;
    for (const Tensor& t : inputs) {
      ins.push_back(value_of(t));
      if (ins.back() != kNoValue) sym |= g_.type(ins.back()).symbolic_dims;
    }
    Tensors outs = next(id, inputs, attrs);
    std::vector<ValueType> types;
    for (const Tensor& o : outs) {
      ValueType ty = ValueType::of(o);
      ty.symbolic_dims = symbolic_dims_for(sym, ty.shape.size());
      ty.requires_grad = region == Node::Region::Forward && o.impl()->grad_fn != nullptr;
      types.push_back(std::move(ty));
    }
    std::vector<ValueId> ids = g_.add_op(id, attrs, ins, types, attr_inputs);
    g_.nodes.back().region = region;
    g_.nodes.back().where = where;
    for (size_t k = 0; k < outs.size(); ++k) bind(outs[k], ids[k]);
    return outs;
  }

  void bind(const Tensor& t, ValueId v) { values_.bind(t, v); }
  ValueId value_of(const Tensor& t) {
    if (!t.defined()) return kNoValue;
    if (ValueId v = values_.find(t); v != kNoValue) return v;
    KILN_ASSERT(!t.is_meta(), "aot: the backward read a meta tensor the trace did not make");
    ValueId v = g_.add_constant(t);  // a number the derivative made (ones, a wrapped 0.5)
    g_.nodes.back().region = region;
    bind(t, v);
    return v;
  }

  // Of the node being replayed (forward) or of the derivative ops (backward).
  Node::Region region = Node::Region::Forward;
  std::vector<AttrInput> attr_inputs;
  std::string where;

 private:
  Graph& g_;
  TensorValues values_;
};

// Where a primal input's gradient arrives: the input's grad_fn in the trace.
class GradSink final : public autograd::Node {
 public:
  Tensors apply(TensorSpan grad_outputs) override {
    grad = grad_outputs[0];
    return {};
  }
  const char* name() const override { return "GradSink"; }
  Tensor grad;
};

// Grad mode on for the scope (the forward replay records the tape).
class GradOn {
 public:
  GradOn() : prev_(grad_mode_enabled()) { set_grad_mode(true); }
  ~GradOn() { set_grad_mode(prev_); }
  GradOn(const GradOn&) = delete;
  GradOn& operator=(const GradOn&) = delete;

 private:
  bool prev_;
};

}  // namespace

std::optional<JointGraph> build_joint(const Graph& fwd, std::string* why) {
  auto fail = [&](std::string reason) -> std::optional<JointGraph> {
    if (why) *why = std::move(reason);
    return std::nullopt;
  };
  // A step-varying attribute on a differentiable path would have to reach
  // the derivative too; the captured forwards have none (functionalized
  // graphs read scalar inputs only in full() and random ops).
  for (const Node& n : fwd.nodes) {
    if (n.kind != NodeKind::Op || n.attr_inputs.empty()) continue;
    for (ValueId v : n.inputs)
      if (v != kNoValue && fwd.type(v).requires_grad)
        return fail(std::string(op_name(n.op)) + " reads a scalar input on a differentiable path");
  }

  JointGraph j;
  Graph& g = j.graph;
  g.name = fwd.name + "_joint";
  g.scalar_inputs = fwd.scalar_inputs;
  j.num_primals = fwd.inputs.size();

  FreshModeStack own;  // the trace sees only its own ops, wherever it runs
  autograd::BackwardHookGuard real_engine(nullptr);  // the trace runs the real engine
  TraceIntoGraph trace(g);
  std::vector<Tensor> value(fwd.values.size());
  std::vector<std::shared_ptr<GradSink>> sinks(fwd.inputs.size());
  {
    ModeGuard guard(trace);
    GradOn grad_on;
    for (const Node& n : fwd.nodes) {
      if (n.kind == NodeKind::Input) {
        ValueType ty = fwd.type(n.outputs[0]);
        ValueId v = g.add_input(ty);
        Tensor t = ty.meta();
        if (ty.requires_grad && is_floating(ty.dtype)) {
          auto sink = std::make_shared<GradSink>();
          t.impl()->grad_fn = sink;
          t.impl()->output_nr = 0;
          sinks[static_cast<size_t>(n.input_index)] = sink;
        }
        trace.bind(t, v);
        value[n.outputs[0]] = t;
        continue;
      }
      if (n.kind == NodeKind::Constant) {
        trace.bind(n.constant, g.add_constant(n.constant));
        value[n.outputs[0]] = n.constant;
        continue;
      }
      Tensors ins;
      for (ValueId v : n.inputs) ins.push_back(v == kNoValue ? Tensor() : value[v]);
      Attrs attrs = n.attrs;
      for (const AttrInput& ai : n.attr_inputs) attrs.set(ai.attr, fwd.scalar_inputs[ai.scalar_index].example);
      trace.attr_inputs = n.attr_inputs;
      trace.where = n.where;
      Tensors outs = dispatch(n.op, ins, attrs);
      trace.attr_inputs.clear();
      KILN_ASSERT(outs.size() == n.outputs.size(), "aot: '", op_name(n.op), "' gave ", outs.size(), " outputs");
      for (size_t k = 0; k < outs.size(); ++k) value[n.outputs[k]] = outs[k];
    }
    for (ValueId o : fwd.outputs) g.outputs.push_back(trace.value_of(value[o]));
    j.num_forward_outputs = g.outputs.size();

    // The backward: one tangent per output that carries a gradient.
    Tensors roots, tangents;
    for (size_t k = 0; k < fwd.outputs.size(); ++k) {
      const Tensor& out = value[fwd.outputs[k]];
      if (!out.defined() || out.impl()->grad_fn == nullptr || !is_floating(out.dtype())) continue;
      ValueType ty = ValueType::of(out);
      ty.symbolic_dims = fwd.type(fwd.outputs[k]).symbolic_dims;
      ty.requires_grad = false;
      ValueId tv = g.add_input(ty);
      Tensor t = ty.meta();
      trace.bind(t, tv);
      roots.push_back(out);
      tangents.push_back(t);
      j.tangent_of.push_back(k);
    }
    if (roots.empty()) return fail("no output needs a gradient");
    trace.region = Node::Region::Backward;
    trace.where.clear();
    autograd::run_backward(roots, tangents, /*retain_graph=*/false);
  }
  for (size_t i = 0; i < sinks.size(); ++i) {
    if (!sinks[i] || !sinks[i]->grad.defined()) continue;
    g.outputs.push_back(trace.value_of(sinks[i]->grad));
    j.grad_of.push_back(i);
  }
  return j;
}

}  // namespace kiln::compiler
