// What the tensor core and the ops table need from the CUDA backend. Defined by
// src/cuda/*.cpp in a build with CUDA and by src/cuda/cuda_off.cpp without it,
// so callers never need #ifdefs.
#pragma once
#include "kiln/storage.h"
#include "kiln/tensor.h"

namespace kiln::cuda {

// The caching allocator behind DeviceType::CUDA (its allocate throws kiln::Error
// when there is no device or no CUDA in the build).
Allocator& device_allocator();
// Copies `src` into `dst` (same shape and dtype, dst contiguous) where at least
// one of them is on a CUDA device: the to_device op's kernel.
void copy_across_devices(const Tensor& src, const Tensor& dst);
// Adds the CUDA kernels to the ops table (register_kernel); called once when
// the table is built.
void register_cuda_kernels();

}  // namespace kiln::cuda
