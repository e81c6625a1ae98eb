#include "compiler/aot/compiled_backward.h"

#include <algorithm>
#include <set>

#include "autograd/node.h"
#include "compiler/aot/joint.h"
#include "compiler/graph/interpreter.h"
#include "compiler/graph/rebuilder.h"
#include "compiler/graph/rewrite.h"
#include "compiler/passes/pipeline.h"
#include "kiln/ops.h"

namespace kiln::compiler {
namespace {

// Why the forward's outputs cannot take a compiled backward, or "".
std::string unsupported_outputs(const Graph& fwd) {
  std::set<ValueId> seen;
  for (ValueId o : fwd.outputs) {
    if (!fwd.type(o).requires_grad) continue;
    if (!seen.insert(o).second) return "an output is returned twice";
    if (fwd.producer(alias_root(fwd, o)).kind == NodeKind::Input)
      return "an output is an input or a view of one";
  }
  return "";
}

// The forward graph: the joint's forward nodes, returning the forward's
// outputs and then the saved values.
Graph forward_graph(const JointGraph& j, const Partition& p) {
  const Graph& g = j.graph;
  Graph out;
  {
    Rebuilder rb(g, out);
    for (const Node& n : g.nodes) {
      if (n.kind == NodeKind::Input && n.input_index >= static_cast<int>(j.num_primals)) continue;  // a tangent
      if (n.kind != NodeKind::Input && n.region != Node::Region::Forward) continue;
      rb.copy_node(n);
    }
    for (size_t k = 0; k < j.num_forward_outputs; ++k) out.outputs.push_back(rb.mapped(g.outputs[k]));
    for (ValueId v : p.saved) out.outputs.push_back(rb.mapped(v));
  }
  out.name = g.name + "_forward";
  return out;
}

// The backward graph: the primal inputs, the saved values and the tangents
// in; the recomputed forward nodes and the derivative nodes; the gradients
// out. nullopt when a derivative reads a forward value the partition left
// out (an internal error the caller survives by keeping the tape).
std::optional<Graph> backward_graph(const JointGraph& j, const Partition& p) {
  const Graph& g = j.graph;
  Graph out;
  {
    Rebuilder rb(g, out);
    for (size_t i = 0; i < j.num_primals; ++i) rb.copy_node(g.producer(g.inputs[i]));
    for (ValueId v : p.saved) rb.set(v, out.add_input(g.type(v)));
    for (size_t i = j.num_primals; i < g.inputs.size(); ++i) rb.copy_node(g.producer(g.inputs[i]));
    std::vector<bool> recompute(g.nodes.size(), false);
    for (int n : p.recomputed_nodes) recompute[static_cast<size_t>(n)] = true;
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      const Node& n = g.nodes[i];
      if (n.kind == NodeKind::Input) continue;
      bool wanted = n.kind == NodeKind::Constant || n.region != Node::Region::Forward || recompute[i];
      if (!wanted) continue;
      for (ValueId v : n.inputs)
        if (v != kNoValue && rb.mapped(v) == kNoValue) return std::nullopt;
      rb.copy_node(n);
    }
    for (size_t k = j.num_forward_outputs; k < g.outputs.size(); ++k) {
      if (rb.mapped(g.outputs[k]) == kNoValue) return std::nullopt;
      out.outputs.push_back(rb.mapped(g.outputs[k]));
    }
  }
  out.name = g.name + "_backward";
  return out;
}

// Drops the forward inputs the backward graph (after its passes) never
// reads, and returns the ones it keeps, in order: the runner holds and
// version-checks only those, as eager autograd checks only what it saved
// (an input modified in place before backward() is an error only when the
// backward needs it).
std::vector<size_t> drop_unread_primals(Graph& bwd, size_t num_primals) {
  std::vector<bool> read(bwd.values.size(), false);
  for (const Node& n : bwd.nodes)
    for (ValueId v : n.inputs)
      if (v != kNoValue) read[static_cast<size_t>(v)] = true;
  for (ValueId v : bwd.outputs) read[static_cast<size_t>(v)] = true;
  std::vector<size_t> kept;
  for (size_t i = 0; i < num_primals; ++i)
    if (read[static_cast<size_t>(bwd.inputs[i])]) kept.push_back(i);
  if (kept.size() == num_primals) return kept;
  Graph out;
  {
    Rebuilder rb(bwd, out);
    // Inputs first, in their order, so the kept ones keep theirs.
    for (size_t i = 0; i < bwd.inputs.size(); ++i)
      if (i >= num_primals || read[static_cast<size_t>(bwd.inputs[i])]) rb.copy_node(bwd.producer(bwd.inputs[i]));
    for (const Node& n : bwd.nodes)
      if (n.kind != NodeKind::Input) rb.copy_node(n);
    for (ValueId v : bwd.outputs) out.outputs.push_back(rb.mapped(v));
  }
  out.name = bwd.name;
  bwd = std::move(out);
  return kept;
}

// The autograd node of one compiled forward call: runs the backward graph
// on what that call saved.
class CompiledBackward final : public autograd::Node {
 public:
  CompiledBackward(std::shared_ptr<const ForwardBackward> fb, std::shared_ptr<const GraphExecutable> bwd)
      : fb_(std::move(fb)), bwd_(std::move(bwd)) {}

  Tensors apply(TensorSpan grad_outputs) override {
    KILN_CHECK(!released_, "backward through a compiled graph a second time: its saved values were freed after the "
                           "first backward; call backward(retain_graph=true) the first time");
    for (size_t i = 0; i < held.size(); ++i)
      KILN_CHECK(held[i].version() == versions[i],
                 "backward through a compiled graph: a ", dtype_name(held[i].dtype()), shape_str(held[i].shape()),
                 " tensor it needs was modified in place after the forward ran (version ", versions[i], " then, ",
                 held[i].version(), " now); clone it before modifying it, or modify it after backward()");
    Tensors in = held;
    for (size_t k = 0; k < fb_->tangent_of.size(); ++k) {
      const Tensor& g = k < grad_outputs.size() ? grad_outputs[k] : Tensor();
      in.push_back(g.defined() ? g : zeros(output_metas[k].shape, TensorOptions().with_dtype(output_metas[k].dtype)
                                                                         .with_device(output_metas[k].device)));
    }
    return bwd_->run(in, scalars);
  }
  const char* name() const override { return "CompiledBackward"; }
  void release() override {
    held.clear();
    released_ = true;
  }

  Tensors held;  // the forward inputs the backward reads (detached), then the saved values
  std::vector<uint64_t> versions;
  std::vector<AttrValue> scalars;
  std::vector<TensorMeta> output_metas;  // per tangent

 private:
  std::shared_ptr<const ForwardBackward> fb_;
  std::shared_ptr<const GraphExecutable> bwd_;
  bool released_ = false;
};

}  // namespace

std::optional<ForwardBackward> split_forward_backward(const Graph& fwd, std::string* why, std::string_view mode) {
  auto fail = [&](std::string reason) -> std::optional<ForwardBackward> {
    if (why) *why = std::move(reason);
    return std::nullopt;
  };
  if (std::string r = unsupported_outputs(fwd); !r.empty()) return fail(r);
  std::optional<JointGraph> j = build_joint(fwd, why);
  if (!j) return std::nullopt;
  ForwardBackward fb;
  fb.partition = min_cut_partition(j->graph);
  fb.forward = forward_graph(*j, fb.partition);
  std::optional<Graph> bwd = backward_graph(*j, fb.partition);
  if (!bwd) return fail("the partition left a value the backward reads unsaved (internal)");
  fb.backward = std::move(*bwd);
  fb.num_outputs = j->num_forward_outputs;
  fb.num_saved = fb.partition.saved.size();
  fb.tangent_of = j->tangent_of;
  fb.grad_of = j->grad_of;
  for (Graph* g : {&fb.forward, &fb.backward}) {
    run_passes(*g, default_passes(mode));
    run_passes(*g, execution_passes());
  }
  fb.backward_primals = drop_unread_primals(fb.backward, j->num_primals);
  return fb;
}

AotRunner::AotRunner(ForwardBackward fb, const MakeExecutable& make)
    : fb_(std::make_shared<const ForwardBackward>(std::move(fb))) {
  auto build = [&make](const Graph& g) -> std::shared_ptr<const GraphExecutable> {
    if (make) return make(g);
    return std::make_shared<const Interpreter>(g);
  };
  forward_ = build(fb_->forward);
  backward_ = build(fb_->backward);
}

Tensors AotRunner::run(TensorSpan inputs, std::span<const AttrValue> scalars) const {
  Tensors all;
  {
    NoGradGuard no_tape;
    all = forward_->run(inputs, scalars);
  }
  auto node = std::make_shared<CompiledBackward>(fb_, backward_);
  for (size_t i : fb_->backward_primals) node->held.push_back(inputs[i].defined() ? inputs[i].detach() : inputs[i]);
  for (size_t k = 0; k < fb_->num_saved; ++k) node->held.push_back(all[fb_->num_outputs + k]);
  for (const Tensor& t : node->held) node->versions.push_back(t.defined() ? t.version() : 0);
  node->scalars.assign(scalars.begin(), scalars.end());
  for (size_t i : fb_->grad_of) node->next.push_back(autograd::gradient_edge(inputs[i]));
  all.resize(fb_->num_outputs);
  node->num_outputs = static_cast<int>(fb_->tangent_of.size());
  for (size_t k = 0; k < fb_->tangent_of.size(); ++k) {
    Tensor& out = all[fb_->tangent_of[k]];
    node->output_metas.push_back({out.shape(), out.dtype(), out.device()});
    out.impl()->grad_fn = node;
    out.impl()->output_nr = static_cast<int>(k);
  }
  return all;
}

}  // namespace kiln::compiler
