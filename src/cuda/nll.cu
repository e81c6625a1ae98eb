// nll_loss and its backward on CUDA. One block counts the non-ignored
// targets, checks them (a bad target is recorded for the host to report:
// kernels cannot throw) and, for mean/sum, adds up the loss; the elementwise
// parts (reduction none, the backward's scatter) run over a grid.
#include <algorithm>

#include "cuda/loop.cuh"

namespace kiln::cuda {
namespace {

constexpr int kThreads = 256;

template <typename A>
__device__ inline A block_sum(A v) {
  __shared__ A vals[kThreads / 32];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  if (threadIdx.x % 32 == 0) vals[threadIdx.x / 32] = v;
  __syncthreads();
  A r = 0;
  if (threadIdx.x == 0)
    for (int w = 0; w < kThreads / 32; ++w) r += vals[w];
  return r;  // valid in thread 0
}

__device__ inline bool valid_target(const NllCall& c, int64_t t) {
  if (t == c.ignore_index) return false;
  if (t < 0 || t >= c.C) {
    c.check[1] = t;
    c.check[0] = 1;
    return false;
  }
  return true;
}

// Thread 0 writes check[2] = count and, when `reduce`, out[0] = the loss.
template <typename T>
__global__ void nll_count_kernel(NllCall c, bool reduce) {
  const T* lp = static_cast<const T*>(c.log_probs);
  double total = 0;
  int64_t count = 0;
  for (int64_t i = threadIdx.x; i < c.N * c.S; i += blockDim.x) {
    const int64_t t = c.target[i];
    if (!valid_target(c, t)) continue;
    ++count;
    if (reduce) total -= static_cast<double>(lp[((i / c.S) * c.C + t) * c.S + i % c.S]);
  }
  total = block_sum(total);
  __syncthreads();
  count = block_sum(count);
  if (threadIdx.x == 0) {
    c.check[2] = count;
    if (reduce) {
      if (c.reduction == 1) total = count == 0 ? __longlong_as_double(0x7ff8000000000000LL) : total / count;
      static_cast<T*>(c.out)[0] = static_cast<T>(total);
    }
  }
}

template <typename T>
__global__ void nll_none_kernel(NllCall c) {
  const T* lp = static_cast<const T*>(c.log_probs);
  const int64_t n = c.N * c.S, step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    const int64_t t = c.target[i];
    static_cast<T*>(c.out)[i] = valid_target(c, t) ? -lp[((i / c.S) * c.C + t) * c.S + i % c.S] : T(0);
  }
}

template <typename T>
__global__ void nll_backward_kernel(NllCall c) {
  const T* g = static_cast<const T*>(c.grad);
  T* out = static_cast<T*>(c.out);
  const T scale = c.reduction == 1 ? T(1) / static_cast<T>(c.check[2]) : T(1);
  const int64_t n = c.N * c.S, step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    const int64_t t = c.target[i];
    if (!valid_target(c, t)) continue;
    const T gv = c.reduction == 0 ? g[i] : g[0];
    out[((i / c.S) * c.C + t) * c.S + i % c.S] = -gv * scale;
  }
}

template <typename T>
void run(const NllCall& c) {
  const int64_t n = c.N * c.S;
  const unsigned blocks = static_cast<unsigned>(
      std::min<int64_t>(std::max<int64_t>((n + kThreads - 1) / kThreads, 1), int64_t{multiprocessor_count()} * 8));
  if (c.backward) {
    nll_count_kernel<T><<<1, kThreads, 0, c.stream>>>(c, false);
    nll_backward_kernel<T><<<blocks, kThreads, 0, c.stream>>>(c);
  } else if (c.reduction == 0) {
    nll_none_kernel<T><<<blocks, kThreads, 0, c.stream>>>(c);
  } else {
    nll_count_kernel<T><<<1, kThreads, 0, c.stream>>>(c, true);
  }
  KILN_CUDA_CHECK_LAUNCH("nll_loss kernel");
}

}  // namespace

void launch_nll(const NllCall& c) {
  if (c.dtype == Scalar::Float64) run<double>(c);
  else run<float>(c);
}

}  // namespace kiln::cuda
