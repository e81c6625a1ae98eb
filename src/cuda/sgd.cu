// SGD's step over a list of float32 tensors in one launch (kernels.h's
// SgdCall): blockIdx.y picks the tensor, the x blocks stride over its
// elements, so one launch covers every parameter of a model.
#include "cuda/launch.cuh"

namespace kiln::cuda {
namespace {

__global__ void sgd_kernel(SgdCall c) {
  const SgdTensor t = c.t[blockIdx.y];
  KILN_GRID_STRIDE(i, t.n) {
    // __fmul_rn / __fmaf_rn: exactly the per-op kernels' roundings; nvcc may
    // not contract a multiply of one op into the add of the next.
    float b = __fmul_rn(t.b[i], c.m);
    b = __fmaf_rn(c.a_g, t.g[i], b);
    float p = t.p[i];
    if (c.weight_decay) b = __fmaf_rn(c.a_wp, p, b);
    if (c.nesterov) {
      if (c.weight_decay) p = __fmul_rn(p, c.decay);
      p = __fmaf_rn(c.a_pg, t.g[i], p);
    }
    p = __fmaf_rn(c.a_pb, b, p);
    t.b[i] = b;
    t.p[i] = p;
  }
}

}  // namespace

void launch_sgd(const SgdCall& c) {
  if (c.count == 0) return;
  // At most two blocks per SM along x: the y blocks of small tensors leave
  // at once, and hundreds of thousands of idle blocks would cost more than
  // the update of a small model.
  const int64_t cap = int64_t{multiprocessor_count()} * 2;
  const int64_t want = (c.max_n + kThreads - 1) / kThreads;
  dim3 grid(static_cast<unsigned>(want < cap ? want : cap), static_cast<unsigned>(c.count));
  sgd_kernel<<<grid, kThreads, 0, c.stream>>>(c);
  KILN_CUDA_CHECK_LAUNCH("SGD step");
}

}  // namespace kiln::cuda
