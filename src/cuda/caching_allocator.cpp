// The CUDA caching allocator: device memory is taken from the driver in
// segments (cudaMalloc) and handed out as blocks that are cached when freed,
// split when a cached block is larger than a request, and merged with free
// neighbours of their segment. Blocks belong to the stream that was current
// when they were allocated, so a freed block is reused only by work queued
// after its last use on that stream (no synchronization needed). After the
// first steps of a training loop every request is a cache hit: cudaMalloc and
// cudaFree (which synchronize the device) stay off the hot path.
//
// Pools as PyTorch's: requests up to 1 MiB come from 2 MiB segments (split
// down to 512 bytes), larger ones from 20 MiB segments or their own rounded
// to 2 MiB (split when at least 1 MiB would remain).
#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <set>
#include <unordered_map>

#include "cuda/backend.h"
#include "cuda/check.h"
#include "kiln/cuda.h"
#include "kiln/error.h"

namespace kiln::cuda {
namespace {

constexpr size_t kMinBlock = 512;
constexpr size_t kSmallRequest = size_t{1} << 20;
constexpr size_t kSmallSegment = size_t{2} << 20;
constexpr size_t kMinLargeAlloc = size_t{10} << 20;
constexpr size_t kLargeSegment = size_t{20} << 20;
constexpr size_t kRoundLarge = size_t{2} << 20;
constexpr int kMaxDevices = 64;

size_t round_up(size_t n, size_t m) { return (n + m - 1) / m * m; }
size_t block_size(size_t nbytes) { return nbytes == 0 ? kMinBlock : round_up(nbytes, kMinBlock); }
size_t segment_size(size_t size) {
  if (size <= kSmallRequest) return kSmallSegment;
  if (size < kMinLargeAlloc) return kLargeSegment;
  return round_up(size, kRoundLarge);
}

struct Block {
  int device = 0;
  cudaStream_t stream = nullptr;
  size_t size = 0;
  char* ptr = nullptr;
  bool allocated = false;
  bool small = false;            // which pool
  Block* prev = nullptr;         // neighbours within the segment
  Block* next = nullptr;
};

struct BlockOrder {
  bool operator()(const Block* a, const Block* b) const {
    if (a->stream != b->stream) return reinterpret_cast<uintptr_t>(a->stream) < reinterpret_cast<uintptr_t>(b->stream);
    if (a->size != b->size) return a->size < b->size;
    return reinterpret_cast<uintptr_t>(a->ptr) < reinterpret_cast<uintptr_t>(b->ptr);
  }
};
using FreeSet = std::set<Block*, BlockOrder>;

struct DeviceCache {
  FreeSet small_free, large_free;
  AllocatorStats stats;
};

class CudaCachingAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes) override {
    int device = 0;
    KILN_CUDA_CHECK(cudaGetDevice(&device), "CUDA allocator");
    return allocate_on(Device::cuda(device), nbytes);
  }

  void* allocate_on(Device device, size_t nbytes) override {
    check_device(device, "CUDA allocator");
    const int dev = device.index;
    DeviceGuard guard(dev);
    cudaStream_t stream = stream_for(dev);
    const size_t size = block_size(nbytes);
    std::lock_guard<std::mutex> lock(mu_);
    DeviceCache& cache = caches_[static_cast<size_t>(dev)];
    ++cache.stats.num_allocs;
    FreeSet& pool = size <= kSmallRequest ? cache.small_free : cache.large_free;

    Block key;
    key.stream = stream;
    key.size = size;
    Block* block = nullptr;
    auto it = pool.lower_bound(&key);
    if (it != pool.end() && (*it)->stream == stream) {
      block = *it;
      pool.erase(it);
      ++cache.stats.cache_hits;
    } else {
      block = new_segment(cache, dev, stream, size);
    }

    const size_t remaining = block->size - size;
    if (remaining >= (block->small ? kMinBlock : kSmallRequest)) {
      auto* rest = new Block(*block);
      rest->ptr = block->ptr + size;
      rest->size = remaining;
      rest->prev = block;
      rest->next = block->next;
      if (block->next) block->next->prev = rest;
      block->next = rest;
      block->size = size;
      pool.insert(rest);
      ++cache.stats.num_splits;
    }
    block->allocated = true;
    live_[block->ptr] = block;
    cache.stats.allocated_bytes += block->size;
    if (cache.stats.allocated_bytes > cache.stats.peak_allocated_bytes)
      cache.stats.peak_allocated_bytes = cache.stats.allocated_bytes;
    return block->ptr;
  }

  void deallocate(void* ptr, size_t) override {
    if (ptr == nullptr) return;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.find(ptr);
    KILN_ASSERT(it != live_.end(), "CUDA allocator: freeing a pointer it did not hand out");
    Block* block = it->second;
    live_.erase(it);
    DeviceCache& cache = caches_[static_cast<size_t>(block->device)];
    cache.stats.allocated_bytes -= block->size;
    block->allocated = false;
    FreeSet& pool = block->small ? cache.small_free : cache.large_free;
    merge(pool, block, block->prev);
    merge(pool, block, block->next);
    pool.insert(block);
  }

  void empty_cache() override {
    std::lock_guard<std::mutex> lock(mu_);
    for (int d = 0; d < kMaxDevices; ++d) release_free_segments(d);
  }

  size_t bytes_in_use() const override {
    size_t n = 0;
    for (const DeviceCache& c : caches_) n += c.stats.allocated_bytes;
    return n;
  }
  size_t bytes_cached() const override {
    size_t n = 0;
    for (const DeviceCache& c : caches_) n += c.stats.reserved_bytes - c.stats.allocated_bytes;
    return n;
  }

  AllocatorStats stats(int device) {
    std::lock_guard<std::mutex> lock(mu_);
    return caches_.at(static_cast<size_t>(device)).stats;
  }
  void reset_peak(int device) {
    std::lock_guard<std::mutex> lock(mu_);
    AllocatorStats& s = caches_.at(static_cast<size_t>(device)).stats;
    s.peak_allocated_bytes = s.allocated_bytes;
  }

 private:
  // A fresh segment for a request of `size` bytes; on out-of-memory the
  // cache is given back to the driver and the call tried once more.
  Block* new_segment(DeviceCache& cache, int dev, cudaStream_t stream, size_t size) {
    const size_t seg = segment_size(size);
    void* p = nullptr;
    cudaError_t err = cudaMalloc(&p, seg);
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      release_free_segments(dev);
      err = cudaMalloc(&p, seg);
    }
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      size_t free_b = 0, total_b = 0;
      cudaMemGetInfo(&free_b, &total_b);
      constexpr double kMiB = 1 << 20;
      KILN_FAIL("CUDA out of memory on cuda:", dev, ": tried to allocate ", seg / kMiB, " MiB; kiln holds ",
                cache.stats.reserved_bytes / kMiB, " MiB (", cache.stats.allocated_bytes / kMiB,
                " MiB in tensors), the device has ", free_b / kMiB, " MiB free of ", total_b / kMiB,
                " MiB; reduce the batch size or free tensors");
    }
    KILN_CUDA_CHECK(err, "CUDA allocator (cudaMalloc)");
    ++cache.stats.num_cuda_mallocs;
    // KILN_CUDA_MALLOC_LOG=1: each new segment on stderr, with the request
    // that needed it and the cache's state then (what a steady-state
    // cudaMalloc was for).
    static const bool log = std::getenv("KILN_CUDA_MALLOC_LOG") != nullptr;
    if (log)
      std::fprintf(stderr,
                   "kiln cuda: cudaMalloc %zu bytes on cuda:%d for a %zu-byte request (allocation #%llu; reserved "
                   "%zu, allocated %zu, largest free large block %zu)\n",
                   seg, dev, size, static_cast<unsigned long long>(cache.stats.num_allocs),
                   static_cast<size_t>(cache.stats.reserved_bytes), static_cast<size_t>(cache.stats.allocated_bytes),
                   cache.large_free.empty() ? size_t{0} : (*std::max_element(cache.large_free.begin(),
                                                                             cache.large_free.end(),
                                                                             [](const Block* a, const Block* b) {
                                                                               return a->size < b->size;
                                                                             }))->size);
    cache.stats.reserved_bytes += seg;
    auto* b = new Block();
    b->device = dev;
    b->stream = stream;
    b->size = seg;
    b->ptr = static_cast<char*>(p);
    b->small = size <= kSmallRequest;
    return b;
  }

  // Absorbs the free neighbour `other` into `block` (same segment, same pool).
  static void merge(FreeSet& pool, Block* block, Block* other) {
    if (other == nullptr || other->allocated) return;
    pool.erase(other);
    if (other == block->prev) {
      block->ptr = other->ptr;
      block->prev = other->prev;
      if (block->prev) block->prev->next = block;
    } else {
      block->next = other->next;
      if (block->next) block->next->prev = block;
    }
    block->size += other->size;
    delete other;
  }

  // cudaFree for every cached block that is a whole segment.
  void release_free_segments(int dev) {
    DeviceCache& cache = caches_[static_cast<size_t>(dev)];
    for (FreeSet* pool : {&cache.small_free, &cache.large_free}) {
      for (auto it = pool->begin(); it != pool->end();) {
        Block* b = *it;
        if (b->prev == nullptr && b->next == nullptr) {
          DeviceGuard g(dev);
          KILN_CUDA_CHECK(cudaFree(b->ptr), "CUDA allocator (cudaFree)");
          ++cache.stats.num_cuda_frees;
          cache.stats.reserved_bytes -= b->size;
          delete b;
          it = pool->erase(it);
        } else {
          ++it;
        }
      }
    }
  }

  std::mutex mu_;
  std::array<DeviceCache, kMaxDevices> caches_{};
  std::unordered_map<void*, Block*> live_;
};

CudaCachingAllocator& caching_allocator() {
  static auto* a = new CudaCachingAllocator();  // lives to exit: tensors may outlive statics
  return *a;
}

}  // namespace

Allocator& device_allocator() { return caching_allocator(); }

AllocatorStats allocator_stats(int device) {
  KILN_CHECK(device >= 0 && device < kMaxDevices, "cuda::allocator_stats: no device ", device);
  return caching_allocator().stats(device);
}
void reset_peak_stats(int device) {
  KILN_CHECK(device >= 0 && device < kMaxDevices, "cuda::reset_peak_stats: no device ", device);
  caching_allocator().reset_peak(device);
}
void empty_cache() {
  if (is_available()) caching_allocator().empty_cache();
}

}  // namespace kiln::cuda
