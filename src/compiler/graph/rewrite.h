// Graph surgery shared by the passes: uses, aliasing and mutation facts,
// replacing a value, removing nodes. Every function leaves the graph valid
// for the verifier when its preconditions hold.
#pragma once
#include <vector>

#include "compiler/graph/graph.h"

namespace kiln::compiler {

// How often each value is read (node inputs and graph outputs count).
std::vector<int> use_counts(const Graph& g);
// Points every read of `from` (node inputs, graph outputs) at `to`.
void replace_all_uses(Graph& g, ValueId from, ValueId to);
// Deletes the nodes marked in `remove` (one flag per node; Input nodes may
// not be removed), then renumbers the remaining values densely in their old
// order. The removed nodes' outputs must be unused.
void remove_nodes(Graph& g, const std::vector<bool>& remove);
// Replacing nodes during one walk over the graph in order: a replaced
// node's outputs are read from other values, each later read renamed when
// the walk reaches it (so one replacement exposes the next in a single
// pass); finish() points the graph outputs at the replacements and removes
// the replaced nodes.
class ForwardReplacer {
 public:
  explicit ForwardReplacer(const Graph& g);
  // Call on each node before looking at its inputs.
  void rename_inputs(Node& node) const;
  // Reads of node `node_index`'s outputs read `with` (one per output) instead.
  void replace(const Graph& g, size_t node_index, const std::vector<ValueId>& with);
  void finish(Graph& g);

 private:
  std::vector<ValueId> renamed_;
  std::vector<bool> remove_;
  bool any_ = false;
};

// Recomputes Value::node and Value::output_index from Graph::nodes (after
// nodes were inserted, reordered or replaced).
void reindex_values(Graph& g);

// The value whose storage `v` shares: follows the schema's output aliasing
// (views and in-place ops share input 0's) back to the value that owns it.
ValueId alias_root(const Graph& g, ValueId v);
// Per value: is its storage (by alias root) written by some node of the
// graph: an Inplace op's first input, or an op with side effects below.
std::vector<bool> mutated_storage(const Graph& g);
// Whether running the node does more than define its outputs: it writes an
// input (the schema's mutated inputs: in-place ops, batch_norm's running
// statistics in training). Such nodes are never removed or merged.
bool has_side_effects(const Node& node);
// The inputs a side-effecting node writes (indices into node.inputs).
std::vector<size_t> mutated_inputs(const Node& node);

// Whether n is op `op` with no attribute taken from a scalar input.
inline bool plain_op(const Node& n, OpId op) { return n.kind == NodeKind::Op && n.op == op && n.attr_inputs.empty(); }

// Who reads each value, what the peephole fusions ask before they take a
// value into a fused node (fuse_norm_activation, fuse_conv_residual).
class ReadFacts {
 public:
  explicit ReadFacts(const Graph& g);
  // The nodes reading v, in graph order (a node reading it twice twice).
  const std::vector<int>& readers(ValueId v) const { return readers_[static_cast<size_t>(v)]; }
  // Whether v's storage is written in place somewhere (mutated_storage).
  bool mutated(ValueId v) const { return mutated_[static_cast<size_t>(v)]; }
  // Read by nodes only (not a graph output) and never written in place.
  bool private_value(ValueId v) const {
    const size_t i = static_cast<size_t>(v);
    return !mutated_[i] && uses_[i] == static_cast<int>(readers_[i].size());
  }

 private:
  std::vector<int> uses_;
  std::vector<bool> mutated_;
  std::vector<std::vector<int>> readers_;
};

}  // namespace kiln::compiler
