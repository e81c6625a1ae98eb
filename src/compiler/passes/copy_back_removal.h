// Removal of copy-backs nobody observes.
//
// Requires: a graph the verifier accepts (typically functionalized).
// Guarantees: a copy_ whose target is not (a view of, or an in-place chain
// from) a graph input, whose result is not read, and whose target storage
// no later node or graph output reads, is removed: only the caller could
// have seen that write, and the caller sees only graph inputs and outputs.
// Copy-backs into graph inputs always stay.
#pragma once
#include "compiler/graph/graph.h"

namespace kiln::compiler {

// Returns the number of copy_ nodes removed.
int remove_unobserved_copy_backs(Graph& g);

}  // namespace kiln::compiler
