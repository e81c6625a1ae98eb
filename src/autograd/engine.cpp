// Reverse-mode autograd: recording op calls (called from dispatch) and the
// backward pass over the recorded nodes.
#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "autograd/node.h"
#include "kiln/memory_format.h"
#include "kiln/ops.h"
#include "kiln/profile.h"

namespace kiln {

namespace {
thread_local bool g_grad_mode = true;
}

bool grad_mode_enabled() { return g_grad_mode; }
void set_grad_mode(bool enabled) { g_grad_mode = enabled; }
NoGradGuard::NoGradGuard() : prev_(g_grad_mode) { g_grad_mode = false; }
NoGradGuard::~NoGradGuard() { g_grad_mode = prev_; }

namespace autograd {

Edge gradient_edge(const Tensor& t) {
  if (!t.defined()) return {};
  TensorImpl* impl = t.impl();
  if (impl->grad_fn) return {impl->grad_fn, impl->output_nr};
  if (!impl->requires_grad) return {};
  std::shared_ptr<Node> acc = impl->grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(t.impl_ptr());
    impl->grad_accumulator = acc;
  }
  return {acc, 0};
}

void record(OpId id, const Attrs& attrs, TensorSpan inputs, Tensors& outputs) {
  const OpDef& def = op_def(id);
  auto node = std::make_shared<OpNode>(id, attrs);
  node->next.reserve(inputs.size());
  auto save = [](const Tensor& t, bool wanted, Tensors& values, std::vector<uint64_t>& versions) {
    bool saved = wanted && t.defined();
    values.push_back(saved ? t.detach() : Tensor());
    versions.push_back(saved ? t.version() : 0);
  };
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    Edge e = gradient_edge(t);
    node->needs_grad.push_back(e.node != nullptr);
    node->next.push_back(std::move(e));
    node->input_metas.push_back(t.defined() ? TensorMeta{t.shape(), t.dtype(), t.device()} : TensorMeta{});
    bool wanted = (def.save & kSaveInputs) && !(i < 32 && (def.unsaved_inputs >> i & 1u));
    save(t, wanted, node->saved_inputs, node->saved_input_versions);
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& t = outputs[i];
    node->output_metas.push_back({t.shape(), t.dtype(), t.device()});
    bool wanted = (def.save & kSaveOutputs) && !(i < 32 && (def.unsaved_outputs >> i & 1u));
    save(t, wanted, node->saved_outputs, node->saved_output_versions);
  }
  node->num_outputs = static_cast<int>(outputs.size());
  int nd = std::min<int>(def.num_differentiable_outputs, static_cast<int>(outputs.size()));
  for (int i = 0; i < nd; ++i) {
    if (!is_floating(outputs[i].dtype())) continue;
    outputs[i].impl()->grad_fn = node;
    outputs[i].impl()->output_nr = i;
  }
}

Tensors OpNode::apply(TensorSpan grad_outputs) {
  KILN_CHECK(!released_, "backward through '", name(),
             "' a second time: its saved values were freed after the first backward; pass "
             "retain_graph=true to the first backward() call");
  std::vector<Tensor> grads(grad_outputs.begin(), grad_outputs.end());
  bool any = false;
  for (const Tensor& g : grads) any = any || g.defined();
  if (!any) return Tensors(next.size());
  check_saved_versions();
  BackwardCtx ctx{saved_inputs, saved_outputs, input_metas, attrs_, needs_grad};
  Tensors out = op_def(op_).backward(ctx, grads);
  out.resize(next.size());
  for (size_t i = 0; i < out.size(); ++i) {
    if (!needs_grad[i]) {
      out[i] = Tensor();
      continue;
    }
    if (!out[i].defined()) continue;
    KILN_ASSERT(out[i].shape() == input_metas[i].shape, "derivative of '", name(), "' gave input ", i,
                " a gradient of shape ", shape_str(out[i].shape()), " for an input of shape ",
                shape_str(input_metas[i].shape));
    if (out[i].dtype() != input_metas[i].dtype) out[i] = out[i].to(input_metas[i].dtype);
  }
  return out;
}

void OpNode::check_saved_versions() const {
  auto check = [&](const Tensors& values, const std::vector<uint64_t>& versions, const char* role) {
    for (size_t i = 0; i < values.size(); ++i) {
      const Tensor& t = values[i];
      if (!t.defined() || t.version() == versions[i]) continue;
      KILN_FAIL("backward: one of the variables needed for gradient computation has been modified by an inplace "
                "operation: [", name(), " ", role, " ", i, ", ", dtype_name(t.dtype()), shape_str(t.shape()),
                "] is at version ", t.version(), "; expected version ", versions[i],
                " instead. Fix: do not write it in place (mul_, add_, copy_, fill_, zero_, an optimizer step) "
                "between the forward that used it and backward(); write into a clone() instead, or call "
                "backward() first");
    }
  };
  check(saved_inputs, saved_input_versions, "input");
  check(saved_outputs, saved_output_versions, "output");
}

void OpNode::release() {
  saved_inputs.clear();
  saved_outputs.clear();
  saved_input_versions.clear();
  saved_output_versions.clear();
  released_ = true;
}

Tensors AccumulateGrad::apply(TensorSpan grad_outputs) {
  std::shared_ptr<TensorImpl> leaf = leaf_.lock();
  const Tensor& g = grad_outputs[0];
  if (!leaf || !g.defined()) return {};
  if (!leaf->grad) {
    // Take the incoming gradient when nothing else refers to it; otherwise
    // copy, so that in-place updates of .grad() never touch another tensor.
    // A dense channels-last gradient is taken as it is too (no NCHW copy).
    bool unique = g.impl_ptr().use_count() == 1 && g.impl()->storage.use_count() == 1 &&
                  (g.is_contiguous() || is_contiguous(g, MemoryFormat::ChannelsLast));
    leaf->grad = unique ? g.impl_ptr() : g.clone().impl_ptr();
  } else {
    Tensor acc(leaf->grad);
    add_(acc, g);
  }
  return {};
}

namespace {
thread_local BackwardHook t_backward_hook = nullptr;
thread_local uint64_t t_backward_passes = 0;
thread_local bool t_backward_running = false;
}

uint64_t backward_passes() { return t_backward_passes; }
bool backward_running() { return t_backward_running; }

BackwardHook set_backward_hook(BackwardHook hook) {
  BackwardHook prev = t_backward_hook;
  t_backward_hook = hook;
  return prev;
}

void run_backward(const Tensors& roots, const Tensors& grads, bool retain_graph) {
  if (t_backward_hook != nullptr && t_backward_hook(roots, grads, retain_graph)) return;
  ProfileRange range("backward");
  NoGradGuard no_grad;  // derivatives are plain op calls; no higher-order graph yet
  ++t_backward_passes;
  struct Running {
    bool prev = t_backward_running;
    Running() { t_backward_running = true; }
    ~Running() { t_backward_running = prev; }
  } running;
  // Dependencies: how many edges from reachable nodes point at each node.
  std::unordered_map<Node*, int> deps;
  std::unordered_map<Node*, std::shared_ptr<Node>> owner;
  std::vector<Node*> stack;
  std::vector<Edge> root_edges;
  for (const Tensor& r : roots) {
    Edge e = gradient_edge(r);
    KILN_CHECK(e.node != nullptr, "backward: the tensor ", dtype_name(r.dtype()), shape_str(r.shape()),
               " does not require grad and has no grad_fn; call requires_grad_() on a leaf it depends on");
    root_edges.push_back(e);
    if (owner.emplace(e.node.get(), e.node).second) stack.push_back(e.node.get());
  }
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next) {
      if (!e.node) continue;
      ++deps[e.node.get()];
      if (owner.emplace(e.node.get(), e.node).second) stack.push_back(e.node.get());
    }
  }

  std::unordered_map<Node*, Tensors> buffers;
  auto accumulate = [&](const Edge& e, const Tensor& g) {
    Tensors& buf = buffers[e.node.get()];
    if (buf.empty()) buf.resize(e.node->num_outputs);
    Tensor& slot = buf[e.input_nr];
    slot = slot.defined() ? add(slot, g) : g;
  };
  for (size_t i = 0; i < roots.size(); ++i) {
    Tensor g = grads[i];
    if (!g.defined()) {
      KILN_CHECK(roots[i].numel() == 1, "backward: the tensor has shape ", shape_str(roots[i].shape()),
                 "; a gradient is implied only for a one-element tensor, so pass backward(grad) with that shape");
      g = ones_like(roots[i]);
    } else {
      KILN_CHECK(g.shape() == roots[i].shape(), "backward: grad has shape ", shape_str(g.shape()),
                 " but the tensor has shape ", shape_str(roots[i].shape()), "; pass a grad of the tensor's shape");
    }
    accumulate(root_edges[i], g);
  }

  std::vector<Node*> ready;
  for (const Edge& e : root_edges)
    if (deps[e.node.get()] == 0 && std::find(ready.begin(), ready.end(), e.node.get()) == ready.end())
      ready.push_back(e.node.get());
  while (!ready.empty()) {
    Node* n = ready.back();
    ready.pop_back();
    Tensors in = std::move(buffers[n]);
    buffers.erase(n);
    in.resize(n->num_outputs);
    for (const auto& [nr, weak] : n->retained_grads) {
      std::shared_ptr<TensorImpl> t = weak.lock();
      if (!t || !in[nr].defined()) continue;
      if (!t->grad) {
        t->grad = in[nr].clone().impl_ptr();  // its own copy: in[nr] flows on
      } else {
        Tensor acc(t->grad);
        add_(acc, in[nr]);
      }
    }
    Tensors out = n->apply(in);
    in.clear();
    if (!retain_graph) n->release();
    for (size_t i = 0; i < n->next.size(); ++i) {
      const Edge& e = n->next[i];
      if (!e.node) continue;
      if (i < out.size() && out[i].defined()) accumulate(e, out[i]);
      if (--deps[e.node.get()] == 0) ready.push_back(e.node.get());
    }
  }
}

}  // namespace autograd
}  // namespace kiln
