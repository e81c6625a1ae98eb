// Batch norm kernels over dense [N, C, HW] tensors: per-channel sums in
// float64 (as the CPU kernels combine them, src/ops/norm.cpp), split over a
// grid of (channel, chunk) blocks so a few wide channels still fill the GPU,
// then one pointwise pass with per-channel coefficients.
#include "cuda/launch.cuh"

namespace kiln::cuda {
namespace {

// Chunks per channel: about four blocks per SM over all channels, each
// chunk at least a few thousand elements.
int64_t chunks_for(const BatchNormCall& c) {
  const int64_t per_channel = c.N * c.HW;
  int64_t chunks = (int64_t{c.num_sms} * 4 + c.C - 1) / c.C;
  const int64_t by_size = (per_channel + 4095) / 4096;
  if (chunks > by_size) chunks = by_size;
  if (chunks > 1024) chunks = 1024;
  return chunks < 1 ? 1 : chunks;
}

__device__ inline double block_sum(double v, double* shared) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  double r = 0;
  if (threadIdx.x == 0)
    for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w) r += shared[w];
  __syncthreads();
  return r;  // valid in thread 0
}

// Mode 0: sum x. Mode 1: sum (x - mean)^2. Mode 2: sum g and sum g (x - mean).
// Block (c, chunk) writes its partial sums to scratch[(mode 2: 2x) c * chunks + chunk].
template <typename T, int Mode>
__global__ void channel_sums_kernel(BatchNormCall c, int64_t chunks) {
  __shared__ double shared[kThreads / 32];
  const int64_t ch = blockIdx.x, chunk = blockIdx.y;
  const int64_t per_channel = c.N * c.HW;
  const int64_t len = (per_channel + chunks - 1) / chunks;
  const int64_t begin = chunk * len, end = begin + len < per_channel ? begin + len : per_channel;
  const T* x = static_cast<const T*>(c.x);
  const T* g = static_cast<const T*>(c.g);
  const double m = Mode == 0 ? 0.0 : c.mean[ch];
  double a = 0, b = 0;
  for (int64_t j = begin + threadIdx.x; j < end; j += blockDim.x) {
    const int64_t n = j / c.HW, i = j - n * c.HW;
    const int64_t at = (n * c.C + ch) * c.HW + i;
    const double v = convert<double>(x[at]);
    if constexpr (Mode == 0) {
      a += v;
    } else if constexpr (Mode == 1) {
      a += (v - m) * (v - m);
    } else {
      const double gv = convert<double>(g[at]);
      a += gv;
      b += gv * (v - m);
    }
  }
  a = block_sum(a, shared);
  if constexpr (Mode == 2) b = block_sum(b, shared);
  if (threadIdx.x == 0) {
    c.scratch[ch * chunks + chunk] = a;
    if constexpr (Mode == 2) c.scratch[(c.C + ch) * chunks + chunk] = b;
  }
}

// Adds the chunks of each channel: out0[c] = scale * sum of part 0, out1 of part 1.
__global__ void combine_kernel(const double* scratch, int64_t C, int64_t chunks, double scale, double* out0,
                               double* out1) {
  for (int64_t ch = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; ch < C;
       ch += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    double s = 0;
    for (int64_t k = 0; k < chunks; ++k) s += scratch[ch * chunks + k];
    out0[ch] = s * scale;
    if (out1) {
      double t = 0;
      for (int64_t k = 0; k < chunks; ++k) t += scratch[(C + ch) * chunks + k];
      out1[ch] = t * scale;
    }
  }
}

template <typename T>
__global__ void apply_kernel(BatchNormCall c, int64_t n) {
  const T* x = static_cast<const T*>(c.x);
  const T* g = static_cast<const T*>(c.g);
  T* out = static_cast<T*>(c.out);
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t ch = (i / c.HW) % c.C;
    using A = Acc<T>;
    const A xv = convert<A>(x[i]);
    const A k1 = static_cast<A>(c.k1[ch]);
    A r;
    if (g != nullptr) {
      r = k1 * convert<A>(g[i]) + static_cast<A>(c.k2[ch]) * xv + static_cast<A>(c.k3[ch]);
    } else {
      r = xv * k1 + static_cast<A>(c.k3[ch]);
    }
    out[i] = convert<T>(r);
  }
}

template <int Mode>
void run_sums(const BatchNormCall& c, double* out0, double* out1, double scale) {
  const int64_t chunks = chunks_for(c);
  dim3 grid(static_cast<unsigned>(c.C), static_cast<unsigned>(chunks));
  visit_float(c.dtype,
              [&]<typename T>() { channel_sums_kernel<T, Mode><<<grid, kThreads, 0, c.stream>>>(c, chunks); });
  KILN_CUDA_CHECK_LAUNCH("batch_norm");
  const unsigned blocks = static_cast<unsigned>((c.C + kThreads - 1) / kThreads);
  combine_kernel<<<blocks, kThreads, 0, c.stream>>>(c.scratch, c.C, chunks, scale, out0, out1);
  KILN_CUDA_CHECK_LAUNCH("batch_norm");
}

}  // namespace

int64_t batch_norm_scratch_doubles(const BatchNormCall& c) { return 2 * c.C * chunks_for(c); }

void launch_batch_norm_stats(const BatchNormCall& c) {
  const double inv = 1.0 / static_cast<double>(c.N * c.HW);
  run_sums<0>(c, c.mean, nullptr, inv);
  run_sums<1>(c, c.var, nullptr, inv);  // reads c.mean, written just before on the same stream
}

void launch_batch_norm_grad_sums(const BatchNormCall& c) { run_sums<2>(c, c.sum_g, c.sum_gd, 1.0); }

void launch_batch_norm_apply(const BatchNormCall& c) {
  const int64_t n = c.N * c.C * c.HW;
  if (n == 0) return;
  int64_t blocks = (n + kThreads - 1) / kThreads;
  const int64_t cap = int64_t{c.num_sms} * 16;
  if (blocks > cap) blocks = cap;
  visit_float(c.dtype, [&]<typename T>() {
    apply_kernel<T><<<static_cast<unsigned>(blocks), kThreads, 0, c.stream>>>(c, n);
  });
  KILN_CUDA_CHECK_LAUNCH("batch_norm");
}

}  // namespace kiln::cuda
