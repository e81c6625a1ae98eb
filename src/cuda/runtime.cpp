// Device discovery, the current stream per device and thread, events, and the
// error messages of failed CUDA calls.
#include <array>
#include <mutex>
#include <string>

#include "cuda/check.h"
#include "kiln/cuda.h"
#include "kiln/error.h"

namespace kiln::cuda {
namespace {

constexpr int kMaxDevices = 64;

struct Discovery {
  int count = 0;
  std::string reason;  // "" when a device can be used
};

// Asked once: the answer does not change while the process runs, and a
// machine without a driver must get "no device", never a crash.
const Discovery& discovery() {
  static const Discovery d = [] {
    Discovery r;
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
      cudaGetLastError();
      r.reason = std::string("no CUDA device: the CUDA runtime says \"") + cudaGetErrorString(err) + "\" (" +
                 cudaGetErrorName(err) + ")";
    } else if (n == 0) {
      r.reason = "no CUDA device: the driver reports 0 devices";
    } else {
      r.count = n < kMaxDevices ? n : kMaxDevices;
    }
    return r;
  }();
  return d;
}

thread_local std::array<cudaStream_t, kMaxDevices> t_current_stream{};

}  // namespace

void throw_cuda_error(cudaError_t err, const char* what, const char* call) {
  cudaGetLastError();  // clear a non-sticky error so later calls start clean
  KILN_FAIL(what, ": CUDA error ", cudaGetErrorName(err), " (", cudaGetErrorString(err), ") from ", call);
}

DeviceGuard::DeviceGuard(int device) {
  int cur = 0;
  KILN_CUDA_CHECK(cudaGetDevice(&cur), "DeviceGuard");
  if (cur != device) {
    KILN_CUDA_CHECK(cudaSetDevice(device), "DeviceGuard");
    prev_ = cur;
  }
}
DeviceGuard::~DeviceGuard() {
  if (prev_ >= 0) cudaSetDevice(prev_);
}

cudaStream_t stream_for(int device) { return t_current_stream[static_cast<size_t>(device)]; }

bool built_with_cuda() { return true; }
bool is_available() { return discovery().count > 0; }
int device_count() { return discovery().count; }
const char* unavailable_reason() { return discovery().reason.c_str(); }

void check_device(Device device, const char* what) {
  KILN_CHECK(device.is_cuda(), what, ": ", device, " is not a CUDA device");
  const Discovery& d = discovery();
  KILN_CHECK(d.count > 0, what, ": ", d.reason, "; use Device::cpu() (kiln::cuda::is_available() says whether a GPU "
             "can be used)");
  KILN_CHECK(device.index >= 0 && device.index < d.count, what, ": ", device, " does not exist; this machine has ",
             d.count, " CUDA device(s), cuda:0 to cuda:", d.count - 1);
}

void synchronize(int device) {
  check_device(Device::cuda(device), "cuda::synchronize");
  DeviceGuard g(device);
  KILN_CUDA_CHECK(cudaDeviceSynchronize(), "cuda::synchronize");
}

Stream Stream::create(int device) {
  check_device(Device::cuda(device), "cuda::Stream::create");
  DeviceGuard g(device);
  cudaStream_t s = nullptr;
  KILN_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cuda::Stream::create");
  return Stream(s, device);  // lives to exit: tensors may still be queued on it
}

void Stream::synchronize() const {
  check_device(Device::cuda(device_), "cuda::Stream::synchronize");
  DeviceGuard g(device_);
  KILN_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(handle_)), "cuda::Stream::synchronize");
}

Stream current_stream(int device) {
  KILN_CHECK(device >= 0 && device < kMaxDevices, "cuda::current_stream: device index ", device, " out of range");
  return Stream(t_current_stream[static_cast<size_t>(device)], device);
}

void set_current_stream(const Stream& stream) {
  check_device(Device::cuda(stream.device()), "cuda::set_current_stream");
  t_current_stream[static_cast<size_t>(stream.device())] = static_cast<cudaStream_t>(stream.handle());
}

StreamGuard::StreamGuard(const Stream& stream) : prev_(current_stream(stream.device())) { set_current_stream(stream); }
StreamGuard::~StreamGuard() { t_current_stream[static_cast<size_t>(prev_.device())] = static_cast<cudaStream_t>(prev_.handle()); }

Event::Event() {
  check_device(Device::cuda(0), "cuda::Event");
  cudaEvent_t e = nullptr;
  KILN_CUDA_CHECK(cudaEventCreate(&e), "cuda::Event");
  handle_ = e;
}
Event::~Event() {
  if (handle_ != nullptr) cudaEventDestroy(static_cast<cudaEvent_t>(handle_));
}
void Event::record(const Stream& stream) {
  DeviceGuard g(stream.device());
  KILN_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(handle_), static_cast<cudaStream_t>(stream.handle())),
                  "cuda::Event::record");
}
void Event::wait(const Stream& stream) const {
  DeviceGuard g(stream.device());
  KILN_CUDA_CHECK(
      cudaStreamWaitEvent(static_cast<cudaStream_t>(stream.handle()), static_cast<cudaEvent_t>(handle_), 0),
      "cuda::Event::wait");
}
void Event::synchronize() const {
  KILN_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(handle_)), "cuda::Event::synchronize");
}
bool Event::query() const {
  cudaError_t err = cudaEventQuery(static_cast<cudaEvent_t>(handle_));
  if (err == cudaErrorNotReady) {
    cudaGetLastError();
    return false;
  }
  KILN_CUDA_CHECK(err, "cuda::Event::query");
  return true;
}
float Event::elapsed_ms(const Event& end) const {
  float ms = 0;
  KILN_CUDA_CHECK(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(handle_), static_cast<cudaEvent_t>(end.handle_)),
                  "cuda::Event::elapsed_ms");
  return ms;
}

}  // namespace kiln::cuda
