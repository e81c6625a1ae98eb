// argmax over the middle dim of a dense [outer, D, inner] tensor: a block per
// row when inner == 1 (a (value, index) pair reduced across the block), a
// thread per output otherwise.
#include "cuda/loop.cuh"

namespace kiln::cuda {
namespace {

constexpr int kThreads = 256;

template <typename T>
__device__ inline bool is_nan(T v) {
  if constexpr (std::is_floating_point_v<T>) return isnan(v);
  else return false;
}

// Whether (v, i) beats (best, bi): NaN first, then the larger value, then the
// lower index (so the result is the first maximum whatever the order).
template <typename T>
__device__ inline bool beats(T v, int64_t i, T best, int64_t bi) {
  const bool vn = is_nan(v), bn = is_nan(best);
  if (vn || bn) return vn && (!bn || i < bi);
  return v > best || (v == best && i < bi);
}

template <typename T>
__global__ void argmax_rows(const T* in, int64_t* out, int64_t rows, int64_t D) {
  __shared__ T vals[kThreads];
  __shared__ int64_t idx[kThreads];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* p = in + row * D;
    T best = p[0];
    int64_t bi = 0;
    for (int64_t i = threadIdx.x; i < D; i += blockDim.x)
      if (beats(p[i], i, best, bi)) best = p[i], bi = i;
    vals[threadIdx.x] = best;
    idx[threadIdx.x] = bi;
    __syncthreads();
    for (int s = kThreads / 2; s > 0; s >>= 1) {
      if (threadIdx.x < s && beats(vals[threadIdx.x + s], idx[threadIdx.x + s], vals[threadIdx.x], idx[threadIdx.x])) {
        vals[threadIdx.x] = vals[threadIdx.x + s];
        idx[threadIdx.x] = idx[threadIdx.x + s];
      }
      __syncthreads();
    }
    if (threadIdx.x == 0) out[row] = idx[0];
    __syncthreads();
  }
}

template <typename T>
__global__ void argmax_columns(const T* in, int64_t* out, int64_t outer, int64_t D, int64_t inner) {
  const int64_t n = outer * inner, step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t o = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; o < n; o += step) {
    const T* p = in + (o / inner) * D * inner + o % inner;
    T best = p[0];
    int64_t bi = 0;
    for (int64_t r = 1; r < D; ++r)
      if (beats(p[r * inner], r, best, bi)) best = p[r * inner], bi = r;
    out[o] = bi;
  }
}

template <typename T>
void run(const ArgmaxCall& c) {
  if (c.outer * c.inner == 0 || c.dim == 0) return;
  const int64_t cap = int64_t{multiprocessor_count()} * 32;
  const T* in = static_cast<const T*>(c.in);
  if (c.inner == 1) {
    const unsigned grid = static_cast<unsigned>(c.outer < cap ? c.outer : cap);
    argmax_rows<T><<<grid, kThreads, 0, c.stream>>>(in, c.out, c.outer, c.dim);
  } else {
    const int64_t blocks = (c.outer * c.inner + kThreads - 1) / kThreads;
    argmax_columns<T><<<static_cast<unsigned>(blocks < cap ? blocks : cap), kThreads, 0, c.stream>>>(
        in, c.out, c.outer, c.dim, c.inner);
  }
  KILN_CUDA_CHECK_LAUNCH("argmax kernel");
}

}  // namespace

void launch_argmax(const ArgmaxCall& c) {
  switch (c.dtype) {
    case Scalar::Float64: return run<double>(c);
    case Scalar::Int64: return run<int64_t>(c);
    default: return run<float>(c);
  }
}

}  // namespace kiln::cuda
