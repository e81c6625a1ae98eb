// A recorded op call on the autograd tape. Nodes hold detached values of
// what the derivative reads (so the graph has no reference cycles) and edges
// to the nodes that produced the inputs; leaves get an AccumulateGrad node.
#pragma once
#include <memory>
#include <utility>
#include <vector>

#include "ops/op_def.h"

namespace kiln::autograd {

class Node;

struct Edge {
  std::shared_ptr<Node> node;  // null: this input needs no gradient
  int input_nr = 0;            // which output of `node` the tensor was
};

class Node {
 public:
  virtual ~Node() = default;
  // Gradients for each input edge, given gradients of this node's outputs.
  virtual Tensors apply(TensorSpan grad_outputs) = 0;
  virtual const char* name() const = 0;
  // Frees saved values after a backward pass without retain_graph.
  virtual void release() {}

  std::vector<Edge> next;
  int num_outputs = 1;
  // Non-leaf outputs of this node that called retain_grad(): (output_nr, tensor).
  // Weak, so the graph does not keep its outputs alive.
  std::vector<std::pair<int, std::weak_ptr<TensorImpl>>> retained_grads;
};

// The node of an op in the ops table: applies the op's derivative entry.
class OpNode final : public Node {
 public:
  OpNode(OpId op, Attrs attrs) : op_(op), attrs_(std::move(attrs)) {}
  Tensors apply(TensorSpan grad_outputs) override;
  const char* name() const override { return op_name(op_); }
  void release() override;
  OpId op() const { return op_; }
  // kiln::Error when a saved tensor was modified in place after it was saved.
  void check_saved_versions() const;

  Tensors saved_inputs, saved_outputs;
  // Each saved tensor's storage version when it was saved; apply() refuses
  // to run on a tensor written in place since (it would give a wrong gradient).
  std::vector<uint64_t> saved_input_versions, saved_output_versions;
  std::vector<TensorMeta> input_metas;
  std::vector<bool> needs_grad;
  std::vector<TensorMeta> output_metas;

 private:
  OpId op_;
  Attrs attrs_;
  bool released_ = false;
};

// Sink for a leaf tensor that requires grad: adds into its .grad.
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(std::weak_ptr<TensorImpl> leaf) : leaf_(std::move(leaf)) { num_outputs = 1; }
  Tensors apply(TensorSpan grad_outputs) override;
  const char* name() const override { return "AccumulateGrad"; }

 private:
  std::weak_ptr<TensorImpl> leaf_;
};

// The edge that gradients for `t` flow into (its grad_fn, or its leaf's
// AccumulateGrad, created once per leaf), or a null edge.
Edge gradient_edge(const Tensor& t);

// Runs the backward pass from `roots` with `grads` (same count).
void run_backward(const Tensors& roots, const Tensors& grads, bool retain_graph);

// Capture derives a backward pass as graph nodes instead of running the
// tape: a hook that returns true has handled the call. Thread-local;
// returns the previous hook.
using BackwardHook = bool (*)(const Tensors& roots, const Tensors& grads, bool retain_graph);
BackwardHook set_backward_hook(BackwardHook hook);
// Sets the hook for a scope and puts the previous one back (nullptr: the
// real engine, as a capture running an outer backward or a trace needs).
class BackwardHookGuard {
 public:
  explicit BackwardHookGuard(BackwardHook hook) : prev_(set_backward_hook(hook)) {}
  ~BackwardHookGuard() { set_backward_hook(prev_); }
  BackwardHookGuard(const BackwardHookGuard&) = delete;
  BackwardHookGuard& operator=(const BackwardHookGuard&) = delete;

 private:
  BackwardHook prev_;
};

// Backward passes started on this thread, and whether one is running now:
// autocast steps aside while one runs (derivatives keep the forward's dtypes)
// and recasts a cached weight whose cast a backward pass has consumed.
uint64_t backward_passes();
bool backward_running();

// Records a node for an op call whose inputs need gradients (called by dispatch).
void record(OpId id, const Attrs& attrs, TensorSpan inputs, Tensors& outputs);

}  // namespace kiln::autograd
