// Dtype conversion and strided copies on CUDA (the copy, cast, fill and
// to-contiguous kernels): every (from, to) pair of kiln's dtypes.
#include "cuda/loop.cuh"

namespace kiln::cuda {
namespace {

template <typename To>
struct ConvertTo {
  template <typename From>
  __device__ To operator()(From v) const {
    return convert<To>(v);
  }
};

}  // namespace

void launch_cast(const PointwiseCall& c) {
  const Scalar from = c.in[0].is_number ? Scalar::Float64 : c.in[0].dtype;
  visit_scalar(c.out.dtype, [&]<typename To>() {
    visit_scalar(from, [&]<typename From>() { run_loop<To, From>(c, ConvertTo<To>{}); });
  });
}

}  // namespace kiln::cuda
