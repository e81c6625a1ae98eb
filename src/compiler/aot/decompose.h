// Decomposition to primitives: ops with a fast eager kernel that do more
// than one primitive thing (softmax, batch norm, nll_loss, gelu and their
// backward ops; docs/decompositions.md) are replaced by the primitive ops
// their registered decomposition (OpDef::decompose) calls, so a code
// generator can fuse and schedule the parts.
//
// How: the decomposition function runs on meta tensors for the node's inputs
// under a recording dispatch mode that appends each op it calls to the new
// graph (types from the ops' shape rules) instead of running it. Tensors the
// function creates from numbers (a wrapped 0.5) become constant nodes.
//
// Requires: a verified graph in SSA form (capture's). Runs before
// functionalization: an op that updates an input inside its kernel
// (batch_norm's running statistics in training) becomes an explicit copy_
// into that input, whose output later reads are renamed to, as capture does
// for in-place ops, so functionalization sees the mutation.
// Guarantees: the graph computes the same outputs and effects; no node of an
// op with a decomposition is left, except nodes the predicate keeps and
// nodes that cannot be expanded without baking in a size or a step-varying
// value (an input with the symbolic batch dim, an attribute read from a
// scalar input): those stay whole.
#pragma once
#include <functional>

#include "compiler/graph/graph.h"

namespace kiln::compiler {

struct DecomposeOptions {
  // Which nodes to expand (all decomposable ones when empty): a backend keeps
  // an op whose kernel it prefers.
  std::function<bool(const Node&)> expand;
};

// Whether the node's op has a decomposition the pass can apply here.
bool decomposable(const Graph& g, const Node& n);
// Returns the number of nodes expanded (nested decompositions included).
int decompose(Graph& g, const DecomposeOptions& options = {});

}  // namespace kiln::compiler
