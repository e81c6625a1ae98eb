// conv2d with a fused activation post-op: conv2d's optional `activation`
// attribute (src/ops/conv.cpp). nn::fuse_modules is its one caller; the op
// stays conv2d in the ops table, so capture, the profiler and the compiler
// see one node.
#pragma once
#include <string>

#include "kiln/ops.h"

namespace kiln {

// activation(conv2d(x, weight, bias)) as one oneDNN primitive (float32) with
// an eltwise post-op; activation "" (none), "relu" or "gelu" (erf).
Tensor conv2d_fused(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p,
                    const std::string& activation);

}  // namespace kiln
