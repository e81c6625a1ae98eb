// The activation fused into a conv2d or batch_norm node: the `activation`
// attribute ("relu", or "gelu" for the erf GELU) that nn::fuse_modules and
// the compiler's fusion passes set. One enum for every kernel that applies it
// (oneDNN post-ops, cuDNN graphs, batch norm's epilogue and prologue).
#pragma once
#include <cstdint>

#include "core/attrs.h"

namespace kiln {

// int64_t: the CPU convolution's primitive cache keys hold it as a number.
enum class FusedActivation : int64_t { None = 0, Relu = 1, Gelu = 2 };

// The attribute's activation (None when it is absent); a kiln::Error naming
// `op` for any other name.
FusedActivation fused_activation(const Attrs& a, const char* op);

}  // namespace kiln
