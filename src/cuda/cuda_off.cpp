// The CUDA API of a build without the CUDA backend (KILN_CUDA=OFF): no device,
// and a clear kiln::Error wherever one is needed.
#include "cuda/backend.h"
#include "kiln/cuda.h"
#include "kiln/error.h"
#include "kiln/tensor.h"

namespace kiln::cuda {
namespace {

constexpr const char* kReason =
    "kiln was built without CUDA (KILN_CUDA=OFF); rebuild with the CUDA toolkit installed (cmake -DKILN_CUDA=ON)";

[[noreturn]] void fail(const char* what) { KILN_FAIL(what, ": ", kReason, ", or use Device::cpu()"); }

class NoCudaAllocator final : public Allocator {
 public:
  void* allocate(size_t) override { fail("CUDA allocator"); }
  void deallocate(void*, size_t) override {}
};

}  // namespace

bool built_with_cuda() { return false; }
void sgd_step(const std::vector<Tensor>&, const std::vector<Tensor>&, const std::vector<Tensor>&, const SgdHyper&) {
  fail("SGD step on CUDA");
}
bool is_available() { return false; }
int device_count() { return 0; }
const char* unavailable_reason() { return kReason; }
void check_device(Device, const char* what) { fail(what); }
void synchronize(int) { fail("cuda::synchronize"); }
AllocatorStats allocator_stats(int) { return {}; }
void reset_peak_stats(int) {}
void empty_cache() {}

Stream Stream::create(int) { fail("cuda::Stream::create"); }
void Stream::synchronize() const { fail("cuda::Stream::synchronize"); }
Stream current_stream(int) { return Stream(); }
void set_current_stream(const Stream&) { fail("cuda::set_current_stream"); }
StreamGuard::StreamGuard(const Stream&) { fail("cuda::StreamGuard"); }
StreamGuard::~StreamGuard() = default;
Event::Event() { fail("cuda::Event"); }
Event::~Event() = default;
void Event::record(const Stream&) {}
void Event::wait(const Stream&) const {}
void Event::synchronize() const {}
bool Event::query() const { return true; }
float Event::elapsed_ms(const Event&) const { return 0; }

Allocator& device_allocator() {
  static NoCudaAllocator a;
  return a;
}
void copy_across_devices(const Tensor&, const Tensor&) { fail("to(cuda)"); }
void register_cuda_kernels() {}
void augment_batch(const Tensor&, const Tensor&, const Tensor&, int64_t, int64_t, const std::vector<float>&,
                   const std::vector<float>&, const Tensor&, const Tensor&) {
  fail("DataLoader on CUDA");
}

}  // namespace kiln::cuda
