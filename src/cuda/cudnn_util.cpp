#include "cuda/cudnn_util.h"

#include <array>
#include <mutex>

#include "cuda/check.h"

namespace kiln::cuda {

namespace {
constexpr int kMaxDevices = 64;
}

cudnnHandle_t cudnn_handle(int device, const char* what) {
  static std::array<cudnnHandle_t, kMaxDevices> all{};
  static std::mutex mu;
  KILN_CHECK(device >= 0 && device < kMaxDevices, what, ": CUDA device ", device, " is out of range");
  cudnnHandle_t h;
  {
    std::lock_guard<std::mutex> lock(mu);
    cudnnHandle_t& slot = all[static_cast<size_t>(device)];
    if (slot == nullptr) {
      DeviceGuard guard(device);
      KILN_CUDNN_CHECK(cudnnCreate(&slot), what);
    }
    h = slot;
  }
  KILN_CUDNN_CHECK(cudnnSetStream(h, stream_for(device)), what);
  return h;
}

BackendDesc::BackendDesc(cudnnBackendDescriptorType_t type, const char* what) : what_(what) {
  KILN_CUDNN_CHECK(cudnnBackendCreateDescriptor(type, &d_), what);
}

BackendDesc::~BackendDesc() {
  if (d_ != nullptr) cudnnBackendDestroyDescriptor(d_);
}

BackendDesc& BackendDesc::operator=(BackendDesc&& o) noexcept {
  if (this != &o) {
    if (d_ != nullptr) cudnnBackendDestroyDescriptor(d_);
    d_ = std::exchange(o.d_, nullptr);
    what_ = o.what_;
  }
  return *this;
}

BackendDesc& BackendDesc::set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count,
                              const void* values) {
  KILN_CUDNN_CHECK(cudnnBackendSetAttribute(d_, name, type, count, values), what_);
  return *this;
}

void BackendDesc::finalize() { KILN_CUDNN_CHECK(cudnnBackendFinalize(d_), what_); }

int64_t BackendDesc::get_i64(cudnnBackendAttributeName_t name) const {
  int64_t v = 0, n = 0;
  KILN_CUDNN_CHECK(cudnnBackendGetAttribute(d_, name, CUDNN_TYPE_INT64, 1, &n, &v), what_);
  return v;
}

}  // namespace kiln::cuda
