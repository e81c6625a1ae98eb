// Functionalization: in-place ops become out-of-place ones, so later passes
// and code generators see pure data flow.
//
// Requires: a verified graph (capture binds every read after an in-place op
// to that op's output value, as SSA wants).
// Guarantees: each in-place op (fill_, copy_, add_, mul_, addcmul_,
// addcdiv_, lerp_) whose target owns its storage is replaced by pointwise
// ops computing the new value; reads of the old output read the new value.
// A graph input written this way gets one copy-back at the end of the graph
// (copy_(input, final value)): the caller holds the input (a parameter, an
// optimizer buffer) and observes the write. A value created inside the graph
// gets no copy-back. Writes through a view, and ops that update inputs inside
// their kernel (batch_norm's running statistics, until it is decomposed),
// stay in place.
#pragma once
#include "compiler/graph/graph.h"

namespace kiln::compiler {

// Returns the number of in-place ops replaced.
int functionalize(Graph& g);

}  // namespace kiln::compiler
