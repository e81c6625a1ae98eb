// Sums over the middle dim of a dense [outer, R, inner] tensor (sum and mean
// of any dims: src/cuda/ops.cpp brings the reduced dims together first).
//
// inner == 1 (rows): a block per (row, chunk) with warp-shuffle reduction;
// long rows with few of them are cut into chunks whose partial sums a second
// pass adds up, so a full reduction still fills the GPU. inner > 1
// (columns): a thread per output, reading coalesced across inner.
// Accumulation is in double for floating point (the loads, not the adds,
// bound these kernels) and int64 for integers.
#include "cuda/loop.cuh"

namespace kiln::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMinChunk = 16384;  // elements a block reduces before a row is cut

template <typename T>
using Acc = std::conditional_t<std::is_floating_point_v<T>, double, int64_t>;

template <typename A>
__device__ inline A block_sum(A v) {
  __shared__ A warp_sums[kThreads / 32];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  v = threadIdx.x < kThreads / 32 ? warp_sums[threadIdx.x] : A(0);
  if (warp == 0)
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  return v;
}

// out[row * chunks + chunk] = scale * sum of the chunk's part of in[row, :].
template <typename In, typename Out>
__global__ void row_sum_kernel(const In* in, Out* out, int64_t rows, int64_t len, int64_t chunks, double scale) {
  using A = Acc<In>;
  const int64_t chunk_len = (len + chunks - 1) / chunks;
  for (int64_t task = blockIdx.x; task < rows * chunks; task += gridDim.x) {
    const int64_t row = task / chunks, chunk = task % chunks;
    const int64_t begin = chunk * chunk_len;
    const int64_t end = begin + chunk_len < len ? begin + chunk_len : len;
    const In* p = in + row * len;
    A acc = 0;
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) acc += static_cast<A>(p[i]);
    acc = block_sum(acc);
    if (threadIdx.x == 0) out[task] = scale == 1.0 ? static_cast<Out>(acc) : static_cast<Out>(static_cast<double>(acc) * scale);
    __syncthreads();  // warp_sums is reused by the next task
  }
}

template <typename T>
__global__ void column_sum_kernel(const T* in, T* out, int64_t outer, int64_t len, int64_t inner, double scale) {
  using A = Acc<T>;
  const int64_t n = outer * inner;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < n; idx += step) {
    const int64_t o = idx / inner, i = idx % inner;
    const T* p = in + o * len * inner + i;
    A acc = 0;
    for (int64_t r = 0; r < len; ++r) acc += static_cast<A>(p[r * inner]);
    out[idx] = scale == 1.0 ? static_cast<T>(acc) : static_cast<T>(static_cast<double>(acc) * scale);
  }
}

int64_t chunks_for(const ReduceCall& c) {
  if (c.inner != 1) return 1;
  const int64_t want_blocks = static_cast<int64_t>(c.num_sms) * 4;
  if (c.outer >= want_blocks || c.reduced < 2 * kMinChunk) return 1;
  int64_t chunks = (want_blocks + c.outer - 1) / c.outer;
  const int64_t max_chunks = c.reduced / kMinChunk;
  return chunks < max_chunks ? chunks : max_chunks;
}

unsigned grid_for(int64_t tasks, int num_sms) {
  const int64_t cap = static_cast<int64_t>(num_sms) * 32;
  return static_cast<unsigned>(tasks < cap ? (tasks > 0 ? tasks : 1) : cap);
}

template <typename T>
void sum_typed(const ReduceCall& c) {
  const T* in = static_cast<const T*>(c.in);
  T* out = static_cast<T*>(c.out);
  const int64_t n_out = c.outer * c.inner;
  if (n_out == 0) return;
  if (c.inner != 1) {
    const int64_t blocks = (n_out + kThreads - 1) / kThreads;
    column_sum_kernel<T><<<grid_for(blocks, c.num_sms), kThreads, 0, c.stream>>>(in, out, c.outer, c.reduced,
                                                                                   c.inner, c.scale);
    KILN_CUDA_CHECK_LAUNCH("sum kernel (columns)");
    return;
  }
  const int64_t chunks = chunks_for(c);
  if (chunks == 1) {
    row_sum_kernel<T, T><<<grid_for(c.outer, c.num_sms), kThreads, 0, c.stream>>>(in, out, c.outer, c.reduced, 1,
                                                                                   c.scale);
    KILN_CUDA_CHECK_LAUNCH("sum kernel (rows)");
    return;
  }
  using A = Acc<T>;
  A* partial = static_cast<A*>(c.scratch);
  row_sum_kernel<T, A><<<grid_for(c.outer * chunks, c.num_sms), kThreads, 0, c.stream>>>(in, partial, c.outer,
                                                                                         c.reduced, chunks, 1.0);
  KILN_CUDA_CHECK_LAUNCH("sum kernel (row chunks)");
  row_sum_kernel<A, T><<<grid_for(c.outer, c.num_sms), kThreads, 0, c.stream>>>(partial, out, c.outer, chunks, 1,
                                                                                c.scale);
  KILN_CUDA_CHECK_LAUNCH("sum kernel (chunk totals)");
}

}  // namespace

size_t reduce_scratch_bytes(const ReduceCall& c) {
  const int64_t chunks = chunks_for(c);
  return chunks == 1 ? 0 : static_cast<size_t>(c.outer * chunks) * 8;
}

void launch_sum(const ReduceCall& c) {
  switch (c.dtype) {
    case Scalar::Float32: return sum_typed<float>(c);
    case Scalar::Float64: return sum_typed<double>(c);
    case Scalar::Int64: return sum_typed<int64_t>(c);
    default: KILN_CUDA_CHECK(cudaErrorNotSupported, "sum kernel: dtype must be float32, float64 or int64");
  }
}

}  // namespace kiln::cuda
