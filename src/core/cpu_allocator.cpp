// CPU caching allocator: 64-byte-aligned blocks, freed blocks kept by rounded
// size and handed out again. Training repeats the same shapes every step, so
// after the first step nearly every allocation is a cache hit, and large
// buffers are never mapped and unmapped per call (PyTorch 1.13 loses much of
// its convolution time to exactly that on these machines).
#include <cstdlib>
#include <map>
#include <mutex>
#include <vector>

#include "cuda/backend.h"
#include "kiln/error.h"
#include "kiln/storage.h"

namespace kiln {
namespace {

constexpr size_t kAlign = 64;

size_t round_size(size_t n) {
  if (n == 0) n = 1;
  if (n <= (1u << 20)) return (n + 511) & ~size_t{511};  // small: 512-byte classes
  return (n + 65535) & ~size_t{65535};                      // large: 64 KiB classes
}

class CpuCachingAllocator final : public Allocator {
 public:
  ~CpuCachingAllocator() override { empty_cache(); }

  void* allocate(size_t nbytes) override {
    size_t size = round_size(nbytes);
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = free_.find(size);
      if (it != free_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        cached_ -= size;
        in_use_ += size;
        return p;
      }
    }
    void* p = std::aligned_alloc(kAlign, size);
    if (p == nullptr) {
      empty_cache();  // give the cache back and try once more
      p = std::aligned_alloc(kAlign, size);
    }
    KILN_CHECK(p != nullptr, "CPU allocator: out of memory allocating ", nbytes,
               " bytes; reduce the batch size or model size");
    std::lock_guard<std::mutex> lock(mu_);
    in_use_ += size;
    return p;
  }

  void deallocate(void* ptr, size_t nbytes) override {
    if (ptr == nullptr) return;
    size_t size = round_size(nbytes);
    std::lock_guard<std::mutex> lock(mu_);
    in_use_ -= size;
    free_[size].push_back(ptr);
    cached_ += size;
  }

  void empty_cache() override {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [size, blocks] : free_)
      for (void* p : blocks) std::free(p);
    free_.clear();
    cached_ = 0;
  }

  size_t bytes_in_use() const override { return in_use_; }
  size_t bytes_cached() const override { return cached_; }

 private:
  std::mutex mu_;
  std::map<size_t, std::vector<void*>> free_;
  size_t in_use_ = 0, cached_ = 0;
};

Allocator*& slot(DeviceType t) {
  static Allocator* table[kNumDeviceTypes] = {};
  return table[static_cast<int>(t)];
}

}  // namespace

Allocator& allocator_for(DeviceType type) {
  if (type == DeviceType::CPU && slot(type) == nullptr) {
    static CpuCachingAllocator* cpu = new CpuCachingAllocator();  // lives to exit: tensors may outlive statics
    slot(type) = cpu;
  }
  if (type == DeviceType::CUDA && slot(type) == nullptr) slot(type) = &cuda::device_allocator();
  Allocator* a = slot(type);
  KILN_CHECK(a != nullptr, "no allocator for device type ", type == DeviceType::CUDA ? "cuda" : "cpu",
             ": this build of kiln has no such backend; rebuild with it or use Device::cpu()");
  return *a;
}

void register_allocator(DeviceType type, Allocator* allocator) { slot(type) = allocator; }

Storage::Storage(size_t nbytes, Device device)
    : nbytes_(nbytes), device_(device), allocator_(&allocator_for(device.type)) {
  data_ = allocator_->allocate_on(device, nbytes);
}

Storage::Storage(size_t nbytes, Device device, Meta) : nbytes_(nbytes), device_(device), meta_(true) {}

Storage::~Storage() {
  if (allocator_ != nullptr) allocator_->deallocate(data_, nbytes_);
}

void Storage::materialize(std::shared_ptr<Storage> real) {
  KILN_ASSERT(is_meta(), "Storage::materialize: the storage already has memory");
  KILN_ASSERT(real && !real->is_meta() && real->device_ == device_ && real->nbytes_ >= nbytes_,
              "Storage::materialize: the backing storage does not fit (", real ? real->nbytes_ : 0, " bytes on ",
              real ? real->device_ : device_, " for ", nbytes_, " bytes on ", device_, ")");
  data_ = real->data_;
  backing_ = std::move(real);
}

}  // namespace kiln
