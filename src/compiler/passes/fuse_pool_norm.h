// An eval-mode max-pool and the batch norm after it as one generated kernel.
//
// Requires: blocked_layouts has run (values between oneDNN ports are
// nChw16c, typed [N, C/16, H, W, 16]); fuse_norm_activation has run.
// Guarantees: each 2x2 stride-2 max_pool2d (no padding or dilation, floor
// mode, no indices) whose nChw16c output is read by one eval-mode batch_norm
// alone (running statistics given, its statistics outputs unread, no fused
// residual, an nChw16c value of channels a multiple of 16) becomes plain
// graph ops: the max of the four strided views x[.., a::2, b::2, :] (slices
// that lowering folds into indexing), times the per-channel scale
// weight * rsqrt(running_var + eps), plus the shift bias - running_mean *
// scale, then the batch norm's fused ReLU/GELU. The scheduler fuses the
// chain into one kernel whose lanes are the 16 channel lanes, contiguous in
// every load: the pooled value is never written and read back (airbench's
// eval forward paid 1.4 ms for each oneDNN pool and 1.1 ms for each batch
// norm on its result). Training graphs keep both ops: their pool's indices
// and the norm's statistics feed the backward. Results equal the unfused
// graph's up to float32 rounding (the eager norm forms its scale and shift
// in double).
#pragma once
#include "compiler/graph/graph.h"

namespace kiln::compiler {

// The number of pool + batch norm pairs replaced.
int fuse_pool_norms(Graph& g);

}  // namespace kiln::compiler
