// Error checking for CUDA runtime and cuBLASLt calls: a failed call throws
// kiln::Error naming what kiln was doing and the driver's reason.
#pragma once
#include <cuda_runtime.h>

namespace kiln::cuda {

[[noreturn]] void throw_cuda_error(cudaError_t err, const char* what, const char* call);
[[noreturn]] void throw_cublas_error(int status, const char* what, const char* call);

// Sets the CUDA device for a scope (kernels, allocations and copies go to the
// current device) and restores the previous one.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int prev_ = -1;
};

// The cudaStream_t kernels on `device` are queued on now.
cudaStream_t stream_for(int device);

}  // namespace kiln::cuda

#define KILN_CUDA_CHECK(call, what)                                                   \
  do {                                                                                \
    cudaError_t kiln_err_ = (call);                                                   \
    if (kiln_err_ != cudaSuccess) ::kiln::cuda::throw_cuda_error(kiln_err_, what, #call); \
  } while (0)

// After a kernel launch: a bad launch configuration shows up here.
#define KILN_CUDA_CHECK_LAUNCH(what) KILN_CUDA_CHECK(cudaGetLastError(), what)
