// augment_batch (cuda/backend.h): checks the tensors and launches augment.cu's kernel.
#include "cuda/backend.h"
#include "cuda/check.h"
#include "cuda/kernels.h"
#include "kiln/error.h"
#include "kiln/memory_format.h"

namespace kiln::cuda {

static_assert(kDeviceAugmentMaxChannels == kAugmentMaxChannels);
static_assert(sizeof(AugmentDraw) == 6 * sizeof(int32_t), "a draw is a row of an int32 [B, 6] tensor");

void augment_batch(const Tensor& images, const Tensor& labels, const Tensor& draws, int64_t crop_padding,
                   int64_t translate, const std::vector<float>& scale, const std::vector<float>& bias,
                   const Tensor& out_images, const Tensor& out_labels) {
  const Device dev = out_images.device();
  KILN_CHECK(dev.is_cuda() && images.device() == dev && labels.device() == dev && draws.device() == dev &&
                 out_labels.device() == dev,
             "DataLoader on CUDA: the images, labels, draws and the batch must be on one CUDA device");
  KILN_CHECK(images.dim() == 4 && images.dtype() == DType::UInt8 && images.is_contiguous() &&
                 labels.dtype() == DType::Int64 && labels.is_contiguous(),
             "DataLoader on CUDA: images must be contiguous uint8 [N, C, H, W] and labels int64 [N]");
  const int64_t B = draws.size(0), C = images.size(1), H = images.size(2), W = images.size(3);
  KILN_CHECK(draws.dim() == 2 && draws.size(1) == 6 && draws.dtype() == DType::Int32 && draws.is_contiguous(),
             "DataLoader on CUDA: draws must be contiguous int32 [B, 6], got ", dtype_name(draws.dtype()),
             shape_str(draws.shape()));
  KILN_CHECK(C <= kAugmentMaxChannels && static_cast<int64_t>(scale.size()) == C &&
                 static_cast<int64_t>(bias.size()) == C,
             "DataLoader on CUDA: images of ", C, " channels (at most ", kAugmentMaxChannels,
             " on the device; use DataLoaderOptions::device = Device::cpu() for more)");
  const bool cl = out_images.dim() == 4 && !out_images.is_contiguous() &&
                  is_contiguous(out_images, MemoryFormat::ChannelsLast);
  KILN_CHECK(out_images.dtype() == DType::Float32 && out_images.shape() == Shape({B, C, H, W}) &&
                 (cl || out_images.is_contiguous()) && out_labels.dtype() == DType::Int64 &&
                 out_labels.shape() == Shape({B}) && out_labels.is_contiguous(),
             "DataLoader on CUDA: the batch must be float32 [", B, ", ", C, ", ", H, ", ", W,
             "] (contiguous or channels-last) with int64 labels [", B, "]");
  AugmentCall c;
  c.images = images.data<uint8_t>();
  c.labels = labels.data<int64_t>();
  c.draws = reinterpret_cast<const AugmentDraw*>(draws.data<int32_t>());
  c.out = out_images.data<float>();
  c.out_labels = out_labels.data<int64_t>();
  c.B = B;
  c.C = C;
  c.H = H;
  c.W = W;
  c.crop_padding = crop_padding;
  c.translate = translate;
  for (int64_t ch = 0; ch < C; ++ch) {
    c.scale[ch] = scale[static_cast<size_t>(ch)];
    c.bias[ch] = bias[static_cast<size_t>(ch)];
  }
  c.channels_last = cl;
  DeviceGuard g(dev.index);
  c.stream = stream_for(dev.index);
  launch_augment(c);
}

}  // namespace kiln::cuda
