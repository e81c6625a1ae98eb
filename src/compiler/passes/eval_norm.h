// An eval-mode batch norm as a per-channel affine map, built as graph ops:
// the passes that replace one (fold_batch_norm into a convolution's weights,
// fuse_pool_norm into a pool's kernel) compute it alike.
#pragma once
#include "compiler/graph/rebuilder.h"

namespace kiln::compiler {

// scale = weight * rsqrt(running_var + eps) (weight absent: 1), float32
// [C], from eval batch_norm node `bn` (inputs x, weight, bias, running_mean,
// running_var; eps an attribute) of the graph `rb` rebuilds.
ValueId eval_norm_scale(Rebuilder& rb, const Graph& g, const Node& bn);
// shift = (bias_before - running_mean) * scale + bias, where bias_before is
// what the normalized values had added already (a convolution's bias, new
// graph's float32 value) or kNoValue (0 - running_mean); bias absent: 0.
ValueId eval_norm_shift(Rebuilder& rb, const Node& bn, ValueId scale, ValueId bias_before);

}  // namespace kiln::compiler
