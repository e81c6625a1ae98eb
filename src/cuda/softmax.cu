// softmax and log_softmax over the middle dim D of a dense [outer, D, inner]
// tensor, and their backward ops. inner == 1 (the usual last-dim softmax): a
// block per row, three passes over the row in registers' reach (max, sum of
// exp, write). inner > 1: a thread per (outer, inner) column.
#include "cuda/loop.cuh"

namespace kiln::cuda {
namespace {

constexpr int kThreads = 256;

__device__ inline float fexp(float x) { return expf(x); }
__device__ inline double fexp(double x) { return ::exp(x); }
__device__ inline float flog(float x) { return logf(x); }
__device__ inline double flog(double x) { return ::log(x); }

template <typename T, bool IsMax>
__device__ inline T block_all_reduce(T v) {
  __shared__ T vals[kThreads / 32];
  __shared__ T total;
  auto op = [](T a, T b) { return IsMax ? (b > a || isnan(b) ? b : a) : a + b; };
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_down_sync(0xffffffffu, v, o));
  if (threadIdx.x % 32 == 0) vals[threadIdx.x / 32] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    T r = vals[0];
    for (int w = 1; w < kThreads / 32; ++w) r = op(r, vals[w]);
    total = r;
  }
  __syncthreads();
  T r = total;
  __syncthreads();  // vals/total are reused by the next call
  return r;
}

template <typename T, bool Log>
__global__ void softmax_rows(const T* x, T* y, int64_t rows, int64_t D) {
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + row * D;
    T* yr = y + row * D;
    T m = -INFINITY;
    for (int64_t i = threadIdx.x; i < D; i += blockDim.x) m = (xr[i] > m || isnan(xr[i])) ? xr[i] : m;
    m = block_all_reduce<T, true>(m);
    T s = 0;
    for (int64_t i = threadIdx.x; i < D; i += blockDim.x) s += fexp(xr[i] - m);
    s = block_all_reduce<T, false>(s);
    if constexpr (Log) {
      const T ls = flog(s);
      for (int64_t i = threadIdx.x; i < D; i += blockDim.x) yr[i] = xr[i] - m - ls;
    } else {
      const T inv = T(1) / s;
      for (int64_t i = threadIdx.x; i < D; i += blockDim.x) yr[i] = fexp(xr[i] - m) * inv;
    }
  }
}

template <typename T, bool Log>
__global__ void softmax_backward_rows(const T* g, const T* y, T* out, int64_t rows, int64_t D) {
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* gr = g + row * D;
    const T* yr = y + row * D;
    T* o = out + row * D;
    T s = 0;
    for (int64_t i = threadIdx.x; i < D; i += blockDim.x) s += Log ? gr[i] : gr[i] * yr[i];
    s = block_all_reduce<T, false>(s);
    for (int64_t i = threadIdx.x; i < D; i += blockDim.x) o[i] = Log ? gr[i] - fexp(yr[i]) * s : yr[i] * (gr[i] - s);
  }
}

template <typename T, bool Log>
__global__ void softmax_columns(const T* x, T* y, int64_t outer, int64_t D, int64_t inner) {
  const int64_t n = outer * inner, step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < n; idx += step) {
    const int64_t base = (idx / inner) * D * inner + idx % inner;
    T m = -INFINITY;
    for (int64_t r = 0; r < D; ++r) {
      const T v = x[base + r * inner];
      m = (v > m || isnan(v)) ? v : m;
    }
    T s = 0;
    for (int64_t r = 0; r < D; ++r) s += fexp(x[base + r * inner] - m);
    const T ls = flog(s), inv = T(1) / s;
    for (int64_t r = 0; r < D; ++r) {
      const T v = x[base + r * inner] - m;
      y[base + r * inner] = Log ? v - ls : fexp(v) * inv;
    }
  }
}

template <typename T, bool Log>
__global__ void softmax_backward_columns(const T* g, const T* y, T* out, int64_t outer, int64_t D, int64_t inner) {
  const int64_t n = outer * inner, step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < n; idx += step) {
    const int64_t base = (idx / inner) * D * inner + idx % inner;
    T s = 0;
    for (int64_t r = 0; r < D; ++r) {
      const int64_t k = base + r * inner;
      s += Log ? g[k] : g[k] * y[k];
    }
    for (int64_t r = 0; r < D; ++r) {
      const int64_t k = base + r * inner;
      out[k] = Log ? g[k] - fexp(y[k]) * s : y[k] * (g[k] - s);
    }
  }
}

unsigned grid(int64_t tasks) {
  const int64_t cap = static_cast<int64_t>(multiprocessor_count()) * 32;
  return static_cast<unsigned>(tasks < 1 ? 1 : tasks < cap ? tasks : cap);
}

template <typename T, bool Log>
void run(const SoftmaxCall& c) {
  const T* x = static_cast<const T*>(c.x);
  const T* g = static_cast<const T*>(c.grad);
  T* out = static_cast<T*>(c.out);
  if (c.outer * c.dim * c.inner == 0) return;
  if (c.inner == 1) {
    if (c.backward) softmax_backward_rows<T, Log><<<grid(c.outer), kThreads, 0, c.stream>>>(g, x, out, c.outer, c.dim);
    else softmax_rows<T, Log><<<grid(c.outer), kThreads, 0, c.stream>>>(x, out, c.outer, c.dim);
  } else {
    const int64_t blocks = (c.outer * c.inner + kThreads - 1) / kThreads;
    if (c.backward)
      softmax_backward_columns<T, Log><<<grid(blocks), kThreads, 0, c.stream>>>(g, x, out, c.outer, c.dim, c.inner);
    else
      softmax_columns<T, Log><<<grid(blocks), kThreads, 0, c.stream>>>(x, out, c.outer, c.dim, c.inner);
  }
  KILN_CUDA_CHECK_LAUNCH("softmax kernel");
}

}  // namespace

void launch_softmax(const SoftmaxCall& c) {
  if (c.dtype == Scalar::Float64) {
    if (c.log) run<double, true>(c);
    else run<double, false>(c);
  } else {
    if (c.log) run<float, true>(c);
    else run<float, false>(c);
  }
}

}  // namespace kiln::cuda
