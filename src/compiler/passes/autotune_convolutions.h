// max-autotune: convolutions run the faster oneDNN algorithm per layer.
//
// Requires: a graph the verifier accepts.
// Guarantees: every float32 conv2d, conv2d_backward_input and
// conv2d_backward_weight on the CPU without an `algorithm` attribute gets
// algorithm="tuned": on its first call conv2d times oneDNN's own choice
// (Winograd on AVX-512 3x3 layers) against the direct algorithm in place in
// the running step and keeps the faster, on disk for later processes
// (ops/conv_autotune.h). Nothing else changes; results equal the default
// mode's within the two algorithms' rounding (Winograd against direct:
// relative L2 below 5e-6, shared/notes/cpu-convolution.md). Only in the
// pipeline of compile mode "max-autotune" (default_passes(mode)).
#pragma once
#include "compiler/graph/graph.h"

namespace kiln::compiler {

// The number of convolutions marked.
int autotune_convolutions(Graph& g);

}  // namespace kiln::compiler
