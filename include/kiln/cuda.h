// The CUDA device: availability, streams, events and the caching allocator's
// statistics. Every function here exists in every build: a build without the
// CUDA backend (KILN_CUDA=OFF) reports no device, and anything that needs one
// throws kiln::Error ("kiln was built without CUDA"), as does a build with it
// on a machine without a GPU ("no CUDA device ...").
#pragma once
#include <cstddef>
#include <cstdint>

#include "kiln/device.h"

namespace kiln::cuda {

// True when kiln was built with the CUDA backend.
bool built_with_cuda();
// True when at least one CUDA device can be used (never throws).
bool is_available();
int device_count();
// Why no device can be used ("" when one can): the build, the driver's answer.
const char* unavailable_reason();
// Throws kiln::Error naming `what` and the reason when `device` cannot be used.
void check_device(Device device, const char* what);

// Blocks until all work queued on the device has finished.
void synchronize(int device = 0);

// The caching allocator of one device. After a few steps of a training loop
// every allocation is a cache hit and cudaMalloc/cudaFree are not called.
struct AllocatorStats {
  size_t allocated_bytes = 0;       // handed out to tensors now (rounded sizes)
  size_t peak_allocated_bytes = 0;  // since start or reset_peak_stats()
  size_t reserved_bytes = 0;        // held from the driver (allocated + cached)
  uint64_t num_allocs = 0;          // allocate() calls
  uint64_t cache_hits = 0;          // of those, served from a cached block
  uint64_t num_cuda_mallocs = 0;    // cudaMalloc calls
  uint64_t num_cuda_frees = 0;      // cudaFree calls
  uint64_t num_splits = 0;          // cached blocks split to serve a smaller request
};
AllocatorStats allocator_stats(int device = 0);
void reset_peak_stats(int device = 0);
// Returns every unused cached block to the driver.
void empty_cache();

// A stream of one device (cudaStream_t underneath). The default-constructed
// Stream is the device's default (legacy) stream.
class Stream;
Stream current_stream(int device);

class Stream {
 public:
  Stream() = default;
  // A new non-blocking stream on `device`.
  static Stream create(int device = 0);
  void synchronize() const;
  void* handle() const { return handle_; }
  int device() const { return device_; }
  bool operator==(const Stream& o) const { return handle_ == o.handle_ && device_ == o.device_; }

 private:
  friend Stream current_stream(int device);
  Stream(void* handle, int device) : handle_(handle), device_(device) {}
  void* handle_ = nullptr;
  int device_ = 0;
};
// The stream kernels of this thread are queued on, per device.
Stream current_stream(int device = 0);
void set_current_stream(const Stream& stream);

// Makes `stream` current for a scope, then restores the previous one.
class StreamGuard {
 public:
  explicit StreamGuard(const Stream& stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  Stream prev_;
};

// A point in a stream's work (cudaEvent_t, with timing).
class Event {
 public:
  Event();
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  void record(const Stream& stream);
  void record() { record(current_stream()); }
  // Makes `stream` wait (on the device) until this event has happened.
  void wait(const Stream& stream) const;
  void synchronize() const;
  bool query() const;  // true once the event has happened
  // Milliseconds between two recorded events.
  float elapsed_ms(const Event& end) const;

 private:
  void* handle_ = nullptr;
};

}  // namespace kiln::cuda
