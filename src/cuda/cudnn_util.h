// What kiln's cuDNN users share: the error check, one cuDNN handle per device
// (on that device's current stream), and an owning wrapper for descriptors of
// cuDNN 9's backend (graph) API.
#pragma once
#include <cudnn.h>

#include <cstdint>
#include <utility>

#include "kiln/error.h"

#define KILN_CUDNN_CHECK(call, what)                                                                    \
  do {                                                                                                  \
    cudnnStatus_t kiln_st_ = (call);                                                                    \
    if (kiln_st_ != CUDNN_STATUS_SUCCESS)                                                               \
      KILN_FAIL(what, ": cuDNN error ", static_cast<int>(kiln_st_), " (", cudnnGetErrorString(kiln_st_), \
                ") from ", #call);                                                                      \
  } while (0)

namespace kiln::cuda {

// The device's cuDNN handle, made on first use, with its stream set to the
// stream kernels on `device` are queued on now.
cudnnHandle_t cudnn_handle(int device, const char* what);

// One backend descriptor (cudnnBackendCreateDescriptor ... Destroy). `what`
// names the op a failure is reported for.
class BackendDesc {
 public:
  BackendDesc() = default;
  BackendDesc(cudnnBackendDescriptorType_t type, const char* what);
  ~BackendDesc();
  BackendDesc(BackendDesc&& o) noexcept : d_(std::exchange(o.d_, nullptr)), what_(o.what_) {}
  BackendDesc& operator=(BackendDesc&& o) noexcept;
  BackendDesc(const BackendDesc&) = delete;
  BackendDesc& operator=(const BackendDesc&) = delete;

  cudnnBackendDescriptor_t get() const { return d_; }
  // Sets `count` values of `type` at `values`; throws on failure.
  BackendDesc& set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count,
                   const void* values);
  BackendDesc& set_desc(cudnnBackendAttributeName_t name, const BackendDesc& value) {
    cudnnBackendDescriptor_t raw = value.get();
    return set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw);
  }
  BackendDesc& set_i64(cudnnBackendAttributeName_t name, int64_t value) {
    return set(name, CUDNN_TYPE_INT64, 1, &value);
  }
  void finalize();
  // Finalize for descriptors that may not be supported (an engine config
  // turned into a plan): the status instead of an error.
  cudnnStatus_t try_finalize() { return cudnnBackendFinalize(d_); }
  int64_t get_i64(cudnnBackendAttributeName_t name) const;

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
  const char* what_ = "cuDNN";
};

}  // namespace kiln::cuda
