// Attributes of the pooling ops that more than one backend reads.
#pragma once

#include "core/attrs.h"

namespace kiln {

// max_pool2d computes its int64 indices unless the call says `indices=false`
// (absent means true: graphs and goldens written before the attribute keep
// their meaning). Without them the second output is an empty int64 [0].
inline bool wants_max_pool_indices(const Attrs& a) { return !a.has("indices") || a.b("indices"); }

}  // namespace kiln
