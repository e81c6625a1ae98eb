// Common-subexpression elimination.
//
// Requires: a graph the verifier accepts.
// Guarantees: no two op nodes compute the same thing: a node with the same
// op, attributes (Attrs::operator==), scalar-input attributes and inputs as
// an earlier one is removed and its outputs read from the earlier node.
// Never merged: random ops (each draw is its own), in-place and other
// side-effecting ops, and any node that reads or defines storage some node
// of the graph writes (a value read before and after an in-place update
// differs), nor two nodes whose outputs are both graph outputs (the caller
// gets separate tensors). Factory ops merge only with equal attributes, like
// every op.
#pragma once
#include "compiler/graph/graph.h"

namespace kiln::compiler {

void eliminate_common_subexpressions(Graph& g);

}  // namespace kiln::compiler
