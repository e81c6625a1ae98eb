// The min-cut partitioner (AOT autograd's rematerialization, as
// AOTAutograd's min_cut_rematerialization_partition): given a graph holding
// a forward and its backward (Node::Region), choose which forward values the
// backward keeps (saved) and which it recomputes, minimizing saved bytes.
//
// Requires: nodes marked Forward / Backward / Update (capture does this).
// Guarantees: every forward value a backward node reads is saved or
// recomputable from saved values and graph inputs; conv, matmul (Extern),
// random, in-place and hand-written (Other) ops are never recomputed; cheap
// ops (pointwise, views, reductions, factories) may be.
//
// Graph inputs and constants are available to the backward anyway (the
// caller holds them) and count as saved by neither eager nor the partition.
#pragma once
#include <cstdint>
#include <vector>

#include "compiler/graph/graph.h"

namespace kiln::compiler {

struct Partition {
  std::vector<ValueId> saved;           // forward values handed to the backward
  std::vector<int> recomputed_nodes;    // forward nodes the backward runs again
  int64_t saved_bytes = 0;
};

Partition min_cut_partition(const Graph& g);

// Bytes eager autograd keeps between forward and backward for the graph's
// forward: each differentiable forward op's saved inputs and outputs (as its
// OpDef says), each storage counted once, graph inputs excluded.
int64_t eager_saved_bytes(const Graph& g);

// Whether the partitioner may recompute a node's op in the backward.
bool recomputable(const Node& node);

}  // namespace kiln::compiler
