// Copies between the host and CUDA devices (the to_device op's kernel).
//
// Host to device goes through pinned (page-locked) staging buffers, so the
// copy is queued on the current stream and the host goes on at once; a
// staging buffer is reused only after an event says its copy has finished.
// Device to host waits for the copy: the host reads the result next.
#include <cuda_runtime.h>

#include <cstring>
#include <mutex>
#include <vector>

#include "cuda/backend.h"
#include "cuda/check.h"
#include "kiln/cuda.h"
#include "kiln/ops.h"

namespace kiln::cuda {
namespace {

// Pinned host buffers, kept and reused by size class.
class PinnedPool {
 public:
  struct Buffer {
    void* ptr = nullptr;
    size_t size = 0;
    cudaEvent_t done = nullptr;  // recorded after the last copy out of it
  };

  Buffer take(size_t nbytes) {
    const size_t size = nbytes <= 4096 ? 4096 : (nbytes + 65535) / 65536 * 65536;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (size_t i = 0; i < free_.size(); ++i) {
        Buffer& b = free_[i];
        if (b.size < size || b.size > 2 * size) continue;
        cudaError_t q = cudaEventQuery(b.done);
        if (q == cudaErrorNotReady) {
          cudaGetLastError();
          continue;
        }
        KILN_CUDA_CHECK(q, "pinned host buffer");
        Buffer r = b;
        free_.erase(free_.begin() + static_cast<std::ptrdiff_t>(i));
        return r;
      }
    }
    Buffer b;
    b.size = size;
    KILN_CUDA_CHECK(cudaHostAlloc(&b.ptr, size, cudaHostAllocDefault), "pinned host buffer (cudaHostAlloc)");
    KILN_CUDA_CHECK(cudaEventCreateWithFlags(&b.done, cudaEventDisableTiming), "pinned host buffer");
    return b;
  }

  // Back to the pool once the work queued on `stream` so far has finished.
  void give_back(Buffer b, cudaStream_t stream) {
    KILN_CUDA_CHECK(cudaEventRecord(b.done, stream), "pinned host buffer");
    std::lock_guard<std::mutex> lock(mu_);
    free_.push_back(b);
  }

 private:
  std::mutex mu_;
  std::vector<Buffer> free_;
};

PinnedPool& pinned_pool() {
  static auto* p = new PinnedPool();  // lives to exit: copies may still be queued
  return *p;
}

}  // namespace

void copy_across_devices(const Tensor& src_in, const Tensor& dst) {
  const size_t nbytes = dst.nbytes();
  if (nbytes == 0) return;
  const Device from = src_in.device(), to = dst.device();
  if (from.is_cpu() && to.is_cuda()) {
    Tensor src = src_in.contiguous();
    DeviceGuard g(to.index);
    cudaStream_t stream = stream_for(to.index);
    PinnedPool::Buffer staging = pinned_pool().take(nbytes);
    std::memcpy(staging.ptr, src.data_ptr(), nbytes);
    KILN_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), staging.ptr, nbytes, cudaMemcpyHostToDevice, stream),
                    "to(cuda): host to device copy");
    pinned_pool().give_back(staging, stream);
  } else if (from.is_cuda() && to.is_cpu()) {
    DeviceGuard g(from.index);
    Tensor src = src_in.contiguous();  // on the device
    cudaStream_t stream = stream_for(from.index);
    KILN_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), nbytes, cudaMemcpyDeviceToHost, stream),
                    "to(cpu): device to host copy");
    KILN_CUDA_CHECK(cudaStreamSynchronize(stream), "to(cpu): device to host copy");
  } else {
    DeviceGuard g(from.index);
    Tensor src = src_in.contiguous();
    cudaStream_t stream = stream_for(from.index);
    KILN_CUDA_CHECK(cudaMemcpyPeerAsync(dst.data_ptr(), to.index, src.data_ptr(), from.index, nbytes, stream),
                    "to(cuda): device to device copy");
  }
}

}  // namespace kiln::cuda
