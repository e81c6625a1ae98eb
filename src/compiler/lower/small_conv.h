// Convolutions of few output channels as generated loops instead of oneDNN.
//
// oneDNN computes a float32 convolution 16 output channels at a time: the
// tutorial's first layer (3 -> 6 channels, 5x5, 32x32) pays for 16 channels
// and took 0.6-0.96 ms of a ~1.1 ms eval forward (batch 128, 2 threads). As a
// reduction in the loop IR, out[n, o, y, x] = sum over (c, i, j) of
// in[n, c, y + i, x + j] * w[o, c, i, j] (+ bias, then ReLU), the renderer
// puts the vector lanes over x and keeps the few output channels as
// accumulators inside the reduction (render_cpp.cpp, jam_loop): each input
// vector is loaded once for all of them. A standalone test of that loop
// shape took 0.34 ms against oneDNN's 0.6 ms.
#pragma once
#include "compiler/graph/graph.h"

namespace kiln::compiler::lower {

// Whether conv2d node n lowers to a loop kernel (lower_graph.cpp): float32 on
// the CPU, NCHW (no layout attributes), stride 1, no padding or dilation, one
// group, no residual input, an activation of none or ReLU, at most
// kSmallConvMaxChannels output channels, at most 128 products per output,
// an output width of at least 16 and a kernel narrower than 16.
inline constexpr int64_t kSmallConvMaxChannels = 8;
bool lowers_as_small_conv(const Graph& g, const Node& n);

}  // namespace kiln::compiler::lower
