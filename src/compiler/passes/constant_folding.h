// Constant folding.
//
// Requires: a graph the verifier accepts.
// Guarantees: an op node whose inputs are all constants (or absent), that
// reads no scalar input, is neither random nor side-effecting, touches no
// storage the graph writes, has no symbolic dim and whose outputs are small
// (at most kMaxFoldedElements each, so graphs do not bloat) is evaluated once
// with the eager kernels and replaced by Constant nodes defining the same
// values. An op that fails on its constants is left for run time to report.
// The folded-away input constants may become unused: dead-code elimination
// removes them.
#pragma once
#include <cstdint>

#include "compiler/graph/graph.h"

namespace kiln::compiler {

constexpr int64_t kMaxFoldedElements = 64 * 1024;

void fold_constants(Graph& g);

}  // namespace kiln::compiler
