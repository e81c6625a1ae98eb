// The DataLoader on a CUDA device: the data set stays resident on the GPU and
// each batch is one kernel (src/cuda/augment.cu) fed by the host's draws, a
// row of six int32 per image; the host never touches pixels.
#include <limits>

#include "cuda/backend.h"
#include "data/data_internal.h"
#include "kiln/cuda.h"
#include "kiln/error.h"
#include "kiln/profile.h"

namespace kiln::data::detail {

DeviceDataset upload_dataset(const Tensor& images, const Tensor& labels, Device device) {
  KILN_CHECK(device.is_cuda(), "DataLoader: DataLoaderOptions::device must be Device::cpu() or a CUDA device, got ",
             device.str());
  cuda::check_device(device, "DataLoader (DataLoaderOptions::device)");
  KILN_CHECK(images.size(0) <= std::numeric_limits<int32_t>::max(), "DataLoader on CUDA: ", images.size(0),
             " images are more than the device loader indexes (2^31 - 1); use Device::cpu()");
  KILN_CHECK(images.size(1) <= cuda::kDeviceAugmentMaxChannels, "DataLoader on CUDA: images of ", images.size(1),
             " channels; the device loader takes at most ", cuda::kDeviceAugmentMaxChannels,
             " (use DataLoaderOptions::device = Device::cpu())");
  return {images.to(device), labels.to(device)};
}

Batch build_device_batch(const DeviceDataset& data, const DataLoaderOptions& opt, const Normalizer& norm,
                         int64_t epoch, const int64_t* order, int64_t count) {
  ProfileRange range("dataloader.device_batch");
  Tensor draws = Tensor::empty({count, 6}, DType::Int32);
  int32_t* d = draws.data<int32_t>();
  for (int64_t i = 0; i < count; ++i, d += 6) {
    const int64_t idx = order[i];
    const ImageAugment a = draw_augment(opt.augment, opt.seed, epoch, idx);
    d[0] = static_cast<int32_t>(idx);
    d[1] = a.flip ? 1 : 0;
    d[2] = a.crop_y;
    d[3] = a.crop_x;
    d[4] = a.translate_y;
    d[5] = a.translate_x;
  }
  const Device dev = data.images.device();
  const Tensor& im = data.images;
  Batch b;
  b.images = empty({count, im.size(1), im.size(2), im.size(3)}, DType::Float32, dev, opt.memory_format);
  b.labels = Tensor::empty({count}, DType::Int64, dev);
  cuda::augment_batch(im, data.labels, draws.to(dev), opt.augment.crop_padding, opt.augment.translate, norm.scale,
                      norm.bias, b.images, b.labels);
  return b;
}

}  // namespace kiln::data::detail
