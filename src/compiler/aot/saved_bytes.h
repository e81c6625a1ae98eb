// Saved bytes of a train-step graph: eager autograd's against the min-cut
// partition's (kiln explain prints both).
#pragma once
#include <cstdint>

#include "compiler/graph/graph.h"

namespace kiln::compiler {

struct SavedBytes {
  int64_t eager = 0;
  int64_t partitioned = 0;
};

// Zero for a graph without backward nodes.
SavedBytes saved_bytes(const Graph& graph);

}  // namespace kiln::compiler
