// Data sets and loading: CIFAR-10 (official binary layout, image folders,
// archives), Fashion-MNIST (IDX), and a DataLoader with worker threads,
// seeded shuffling and augmentation.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/memory_format.h"
#include "kiln/tensor.h"

namespace kiln::data {

// A labelled image set held in memory: uint8 images [N, C, H, W], int64 labels [N].
struct ImageDataset {
  Tensor images;
  Tensor labels;
  std::vector<std::string> classes;
  std::string source;  // where it came from, for messages
  int64_t size() const { return labels.defined() ? labels.numel() : 0; }
};

extern const std::vector<std::string> kCifar10Classes;  // label order of the official release

// `dir` holds data_batch_1..5.bin and test_batch.bin (or a cifar-10-batches-bin/ inside it).
ImageDataset load_cifar10_binary(const std::string& dir, bool train);
// True when `dir` holds a complete CIFAR-10 binary layout.
bool has_cifar10_binary(const std::string& dir);
// An image-folder tree root/<class>/<file>.jpg|png (class names sorted
// unless `classes` gives the order); images must share one size.
ImageDataset load_image_folder(const std::string& root, const std::vector<std::string>& classes = {});
// The same tree read straight from a .tar, .tar.gz or .tar.zst archive;
// `split` selects entries under <any prefix>/<split>/<class>/<file>.
ImageDataset load_image_folder_archive(const std::string& archive, const std::string& split,
                                       const std::vector<std::string>& classes = {});
// Reads a CIFAR-10 archive (the official cifar-10-binary.tar.gz, or an image
// folder tree with train/ and test/ splits as in ../shared/data), or a
// directory holding either unpacked (the same bytes result), and writes the
// official binary layout into data_dir/cifar-10-batches-bin atomically.
// Labels must be 0..9; a batches.meta.txt must list exactly 10 distinct names;
// an image folder must have exactly 10 class directories.
void import_cifar10(const std::string& archive, const std::string& data_dir);
// Downloads the official binary archive (libcurl; progress on stderr) into a
// temp file, checks its published MD5, imports it; on any failure (without a
// network: kiln::Error naming `kiln data import`) it leaves neither the temp
// file nor any directory it created. KILN_CIFAR10_URL / KILN_CIFAR10_MD5 override.
void download_cifar10(const std::string& data_dir);
// Fashion-MNIST from IDX files (gzip or plain): train-images-idx3-ubyte.gz, ...
ImageDataset load_fashion_mnist(const std::string& dir, bool train);
std::string default_fashion_mnist_dir();  // /usr/share/datasets/fashion-mnist
// Where Fashion-MNIST is looked for, first match wins: `explicit_dir` (a
// --data-dir flag) when not empty, else $KILN_FASHION_MNIST when set and not
// empty, else default_fashion_mnist_dir(). Only picks the directory; the
// loader names it if the files are missing.
std::string find_fashion_mnist_dir(const std::string& explicit_dir = "");

struct AugmentOptions {
  int64_t crop_padding = 0;       // random crop after zero padding by this many pixels
  bool flip = false;              // random horizontal flip, p = 0.5
  bool alternating_flip = false;  // airbench: epoch 0 random; later epochs flip the complement on odd epochs
  int64_t translate = 0;          // airbench: reflect-pad by this much, random crop back
};

struct DataLoaderOptions {
  int64_t batch_size = 128;
  bool shuffle = true;
  bool drop_last = false;
  uint64_t seed = 0;
  int workers = 2;   // threads assembling batches ahead of the consumer
  int prefetch = 4;  // batches kept ready
  AugmentOptions augment;
  std::vector<float> mean, std;  // per channel, in [0, 1] pixel units; empty = no normalization
  // Where batches are made. Device::cuda(): the whole data set (uint8 images,
  // labels) is copied to the GPU once, and each batch is gathered, augmented
  // and normalized there by one kernel (the same values as on the CPU, bit for
  // bit); the host only draws the order and the augmentation (a few bytes an
  // image, copied asynchronously), so no worker threads run (`workers` and
  // `prefetch` are ignored) and next() does not wait for the GPU.
  Device device = Device::cpu();
  // The batch images' layout (ChannelsLast: NHWC strides, as contiguous(x, ChannelsLast)).
  MemoryFormat memory_format = MemoryFormat::Contiguous;
};

struct Batch {
  Tensor images;  // float32 [B, C, H, W], (pixel/255 - mean) / std, on DataLoaderOptions::device
  Tensor labels;  // int64 [B], on the same device
};

class DataLoader {
 public:
  DataLoader(std::shared_ptr<const ImageDataset> dataset, DataLoaderOptions options);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // Begins epoch `epoch`: the order and augmentation are a pure function of
  // (seed, epoch), so runs are reproducible whatever the worker count.
  void start_epoch(int64_t epoch);
  // The next batch of the current epoch, or nullopt at its end.
  std::optional<Batch> next();
  int64_t batches_per_epoch() const;
  const ImageDataset& dataset() const { return *dataset_; }

 private:
  struct Impl;
  std::shared_ptr<const ImageDataset> dataset_;
  std::unique_ptr<Impl> impl_;
};

// CIFAR-10's usual per-channel mean/std (of the official training set).
extern const std::vector<float> kCifar10Mean, kCifar10Std;

}  // namespace kiln::data
