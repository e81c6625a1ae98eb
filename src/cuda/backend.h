// What the tensor core and the ops table need from the CUDA backend. Defined by
// src/cuda/*.cpp in a build with CUDA and by src/cuda/cuda_off.cpp without it,
// so callers never need #ifdefs.
#pragma once
#include <vector>

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

// The DataLoader's batch assembled on the device (src/data/device_loader.cpp):
// images uint8 [N, C, H, W] and labels int64 [N] on the device, draws int32
// [B, 6] there (per image: dataset index, flip, crop_y, crop_x, translate_y,
// translate_x, as detail::ImageAugment), out_images float32 [B, C, H, W]
// (contiguous or channels-last) and out_labels int64 [B] on the same device;
// scale/bias per channel (pixel -> pixel * scale + bias). Queued on the
// current stream; the host does not wait.
constexpr int kDeviceAugmentMaxChannels = 4;  // the kernel's per-channel arrays (kernels.h's kAugmentMaxChannels)
void augment_batch(const Tensor& images, const Tensor& labels, const Tensor& draws, int64_t crop_padding,
                   int64_t translate, const std::vector<float>& scale, const std::vector<float>& bias,
                   const Tensor& out_images, const Tensor& out_labels);

// SGD's momentum step for float32 parameters on one CUDA device in one
// launch per 48 parameters (src/optim/sgd.cpp picks the parameters: p, its
// grad and its momentum buffer float32, dense, with equal strides). Each
// element gets the per-op path's arithmetic, rounding for rounding
// (kernels.h's SgdCall). Writes p and b in place and bumps their versions.
struct SgdHyper {
  double lr = 0, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false;
};
void sgd_step(const std::vector<Tensor>& params, const std::vector<Tensor>& grads, const std::vector<Tensor>& buffers,
              const SgdHyper& h);

}  // namespace kiln::cuda
