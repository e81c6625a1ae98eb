// Checks a graph's invariants: run after capture, AOT autograd and every
// pass (passes/pipeline.h), so a broken rewrite is caught where it happens.
//
// Structure: every value defined exactly once, before its uses, with
// consistent value<->node back-references; inputs, outputs and scalar
// indices in range; Input nodes matching Graph::inputs; op nodes of a
// non-composite op with the op's number of outputs. Types: each op node's
// outputs re-derived with the op's shape rule (or view function) on meta
// tensors and compared, shape and dtype, with the recorded types.
#pragma once
#include <string>
#include <vector>

#include "compiler/graph/graph.h"

namespace kiln::compiler {

// The problems found, one line each; empty means the graph is fine.
std::vector<std::string> verify(const Graph& g);
// Only the structural checks (the type check needs them to hold).
std::vector<std::string> verify_structure(const Graph& g);
// Only the type check: each op node's recorded output types against the op's
// shape rule. Assumes verify_structure found nothing.
std::vector<std::string> verify_types(const Graph& g);
// Throws InternalError naming `stage` and listing the problems, if any.
void verify_or_throw(const Graph& g, const char* stage);

}  // namespace kiln::compiler
