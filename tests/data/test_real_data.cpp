// e2e: the real data sets this machine may hold (skipped when absent):
// ../shared/data/cifar10-jpeg.tar.zst (or KILN_CIFAR10_ARCHIVE) and Debian's
// Fashion-MNIST under /usr/share/datasets/fashion-mnist.
#include <cstdlib>
#include <filesystem>

#include <gtest/gtest.h>

#include "kiln/data.h"

namespace kiln::data {
namespace {

std::string shared_cifar_archive() {
  if (const char* env = std::getenv("KILN_CIFAR10_ARCHIVE"); env && *env) return env;
  return std::string(KILN_GOLDEN_DIR) + "/../../../shared/data/cifar10-jpeg.tar.zst";
}

TEST(DataE2E, SharedCifarArchiveTestSplit) {
  const std::string archive = shared_cifar_archive();
  if (!std::filesystem::exists(archive)) GTEST_SKIP() << "no CIFAR-10 archive at " << archive;
  ImageDataset test = load_image_folder_archive(archive, "test");
  if (test.size() != 10000) GTEST_SKIP() << archive << " is not the full CIFAR-10 image folder";
  EXPECT_EQ(test.images.shape(), (Shape{10000, 3, 32, 32}));
  EXPECT_EQ(test.classes, kCifar10Classes);
  auto labels = test.labels.to_vector<int64_t>();
  std::vector<int> counts(10);
  for (int64_t l : labels) counts[l]++;
  for (int c : counts) EXPECT_EQ(c, 1000);
  // Plausible pixel statistics (CIFAR-10 means are ~0.47 of full scale).
  double mean = test.images.to(DType::Float64).mean().item() / 255.0;
  EXPECT_GT(mean, 0.40);
  EXPECT_LT(mean, 0.52);
}

TEST(DataE2E, DebianFashionMnist) {
  const std::string dir = default_fashion_mnist_dir();
  if (!std::filesystem::exists(dir + "/t10k-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "no Fashion-MNIST in " << dir << " (apt install dataset-fashion-mnist)";
  ImageDataset train = load_fashion_mnist(dir, true), test = load_fashion_mnist(dir, false);
  EXPECT_EQ(train.images.shape(), (Shape{60000, 1, 28, 28}));
  EXPECT_EQ(test.images.shape(), (Shape{10000, 1, 28, 28}));
  auto labels = test.labels.to_vector<int64_t>();
  std::vector<int> counts(10);
  for (int64_t l : labels) counts[l]++;
  for (int c : counts) EXPECT_EQ(c, 1000);
}

}  // namespace
}  // namespace kiln::data
