// Memory formats (as PyTorch's torch.memory_format): how a 4-d image
// tensor's elements are laid out. A tensor keeps its NCHW shape either way;
// channels-last only changes its strides to NHWC order
// ([H*W*C, 1, W*C, C]), the layout cuDNN's tensor-core convolutions read
// natively. On CUDA, ops give their outputs their input's layout
// (convolution, batch norm, pooling and pointwise ops; src/ops/dispatch.cpp's
// output_strides), so a channels-last batch through a channels-last model
// stays NHWC end to end, gradients included. CPU kernels write contiguous
// outputs (values equal either way). docs/cuda.md ("Channels-last").
#pragma once
#include <cstdint>

#include "kiln/tensor.h"

namespace kiln {

enum class MemoryFormat : uint8_t { Contiguous, ChannelsLast };

const char* memory_format_name(MemoryFormat format);  // "contiguous" | "channels_last"
// The NHWC strides of a 4-d NCHW shape (kiln::Error for another rank).
Shape channels_last_strides(const Shape& shape);
// Whether `strides` lay `shape` out densely in `format` (size-1 dims ignored;
// ChannelsLast: 4-d only).
bool is_dense_in(const Shape& shape, const Shape& strides, MemoryFormat format);

// t is dense in `format` (Contiguous: t.is_contiguous()); a tensor can be
// both, e.g. [N, C, 1, 1].
bool is_contiguous(const Tensor& t, MemoryFormat format);
// ChannelsLast for a 4-d tensor laid out NHWC and not also contiguous, else
// Contiguous: the layout an op's output takes from this input on CUDA.
MemoryFormat suggest_memory_format(const Tensor& t);
// x itself when dense in `format`, else a copy laid out in it (an op:
// differentiable, the gradient passes through in whatever layout it has).
Tensor contiguous(const Tensor& x, MemoryFormat format);
// A new, uninitialized tensor laid out densely in `format`.
Tensor empty(const Shape& shape, DType dtype, Device device, MemoryFormat format);
// A new, uninitialized tensor with `strides`, which must lay `shape` out
// densely (a permutation of contiguous strides); empty strides: contiguous.
Tensor empty_strided(const Shape& shape, const Shape& strides, DType dtype, Device device);

}  // namespace kiln
