// Rebuilding a graph node by node into a new one: the rewrite passes that
// replace one node by several (functionalization, decomposition) copy the
// nodes they keep and add new ops whose types come from the ops' shape rules.
#pragma once
#include <functional>
#include <unordered_map>
#include <vector>

#include "compiler/graph/graph.h"

namespace kiln::compiler {

class Rebuilder {
 public:
  // `out` starts empty; it gets `in`'s name and scalar inputs.
  Rebuilder(const Graph& in, Graph& out);

  ValueId mapped(ValueId v) const { return v == kNoValue ? kNoValue : map_[v]; }
  void set(ValueId old_id, ValueId new_id) { map_[old_id] = new_id; }

  // The node as it is (inputs renamed); marks it current.
  void copy_node(const Node& n);
  // The node later ops() and copy_node() calls inherit the source location
  // and region of.
  void begin(const Node& n) { current_ = &n; }

  // An op on new-graph values with every output's type from the op's shape
  // rule; a symbolic dim of an input stays symbolic in outputs of the same
  // rank and requires_grad flows from inputs to the floating differentiable
  // outputs of differentiable ops (OpDef::num_differentiable_outputs).
  std::vector<ValueId> ops(OpId id, std::vector<ValueId> ins, Attrs attrs = {},
                           std::vector<AttrInput> attr_inputs = {});
  // ops() for a single-output op.
  ValueId op(OpId id, std::vector<ValueId> ins, Attrs attrs = {}, std::vector<AttrInput> attr_inputs = {}) {
    return ops(id, std::move(ins), std::move(attrs), std::move(attr_inputs))[0];
  }
  // A constant node in the new graph.
  ValueId constant(const Tensor& value);

  const ValueType& type(ValueId new_id) const { return out_.type(new_id); }

 private:
  void finish();  // the last node takes the current node's location and region
  const Graph& in_;
  Graph& out_;
  std::vector<ValueId> map_;
  const Node* current_ = nullptr;
};

// The peephole fusions' rebuild (fold_batch_norm, fuse_conv_activation):
// each consumer node in `producer_of` (consumer index -> producer index, a
// single-output producer read by that consumer alone) is replaced by the
// value `fuse(rb, consumer, producer)` emits for its first output, and the
// producers are dropped. Every other node is copied. Returns the number of
// pairs fused; leaves `g` alone when there are none.
int fuse_pairs(Graph& g, const std::unordered_map<int, int>& producer_of,
               const std::function<ValueId(Rebuilder& rb, const Node& consumer, const Node& producer)>& fuse);

}  // namespace kiln::compiler
