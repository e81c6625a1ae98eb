// Saved bytes of a graph holding forward and backward, for explain: from the
// AOT partitioner (compiler/aot/saved_bytes.h) when it is built in.
//
// STAND-IN: until that header lands, saved_bytes reports {0, 0} and
// kSavedBytesAvailable is false (the report says "not available"). Delete
// the #else branch once compiler/aot/saved_bytes.h is on main.
#pragma once
#include <cstdint>

#include "compiler/graph/graph.h"

#if __has_include("compiler/aot/saved_bytes.h")
#include "compiler/aot/saved_bytes.h"
namespace kiln::compiler {
constexpr bool kSavedBytesAvailable = true;
}
#else
namespace kiln::compiler {
constexpr bool kSavedBytesAvailable = false;
struct SavedBytes {
  int64_t eager = 0;        // bytes eager autograd saves between forward and backward
  int64_t partitioned = 0;  // bytes the partitioned forward hands to the backward
};
inline SavedBytes saved_bytes(const Graph&) { return {}; }
}  // namespace kiln::compiler
#endif
