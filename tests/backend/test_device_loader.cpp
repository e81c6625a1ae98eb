// The DataLoader on CUDA (DataLoaderOptions::device): the batches assembled on
// the GPU from the resident data set equal the CPU DataLoader's bit for bit
// (same seed and epoch; every augmentation, both layouts, a short last
// batch), and without a device the loader refuses with the reason.
#include <gtest/gtest.h>

#include <cstring>

#include "kiln/data.h"
#include "kiln/kiln.h"
#include "testing/errors.h"

namespace kiln::data {
namespace {

#define SKIP_WITHOUT_CUDA() \
  if (!cuda::is_available()) GTEST_SKIP() << cuda::unavailable_reason()

// n random uint8 images [C, H, W] (seeded), label = index % 10.
std::shared_ptr<ImageDataset> random_set(int64_t n, int64_t C, int64_t H, int64_t W) {
  auto ds = std::make_shared<ImageDataset>();
  Generator g(7);
  ds->images = randint(0, 256, {n, C, H, W}, kiln::dtype(DType::Int64), &g).to(DType::UInt8);
  ds->labels = Tensor::empty({n}, DType::Int64);
  for (int64_t i = 0; i < n; ++i) ds->labels.data<int64_t>()[i] = i % 10;
  ds->source = "random";
  return ds;
}

// Every batch of `epochs` epochs, CPU loader against CUDA loader: the same
// bytes (float32 values compared as bits), the same labels, the same layout.
void expect_same_batches(const std::shared_ptr<ImageDataset>& ds, DataLoaderOptions o, int64_t epochs) {
  DataLoader cpu(ds, o);
  o.device = Device::cuda();
  DataLoader gpu(ds, o);
  ASSERT_EQ(cpu.batches_per_epoch(), gpu.batches_per_epoch());
  for (int64_t e = 0; e < epochs; ++e) {
    cpu.start_epoch(e);
    gpu.start_epoch(e);
    for (int64_t b = 0;; ++b) {
      auto x = cpu.next(), y = gpu.next();
      ASSERT_EQ(x.has_value(), y.has_value()) << "epoch " << e << " batch " << b;
      if (!x) break;
      ASSERT_EQ(y->images.device(), Device::cuda());
      ASSERT_EQ(y->labels.device(), Device::cuda());
      EXPECT_EQ(x->images.strides(), y->images.strides()) << "layout, epoch " << e << " batch " << b;
      EXPECT_EQ(x->labels.to_vector<int64_t>(), y->labels.to(Device::cpu()).to_vector<int64_t>());
      // Both in NCHW order for the comparison (a copy on the host).
      std::vector<float> a = x->images.contiguous().to_vector<float>();
      std::vector<float> c = y->images.to(Device::cpu()).contiguous().to_vector<float>();
      ASSERT_EQ(a.size(), c.size());
      int64_t differ = 0, first = -1;
      for (size_t i = 0; i < a.size(); ++i)
        if (std::memcmp(&a[i], &c[i], sizeof(float)) != 0 && differ++ == 0) first = static_cast<int64_t>(i);
      EXPECT_EQ(differ, 0) << "epoch " << e << " batch " << b << ": first at element " << first << ": cpu "
                           << a[static_cast<size_t>(first < 0 ? 0 : first)] << " cuda "
                           << c[static_cast<size_t>(first < 0 ? 0 : first)];
    }
  }
}

DataLoaderOptions base_options() {
  DataLoaderOptions o;
  o.batch_size = 96;
  o.seed = 1234;
  o.workers = 2;
  o.mean = kCifar10Mean;
  o.std = kCifar10Std;
  return o;
}

TEST(CudaDataLoader, PlainBatchesEqualTheCpus) {
  SKIP_WITHOUT_CUDA();
  DataLoaderOptions o = base_options();
  o.shuffle = false;
  expect_same_batches(random_set(250, 3, 32, 32), o, 1);  // a short last batch of 58
}

TEST(CudaDataLoader, CropAndFlipEqualTheCpus) {
  SKIP_WITHOUT_CUDA();
  DataLoaderOptions o = base_options();
  o.augment.crop_padding = 4;
  o.augment.flip = true;
  expect_same_batches(random_set(300, 3, 32, 32), o, 3);
}

TEST(CudaDataLoader, AirbenchAugmentationEqualsTheCpus) {
  SKIP_WITHOUT_CUDA();
  DataLoaderOptions o = base_options();
  o.drop_last = true;
  o.augment.alternating_flip = true;
  o.augment.translate = 2;
  expect_same_batches(random_set(300, 3, 32, 32), o, 3);
  o.augment.crop_padding = 3;  // both paddings at once, a non-square image
  expect_same_batches(random_set(200, 3, 12, 20), o, 2);
}

TEST(CudaDataLoader, ChannelsLastAndOneChannelEqualTheCpus) {
  SKIP_WITHOUT_CUDA();
  DataLoaderOptions o = base_options();
  o.augment.crop_padding = 2;
  o.augment.flip = true;
  o.augment.translate = 1;
  o.memory_format = MemoryFormat::ChannelsLast;
  expect_same_batches(random_set(200, 3, 32, 32), o, 2);
  o.mean = {0.2860f};
  o.std = {0.3530f};
  o.memory_format = MemoryFormat::Contiguous;
  expect_same_batches(random_set(150, 1, 28, 28), o, 2);  // Fashion-MNIST's shape
}

TEST(CudaDataLoader, WithoutADeviceTheLoaderSaysWhy) {
  if (cuda::is_available()) GTEST_SKIP() << "a CUDA device is present (this checks the message without one)";
  DataLoaderOptions o = base_options();
  o.device = Device::cuda();
  EXPECT_KILN_ERROR(DataLoader(random_set(10, 3, 8, 8), o), "DataLoader", cuda::unavailable_reason());
}

TEST(CudaDataLoader, TooManyChannelsIsRefused) {
  SKIP_WITHOUT_CUDA();
  DataLoaderOptions o;
  o.device = Device::cuda();
  EXPECT_KILN_ERROR(DataLoader(random_set(4, 5, 8, 8), o), "5 channels", "Device::cpu()");
}

}  // namespace
}  // namespace kiln::data
