// Raw memory owned by one allocator on one device, shared by tensors and views.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "kiln/device.h"

namespace kiln {

// One per device type. allocate() returns 64-byte-aligned memory (or throws
// kiln::Error when the device is out of memory); deallocate gets the same size.
class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t nbytes) = 0;
  virtual void deallocate(void* ptr, size_t nbytes) = 0;
  // Memory on one device of the allocator's type (CUDA: device.index).
  virtual void* allocate_on(Device device, size_t nbytes) { return allocate(nbytes); }
  // Returns cached blocks to the system.
  virtual void empty_cache() {}
  // Bytes currently handed out and bytes held in the cache.
  virtual size_t bytes_in_use() const { return 0; }
  virtual size_t bytes_cached() const { return 0; }
};

// The allocator for a device type; throws kiln::Error when kiln was built
// without that backend.
Allocator& allocator_for(DeviceType type);
void register_allocator(DeviceType type, Allocator* allocator);

class Storage {
 public:
  Storage(size_t nbytes, Device device);
  // A meta storage: a size and a device but no memory. Meta tensors run
  // shape rules without allocating (tracing, shape inference).
  struct Meta {};
  Storage(size_t nbytes, Device device, Meta);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  bool is_meta() const { return data_ == nullptr && meta_; }
  // Gives a meta storage the memory of `real` (same device, at least as
  // large), which it keeps alive: capture hands out meta placeholders and
  // fills them once the captured graph has run.
  void materialize(std::shared_ptr<Storage> real);

  // Bumped by every in-place write. Views and detach() share the storage, so
  // they share the count; backward compares it with the count a saved tensor
  // had when its op ran, and refuses to use a tensor modified since.
  uint64_t version() const { return version_.load(std::memory_order_relaxed); }
  void bump_version() { version_.fetch_add(1, std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> version_{0};
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  Allocator* allocator_ = nullptr;  // null: meta or materialized (no memory of its own)
  bool meta_ = false;
  std::shared_ptr<Storage> backing_;  // a materialized meta storage's memory
};

}  // namespace kiln
