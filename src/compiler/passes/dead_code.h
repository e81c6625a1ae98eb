// Dead-code elimination.
//
// Requires: a graph the verifier accepts.
// Guarantees: every Op and Constant node left either defines a value that
// reaches a graph output or has side effects (in-place ops, batch_norm
// updating its running statistics); Input nodes always stay. Unused random
// ops go: kiln's random ops take their seed and offset as attributes, so
// dropping one changes no other draw. Values keep their order and are
// renumbered densely only when something was removed.
#pragma once
#include "compiler/graph/graph.h"

namespace kiln::compiler {

void eliminate_dead_code(Graph& g);

}  // namespace kiln::compiler
