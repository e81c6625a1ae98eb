// The layout of an op's outputs. Infer rules give shapes and dtypes; this
// gives strides, for every op in one place: contiguous, except
//   - copy with memory_format "channels_last" (contiguous(x, ChannelsLast)):
//     channels-last on every device;
//   - on CUDA, whose kernels write any dense layout, an output that follows a
//     channels-last 4-d input: pointwise ops (from their first input of the
//     output's shape), conv2d and its input gradient (from x / grad_out),
//     the weight gradient (from x), pooling and batch norm and their
//     backward ops (from the activation).
// CPU kernels write contiguous outputs, so on the CPU channels-last inputs
// give contiguous outputs with the same values.
#pragma once
#include <vector>

#include "ops/op_def.h"

namespace kiln {

// One entry per meta: the output's strides, or empty for contiguous.
std::vector<Shape> output_strides(OpId id, TensorSpan inputs, const Attrs& attrs,
                                  const std::vector<TensorMeta>& metas);
// The outputs of metas with those strides: meta tensors, or fresh memory.
Tensors allocate_outputs(OpId id, TensorSpan inputs, const Attrs& attrs, const std::vector<TensorMeta>& metas,
                         bool meta);

}  // namespace kiln
