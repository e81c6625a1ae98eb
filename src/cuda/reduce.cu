// Reductions (sum, max, min) over the middle dim of a dense [outer, R, inner]
// tensor (sum, mean, amax and amin of any dims: src/cuda/ops.cpp brings the
// reduced dims together first).
//
// inner == 1 (rows): a block per (row, chunk) with warp-shuffle reduction;
// long rows with few of them are cut into chunks whose partial results a
// second pass combines, so a full reduction still fills the GPU. inner > 1
// (columns): a thread per output, reading coalesced across inner. Sums
// accumulate in double for floating point (the loads, not the adds, bound
// these kernels) and int64 for integers; max and min let NaN win, as the CPU.
#include <limits>

#include "cuda/loop.cuh"

namespace kiln::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMinChunk = 16384;  // elements a block reduces before a row is cut

template <ReduceOp Op, typename T>
struct Reducer {
  using A = std::conditional_t<Op != ReduceOp::Sum, T, std::conditional_t<std::is_floating_point_v<T>, double, int64_t>>;
  __device__ static A identity() {
    if constexpr (Op == ReduceOp::Sum) return A(0);
    else if constexpr (std::is_floating_point_v<A>)
      return Op == ReduceOp::Max ? -std::numeric_limits<A>::infinity() : std::numeric_limits<A>::infinity();
    else return Op == ReduceOp::Max ? std::numeric_limits<A>::lowest() : std::numeric_limits<A>::max();
  }
  __device__ static A combine(A a, A b) {
    if constexpr (Op == ReduceOp::Sum) {
      return a + b;
    } else {
      if constexpr (std::is_floating_point_v<A>) {
        if (isnan(a)) return a;
        if (isnan(b)) return b;
      }
      if constexpr (Op == ReduceOp::Max) return b > a ? b : a;
      else return b < a ? b : a;
    }
  }
  template <typename Out>
  __device__ static Out finish(A acc, double scale) {
    if constexpr (Op == ReduceOp::Sum)
      if (scale != 1.0) return static_cast<Out>(static_cast<double>(acc) * scale);
    return static_cast<Out>(acc);
  }
};

template <typename R, typename A>
__device__ inline A block_reduce(A v) {
  __shared__ A warp_vals[kThreads / 32];
  for (int o = 16; o > 0; o >>= 1) v = R::combine(v, __shfl_down_sync(0xffffffffu, v, o));
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) warp_vals[warp] = v;
  __syncthreads();
  v = threadIdx.x < kThreads / 32 ? warp_vals[threadIdx.x] : R::identity();
  if (warp == 0)
    for (int o = 16; o > 0; o >>= 1) v = R::combine(v, __shfl_down_sync(0xffffffffu, v, o));
  return v;
}

// out[row * chunks + chunk] = the reduction of the chunk's part of in[row, :].
template <ReduceOp Op, typename In, typename Out>
__global__ void row_reduce_kernel(const In* in, Out* out, int64_t rows, int64_t len, int64_t chunks, double scale) {
  using R = Reducer<Op, In>;
  using A = typename R::A;
  const int64_t chunk_len = (len + chunks - 1) / chunks;
  for (int64_t task = blockIdx.x; task < rows * chunks; task += gridDim.x) {
    const int64_t row = task / chunks, chunk = task % chunks;
    const int64_t begin = chunk * chunk_len;
    const int64_t end = begin + chunk_len < len ? begin + chunk_len : len;
    const In* p = in + row * len;
    A acc = R::identity();
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) acc = R::combine(acc, static_cast<A>(p[i]));
    acc = block_reduce<R>(acc);
    if (threadIdx.x == 0) out[task] = R::template finish<Out>(acc, scale);
    __syncthreads();  // warp_vals is reused by the next task
  }
}

template <ReduceOp Op, typename T>
__global__ void column_reduce_kernel(const T* in, T* out, int64_t outer, int64_t len, int64_t inner, double scale) {
  using R = Reducer<Op, T>;
  using A = typename R::A;
  const int64_t n = outer * inner;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < n; idx += step) {
    const int64_t o = idx / inner, i = idx % inner;
    const T* p = in + o * len * inner + i;
    A acc = R::identity();
    for (int64_t r = 0; r < len; ++r) acc = R::combine(acc, static_cast<A>(p[r * inner]));
    out[idx] = R::template finish<T>(acc, scale);
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

template <ReduceOp Op, typename T>
void reduce_typed(const ReduceCall& c) {
  const T* in = static_cast<const T*>(c.in);
  T* out = static_cast<T*>(c.out);
  const int64_t n_out = c.outer * c.inner;
  if (n_out == 0) return;
  if (c.inner != 1) {
    const int64_t blocks = (n_out + kThreads - 1) / kThreads;
    column_reduce_kernel<Op, T><<<grid_for(blocks, c.num_sms), kThreads, 0, c.stream>>>(in, out, c.outer, c.reduced,
                                                                                          c.inner, c.scale);
    KILN_CUDA_CHECK_LAUNCH("reduce kernel (columns)");
    return;
  }
  const int64_t chunks = chunks_for(c);
  if (chunks == 1) {
    row_reduce_kernel<Op, T, T><<<grid_for(c.outer, c.num_sms), kThreads, 0, c.stream>>>(in, out, c.outer, c.reduced,
                                                                                          1, c.scale);
    KILN_CUDA_CHECK_LAUNCH("reduce kernel (rows)");
    return;
  }
  using A = typename Reducer<Op, T>::A;
  A* partial = static_cast<A*>(c.scratch);
  row_reduce_kernel<Op, T, A><<<grid_for(c.outer * chunks, c.num_sms), kThreads, 0, c.stream>>>(
      in, partial, c.outer, c.reduced, chunks, 1.0);
  KILN_CUDA_CHECK_LAUNCH("reduce kernel (row chunks)");
  row_reduce_kernel<Op, A, T><<<grid_for(c.outer, c.num_sms), kThreads, 0, c.stream>>>(partial, out, c.outer, chunks,
                                                                                       1, c.scale);
  KILN_CUDA_CHECK_LAUNCH("reduce kernel (chunk totals)");
}

template <ReduceOp Op>
void reduce_op(const ReduceCall& c) {
  switch (c.dtype) {
    case Scalar::Float32: return reduce_typed<Op, float>(c);
    case Scalar::Float64: return reduce_typed<Op, double>(c);
    case Scalar::Int64: return reduce_typed<Op, int64_t>(c);
    default: KILN_CUDA_CHECK(cudaErrorNotSupported, "reduce kernel: dtype must be float32, float64 or int64");
  }
}

}  // namespace

size_t reduce_scratch_bytes(const ReduceCall& c) {
  const int64_t chunks = chunks_for(c);
  return chunks == 1 ? 0 : static_cast<size_t>(c.outer * chunks) * 8;
}

void launch_reduce(const ReduceCall& c) {
  switch (c.op) {
    case ReduceOp::Sum: return reduce_op<ReduceOp::Sum>(c);
    case ReduceOp::Max: return reduce_op<ReduceOp::Max>(c);
    case ReduceOp::Min: return reduce_op<ReduceOp::Min>(c);
  }
}

}  // namespace kiln::cuda
