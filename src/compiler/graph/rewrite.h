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
// Recomputes Value::node and Value::output_index from Graph::nodes (after
// nodes were inserted, reordered or replaced).
void reindex_values(Graph& g);

// The value whose storage `v` shares: follows View ops and Inplace ops (which
// return their first input) back to the value that owns the storage.
ValueId alias_root(const Graph& g, ValueId v);
// Per value: is its storage (by alias root) written by some node of the
// graph: an Inplace op's first input, or an op with side effects below.
std::vector<bool> mutated_storage(const Graph& g);
// Whether running the node does more than define its outputs: Inplace ops
// and ops that update an input (batch_norm in training updates its running
// statistics). Such nodes are never removed or merged.
bool has_side_effects(const Node& node);
// The inputs a side-effecting node writes (indices into node.inputs).
std::vector<size_t> mutated_inputs(const Node& node);

}  // namespace kiln::compiler
