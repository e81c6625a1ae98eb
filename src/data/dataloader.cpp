// DataLoader: worker threads assemble batches (gather, augment, normalize)
// ahead of the consumer into a bounded, in-order queue. Batch b of an epoch
// is a pure function of (dataset, options, epoch, b), so the worker count and
// timing change nothing but speed.
#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>
#include <system_error>
#include <thread>

#include "data/data_internal.h"
#include "kiln/error.h"
#include "kiln/profile.h"

namespace kiln::data {

struct DataLoader::Impl {
  DataLoaderOptions opt;
  Tensor images, labels;  // contiguous uint8 [N, C, H, W], int64 [N]
  int64_t n = 0, C = 0, H = 0, W = 0;
  detail::Normalizer norm;
  std::optional<detail::DeviceDataset> on_device;  // DataLoaderOptions::device is CUDA: the resident set

  int64_t epoch = -1;
  std::vector<int64_t> order;
  int64_t num_batches = 0;

  struct Slot {
    std::optional<Batch> batch;
    std::exception_ptr error;
  };
  std::mutex mu;
  std::condition_variable ready_cv, space_cv;
  std::map<int64_t, Slot> ready;
  int64_t next_build = 0, next_consume = 0;
  bool stop = false;
  std::vector<std::thread> workers;

  Batch build(int64_t b) const {
    const int64_t start = b * opt.batch_size, count = std::min(opt.batch_size, n - start);
    Batch batch;
    batch.images = Tensor::empty({count, C, H, W}, DType::Float32);
    batch.labels = Tensor::empty({count}, DType::Int64);
    float* dst = batch.images.data<float>();
    int64_t* lab = batch.labels.data<int64_t>();
    const uint8_t* src = images.data<uint8_t>();
    const int64_t* labels_in = labels.data<int64_t>();
    const int64_t chw = C * H * W;
    for (int64_t i = 0; i < count; ++i) {
      const int64_t idx = order[static_cast<size_t>(start + i)];
      const detail::ImageAugment aug = detail::draw_augment(opt.augment, opt.seed, epoch, idx);
      detail::assemble_image(src + idx * chw, C, H, W, opt.augment, aug, norm, dst + i * chw);
      lab[i] = labels_in[idx];
    }
    if (opt.memory_format != MemoryFormat::Contiguous) batch.images = contiguous(batch.images, opt.memory_format);
    return batch;
  }

  void worker_loop() {
    const int64_t prefetch = std::max(opt.prefetch, 1);
    for (;;) {
      int64_t b;
      {
        std::unique_lock<std::mutex> lock(mu);
        space_cv.wait(lock, [&] { return stop || next_build >= num_batches || next_build < next_consume + prefetch; });
        if (stop || next_build >= num_batches) return;
        b = next_build++;
      }
      Slot slot;
      try {
        slot.batch = build(b);
      } catch (...) {
        slot.error = std::current_exception();
      }
      {
        std::lock_guard<std::mutex> lock(mu);
        ready.emplace(b, std::move(slot));
      }
      ready_cv.notify_all();
    }
  }

  void stop_workers() {
    {
      std::lock_guard<std::mutex> lock(mu);
      stop = true;
    }
    space_cv.notify_all();
    for (auto& t : workers) t.join();
    workers.clear();
    std::lock_guard<std::mutex> lock(mu);
    stop = false;
    ready.clear();
  }
};

DataLoader::DataLoader(std::shared_ptr<const ImageDataset> dataset, DataLoaderOptions options)
    : dataset_(std::move(dataset)), impl_(std::make_unique<Impl>()) {
  KILN_CHECK(dataset_ != nullptr, "DataLoader: the dataset is null");
  const Tensor& im = dataset_->images;
  KILN_CHECK(im.defined() && dataset_->labels.defined(), "DataLoader: the dataset ", dataset_->source,
             " has no images or labels");
  KILN_CHECK(im.dim() == 4 && im.dtype() == DType::UInt8 && im.device() == Device::cpu(),
             "DataLoader: images must be uint8 [N, C, H, W] on the CPU; the dataset ", dataset_->source, " holds ",
             dtype_name(im.dtype()), shape_str(im.shape()));
  KILN_CHECK(dataset_->labels.dim() == 1 && dataset_->labels.size(0) == im.size(0), "DataLoader: ",
             im.size(0), " images but labels of shape ", shape_str(dataset_->labels.shape()));
  KILN_CHECK(options.batch_size > 0, "DataLoader: batch_size must be positive, got ", options.batch_size);
  KILN_CHECK(options.workers >= 0, "DataLoader: workers must be >= 0, got ", options.workers);
  const AugmentOptions& a = options.augment;
  KILN_CHECK(a.crop_padding >= 0 && a.translate >= 0, "DataLoader: crop_padding and translate must be >= 0");
  KILN_CHECK(a.translate < im.size(2) && a.translate < im.size(3), "DataLoader: translate ", a.translate,
             " needs images larger than it (reflect padding); the images are ", im.size(2), "x", im.size(3));
  Impl& s = *impl_;
  s.opt = std::move(options);
  s.images = im.contiguous();
  s.labels = dataset_->labels.to(DType::Int64).contiguous();
  s.n = im.size(0);
  s.C = im.size(1);
  s.H = im.size(2);
  s.W = im.size(3);
  s.norm = detail::make_normalizer(s.C, s.opt.mean, s.opt.std);
  if (!s.opt.device.is_cpu()) s.on_device = detail::upload_dataset(s.images, s.labels, s.opt.device);
}

DataLoader::~DataLoader() {
  if (impl_) impl_->stop_workers();
}

int64_t DataLoader::batches_per_epoch() const {
  const int64_t n = impl_->n, b = impl_->opt.batch_size;
  return impl_->opt.drop_last ? n / b : (n + b - 1) / b;
}

void DataLoader::start_epoch(int64_t epoch) {
  KILN_CHECK(epoch >= 0, "DataLoader::start_epoch: epoch must be >= 0, got ", epoch);
  Impl& s = *impl_;
  s.stop_workers();
  s.epoch = epoch;
  if (s.opt.shuffle) {
    s.order = detail::epoch_permutation(s.n, s.opt.seed, epoch);
  } else {
    s.order.resize(static_cast<size_t>(s.n));
    for (int64_t i = 0; i < s.n; ++i) s.order[static_cast<size_t>(i)] = i;
  }
  s.num_batches = batches_per_epoch();
  s.next_build = 0;
  s.next_consume = 0;
  if (s.on_device) return;  // batches are one kernel each, queued by next(): no workers
  try {
    for (int w = 0; w < s.opt.workers; ++w) s.workers.emplace_back([&s] { s.worker_loop(); });
  } catch (const std::system_error& e) {
    // Thread limits, address space for stacks: a user's choice of worker
    // count, so a kiln::Error, not an abort from an escaping system_error.
    s.stop_workers();
    KILN_FAIL("DataLoader: the system refused to start ", s.opt.workers, " data-loading threads (", e.what(),
              "); use fewer --workers (DataLoaderOptions::workers; 0 assembles batches in the calling thread)");
  }
}

std::optional<Batch> DataLoader::next() {
  ProfileRange range("dataloader.next");  // the wait for a batch, or its assembly without workers
  Impl& s = *impl_;
  if (s.epoch < 0) start_epoch(0);
  if (s.next_consume >= s.num_batches) return std::nullopt;
  if (s.on_device) {
    const int64_t start = s.next_consume++ * s.opt.batch_size;
    return detail::build_device_batch(*s.on_device, s.opt, s.norm, s.epoch, s.order.data() + start,
                                      std::min(s.opt.batch_size, s.n - start));
  }
  if (s.workers.empty()) return s.build(s.next_consume++);
  Impl::Slot slot;
  {
    std::unique_lock<std::mutex> lock(s.mu);
    s.ready_cv.wait(lock, [&] { return s.ready.count(s.next_consume) > 0; });
    auto it = s.ready.find(s.next_consume);
    slot = std::move(it->second);
    s.ready.erase(it);
    ++s.next_consume;
  }
  s.space_cv.notify_all();
  if (slot.error) std::rethrow_exception(slot.error);
  return std::move(slot.batch);
}

}  // namespace kiln::data
