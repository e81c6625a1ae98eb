// Batch norm kernels over dense [N, C, HW] tensors (or channels-last [N, HW, C]): per-channel sums in
// float64 (as the CPU kernels combine them, src/ops/norm.cpp), split over a
// grid of (channel, chunk) blocks so a few wide channels still fill the GPU,
// a per-channel kernel that finishes the statistics and coefficients, then
// one pointwise pass with them: three launches per batch norm, each way.
#include <algorithm>
#include <cstdint>
#include <numeric>

#include "cuda/launch.cuh"

namespace kiln::cuda {
namespace {

// Channels-last sums read V = 16 / sizeof(T) consecutive channels of a row
// per thread (one 16-byte load: 8 bfloat16, 4 float32) when C % V == 0, else
// one. A block is `lanes` threads across the row (lanes * V channels, at most
// 32 lanes) times kThreads / lanes rows at a time.
template <typename T>
constexpr int kClVector = static_cast<int>(16 / sizeof(T));
int cl_vector(const BatchNormCall& c) {
  int v = 1;
  visit_float(c.dtype, [&]<typename T>() { v = c.C % kClVector<T> == 0 ? kClVector<T> : 1; });
  return v;
}
int cl_lanes(const BatchNormCall& c, int v) { return static_cast<int>(std::min<int64_t>(c.C / v, 32)); }
int64_t channel_groups(const BatchNormCall& c, int v) {
  const int64_t per_block = int64_t{cl_lanes(c, v)} * v;
  return (c.C + per_block - 1) / per_block;
}

// Chunks per channel: about four blocks per SM over all channels (channel
// groups when channels-last), each block summing at least 16K elements of
// each operand (a row-count floor starved the GPU where rows are wide: 32
// blocks for a 512-channel 4x4 layer at batch 512). The scratch is sized by
// it, so it depends on the shape and dtype only.
int64_t chunks_for(const BatchNormCall& c) {
  constexpr int64_t kMinElements = 16384;
  const int64_t per_channel = c.N * c.HW;
  int64_t blocks_per_chunk = c.C, min_len = kMinElements;  // NCHW: a block sums one channel
  if (c.channels_last) {
    const int v = cl_vector(c);
    blocks_per_chunk = channel_groups(c, v);
    const int64_t width = std::min<int64_t>(int64_t{cl_lanes(c, v)} * v, c.C);
    min_len = (kMinElements + width - 1) / width;  // rows
  }
  int64_t chunks = (int64_t{c.num_sms} * 4 + blocks_per_chunk - 1) / blocks_per_chunk;
  chunks = std::min({chunks, (per_channel + min_len - 1) / min_len, int64_t{1024}});
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

__device__ inline double load_channel(const ChannelArray& a, int64_t i, double absent) {
  if (a.data == nullptr) return absent;
  switch (a.dtype) {
    case Scalar::Float16: return convert<double>(static_cast<const __half*>(a.data)[i]);
    case Scalar::BFloat16: return convert<double>(static_cast<const __nv_bfloat16*>(a.data)[i]);
    case Scalar::Float64: return static_cast<const double*>(a.data)[i];
    default: return static_cast<const float*>(a.data)[i];
  }
}

__device__ inline void store_channel(const ChannelArray& a, int64_t i, double v) {
  if (a.data == nullptr) return;
  switch (a.dtype) {
    case Scalar::Float16: static_cast<__half*>(a.data)[i] = convert<__half>(v); return;
    case Scalar::BFloat16: static_cast<__nv_bfloat16*>(a.data)[i] = convert<__nv_bfloat16>(v); return;
    case Scalar::Float64: static_cast<double*>(a.data)[i] = v; return;
    default: static_cast<float*>(a.data)[i] = static_cast<float>(v); return;
  }
}

// Mode 0: sum x and sum x^2. Mode 2: sum g and sum g (x - mean). Block (c,
// chunk) writes its partial sums to scratch[c * chunks + chunk] and
// scratch[(C + c) * chunks + chunk]. I is the index type: 32-bit when the
// tensor allows (64-bit division is a long instruction sequence per element).
template <typename T, int Mode, typename I>
__global__ void channel_sums_kernel(BatchNormCall c, ChannelArray mean, int64_t chunks) {
  __shared__ double shared[kThreads / 32];
  const I ch = static_cast<I>(blockIdx.x), chunk = static_cast<I>(blockIdx.y);
  const I HW = static_cast<I>(c.HW), C = static_cast<I>(c.C);
  const I per_channel = static_cast<I>(c.N) * HW;
  const I len = (per_channel + static_cast<I>(chunks) - 1) / static_cast<I>(chunks);
  const I begin = chunk * len, end = begin + len < per_channel ? begin + len : per_channel;
  const T* x = static_cast<const T*>(c.x);
  const T* g = static_cast<const T*>(c.g);
  const double m = Mode == 0 ? 0.0 : load_channel(mean, ch, 0.0);
  double a = 0, b = 0;
  for (I j = begin + static_cast<I>(threadIdx.x); j < end; j += static_cast<I>(blockDim.x)) {
    const I n = j / HW, i = j - n * HW;
    const I at = (n * C + ch) * HW + i;
    const double v = convert<double>(x[at]);
    if constexpr (Mode == 0) {
      a += v;
      b += v * v;
    } else {
      const double gv = convert<double>(g[at]);
      a += gv;
      b += gv * (v - m);
    }
  }
  a = block_sum(a, shared);
  b = block_sum(b, shared);
  if (threadIdx.x == 0) {
    c.scratch[static_cast<int64_t>(ch) * chunks + chunk] = a;
    c.scratch[(c.C + ch) * chunks + chunk] = b;
  }
}

// The channels-last version: x is [M = N * HW, C] in memory; block (group,
// chunk) sums the rows of its chunk for lanes * V consecutive channels, each
// thread V channels of one row per step (a 16-byte load when V > 1), the
// row lanes combined in shared memory. Same scratch layout as
// channel_sums_kernel. (One 2-byte load per thread and step, 32 channels a
// block, made ResNet-18's bf16 batch norms 2-3x slower than their bytes
// allow on an H100.)
template <typename T, int Mode, typename I, int V>
__global__ void channel_sums_cl_kernel(BatchNormCall c, ChannelArray mean, int64_t chunks, int lanes) {
  struct alignas(sizeof(T) * V) Vec {
    T v[V];
  };
  __shared__ double sa[kThreads * V], sb[kThreads * V];
  const int row_lanes = kThreads / lanes;
  const int lane_c = static_cast<int>(threadIdx.x) % lanes, lane_r = static_cast<int>(threadIdx.x) / lanes;
  const I C = static_cast<I>(c.C);
  const I width = static_cast<I>(lanes) * V;  // channels of the block
  const I ch0 = static_cast<I>(blockIdx.x) * width + static_cast<I>(lane_c) * V;
  const I chunk = static_cast<I>(blockIdx.y);
  const I rows = static_cast<I>(c.N) * static_cast<I>(c.HW);
  const I len = (rows + static_cast<I>(chunks) - 1) / static_cast<I>(chunks);
  const I begin = chunk * len, end = begin + len < rows ? begin + len : rows;
  double a[V] = {}, b[V] = {};
  if (lane_r < row_lanes && ch0 < C) {
    const T* x = static_cast<const T*>(c.x) + ch0;
    const T* g = static_cast<const T*>(c.g) + ch0;
    double m[V];
#pragma unroll
    for (int j = 0; j < V; ++j) m[j] = Mode == 0 ? 0.0 : load_channel(mean, ch0 + static_cast<I>(j), 0.0);
#pragma unroll 4
    for (I r = begin + static_cast<I>(lane_r); r < end; r += static_cast<I>(row_lanes)) {
      const Vec xv = *reinterpret_cast<const Vec*>(x + r * C);
      if constexpr (Mode == 0) {
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const double v = convert<double>(xv.v[j]);
          a[j] += v;
          b[j] += v * v;
        }
      } else {
        const Vec gv = *reinterpret_cast<const Vec*>(g + r * C);
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const double gj = convert<double>(gv.v[j]);
          a[j] += gj;
          b[j] += gj * (convert<double>(xv.v[j]) - m[j]);
        }
      }
    }
  }
  if (lane_r < row_lanes) {
#pragma unroll
    for (int j = 0; j < V; ++j) {
      sa[lane_r * width + lane_c * V + j] = a[j];
      sb[lane_r * width + lane_c * V + j] = b[j];
    }
  }
  __syncthreads();
  for (int k = static_cast<int>(threadIdx.x); k < static_cast<int>(width); k += kThreads) {
    const I ch = static_cast<I>(blockIdx.x) * width + static_cast<I>(k);
    if (ch >= C) continue;
    double s0 = 0, s1 = 0;
    for (int r = 0; r < row_lanes; ++r) {
      s0 += sa[r * width + k];
      s1 += sb[r * width + k];
    }
    c.scratch[static_cast<int64_t>(ch) * chunks + chunk] = s0;
    c.scratch[(c.C + ch) * chunks + chunk] = s1;
  }
}

// The totals of channel ch's chunks, summed by the 32 lanes of a warp and
// valid in every lane (one thread per channel walking a thousand chunks in
// a row was a serial chain of L2 reads per batch norm).
__device__ inline void channel_totals(const double* scratch, int64_t C, int64_t chunks, int64_t ch, double* s0,
                                      double* s1) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  double a = 0, b = 0;
  for (int64_t k = lane; k < chunks; k += 32) {
    a += scratch[ch * chunks + k];
    b += scratch[(C + ch) * chunks + k];
  }
  for (int o = 16; o > 0; o >>= 1) {
    a += __shfl_xor_sync(0xffffffffu, a, o);
    b += __shfl_xor_sync(0xffffffffu, b, o);
  }
  *s0 = a;
  *s1 = b;
}

// The finish kernels run one warp per channel; lane 0 writes.
__device__ inline int64_t warp_channel() { return (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32; }

// One warp per channel: the statistics (training: from the sums; eval:
// the running ones), the running-stat update (PyTorch's rule: running =
// (1 - momentum) running + momentum batch, with the unbiased variance, in
// place as the CPU kernel does), save_mean/save_invstd, and the apply
// coefficients k1 = invstd * weight, k3 = bias - mean * k1.
__global__ void finish_forward_kernel(BatchNormCall c, BatchNormFinish f, int64_t chunks, double* k1, double* k3) {
  const double count = static_cast<double>(c.N * c.HW);
  const int64_t ch = warp_channel();
  if (ch >= c.C) return;
  double s = 0, q = 0;
  if (f.training) channel_totals(c.scratch, c.C, chunks, ch, &s, &q);
  if (threadIdx.x % 32 != 0) return;
  double mean, var;
  if (f.training) {
    mean = s / count;
    var = q / count - mean * mean;
    if (var < 0) var = 0;
    if (f.running_mean.data != nullptr)
      store_channel(f.running_mean, ch, (1.0 - f.momentum) * load_channel(f.running_mean, ch, 0.0) + f.momentum * mean);
    if (f.running_var.data != nullptr)
      store_channel(f.running_var, ch,
                    (1.0 - f.momentum) * load_channel(f.running_var, ch, 1.0) +
                        var * (f.momentum * count / (count - 1.0)));
  } else {
    mean = load_channel(f.running_mean, ch, 0.0);
    var = load_channel(f.running_var, ch, 1.0);
  }
  const double invstd = 1.0 / sqrt(var + f.eps);
  const double scale = invstd * load_channel(f.weight, ch, 1.0);
  k1[ch] = scale;
  k3[ch] = load_channel(f.bias, ch, 0.0) - mean * scale;
  store_channel(f.save_mean, ch, mean);
  store_channel(f.save_invstd, ch, invstd);
}

// One warp per channel: grad_weight = sum g (x - mean) invstd, grad_bias =
// sum g, and grad_x = k1 g + k2 x + k3 (the CPU kernel's coefficients; eval:
// k2 = k3 = 0).
__global__ void finish_backward_kernel(BatchNormCall c, BatchNormFinish f, int64_t chunks, double* k1, double* k2,
                                       double* k3) {
  const double cnt = static_cast<double>(c.N * c.HW);
  const int64_t ch = warp_channel();
  if (ch >= c.C) return;
  double sum_g, sum_gd;
  channel_totals(c.scratch, c.C, chunks, ch, &sum_g, &sum_gd);
  if (threadIdx.x % 32 != 0) return;
  const double mean = load_channel(f.save_mean, ch, 0.0), invstd = load_channel(f.save_invstd, ch, 1.0);
  const double a = invstd * load_channel(f.weight, ch, 1.0);
  k1[ch] = a;
  if (f.training) {
    const double b = invstd * invstd * invstd * load_channel(f.weight, ch, 1.0) * sum_gd / -cnt;
    k2[ch] = b;
    k3[ch] = a * sum_g / -cnt - mean * b;
  } else {
    k2[ch] = 0;
    k3[ch] = 0;
  }
  store_channel(f.grad_weight, ch, sum_gd * invstd);
  store_channel(f.grad_bias, ch, sum_g);
}

// How the apply pass finds an element's channel: NCHW, (e / HW) % C per
// vector; channels-last, e % C per vector, or once per thread when the grid
// stride is a multiple of C (the launcher sizes the grid so): a thread then
// keeps the same V channels and their coefficients in registers.
enum class ApplyLayout { Nchw, ClStrided, ClFixed };

// The apply pass: out = k1*g + k2*x + k3 (backward) or x*k1 + k3 (forward)
// per channel, V elements per thread and iteration. V = 16 / sizeof(T) gives
// 16-byte loads and stores (8 bfloat16, 4 float32) where the layout allows:
// channels-last with C % V == 0 (V consecutive channels of one pixel), NCHW
// with HW % V == 0 (V pixels of one channel); V = 1 otherwise. (With one
// element per thread ResNet-18's bf16 channels-last eval batch norm took 46 us
// of CUDA time a call on an H100, torch's apply kernel 34; reading the V
// channels' three float64 coefficients per vector, 24 loads per 16 bytes of
// data, is what ClFixed avoids.)
template <typename T, typename I, ApplyLayout L, int V>
__global__ void apply_kernel(BatchNormCall c, I nv) {
  struct alignas(sizeof(T) * V) Vec {
    T v[V];
  };
  const Vec* x = static_cast<const Vec*>(c.x);
  const Vec* g = static_cast<const Vec*>(c.g);
  Vec* out = static_cast<Vec*>(c.out);
  const I HW = static_cast<I>(c.HW), C = static_cast<I>(c.C);
  using A = Acc<T>;
  const I first = static_cast<I>(blockIdx.x) * static_cast<I>(blockDim.x) + static_cast<I>(threadIdx.x);
  A k1[V], k2[V], k3[V];
  // Channels-last with V > 1: V consecutive channels from ch0 (a multiple of
  // V, so even: 16-byte double2 loads, half the load instructions; with one
  // or two vectors a thread, as in ResNet-18's 256- and 512-channel layers,
  // these loads were most of the pass).
  auto load_coefficients = [&](I ch0) {
    if constexpr (L != ApplyLayout::Nchw && V % 2 == 0) {
#pragma unroll
      for (int j = 0; j < V; j += 2) {
        const double2 a = *reinterpret_cast<const double2*>(c.k1 + ch0 + j);
        const double2 b = g != nullptr ? *reinterpret_cast<const double2*>(c.k2 + ch0 + j) : double2{0, 0};
        const double2 d = *reinterpret_cast<const double2*>(c.k3 + ch0 + j);
        k1[j] = static_cast<A>(a.x), k1[j + 1] = static_cast<A>(a.y);
        k2[j] = static_cast<A>(b.x), k2[j + 1] = static_cast<A>(b.y);
        k3[j] = static_cast<A>(d.x), k3[j + 1] = static_cast<A>(d.y);
      }
    } else {
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const I ch = L == ApplyLayout::Nchw ? ch0 : ch0 + static_cast<I>(j);
        k1[j] = static_cast<A>(c.k1[ch]);
        k2[j] = g != nullptr ? static_cast<A>(c.k2[ch]) : A(0);
        k3[j] = static_cast<A>(c.k3[ch]);
      }
    }
  };
  if constexpr (L == ApplyLayout::ClFixed) {
    if (first < nv) load_coefficients((first * static_cast<I>(V)) % C);
  }
  for (I i = first; i < nv; i += static_cast<I>(gridDim.x) * static_cast<I>(blockDim.x)) {
    const I e = i * static_cast<I>(V);
    if constexpr (L == ApplyLayout::Nchw) load_coefficients((e / HW) % C);
    if constexpr (L == ApplyLayout::ClStrided) load_coefficients(e % C);
    const Vec xv = x[i];
    Vec gv{};
    if (g != nullptr) gv = g[i];
    Vec o;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const A xj = convert<A>(xv.v[j]);
      A r;
      if (g != nullptr) {
        r = k1[j] * convert<A>(gv.v[j]) + k2[j] * xj + k3[j];
      } else {
        r = xj * k1[j] + k3[j];
      }
      o.v[j] = convert<T>(r);
    }
    out[i] = o;
  }
}

bool fits_int32(const BatchNormCall& c) { return c.N * c.C * c.HW < (int64_t{1} << 31); }

template <int Mode>
void run_sums(const BatchNormCall& c, const ChannelArray& mean) {
  const int64_t chunks = chunks_for(c);
  if (c.channels_last) {
    visit_float(c.dtype, [&]<typename T>() {
      auto launch = [&]<int V>() {
        const int lanes = cl_lanes(c, V);
        dim3 grid(static_cast<unsigned>(channel_groups(c, V)), static_cast<unsigned>(chunks));
        if (fits_int32(c))
          channel_sums_cl_kernel<T, Mode, uint32_t, V><<<grid, kThreads, 0, c.stream>>>(c, mean, chunks, lanes);
        else
          channel_sums_cl_kernel<T, Mode, int64_t, V><<<grid, kThreads, 0, c.stream>>>(c, mean, chunks, lanes);
      };
      if (cl_vector(c) > 1 && aligned16(c.x) && aligned16(c.g))
        launch.template operator()<kClVector<T>>();
      else
        launch.template operator()<1>();
    });
    KILN_CUDA_CHECK_LAUNCH("batch_norm");
    return;
  }
  dim3 grid(static_cast<unsigned>(c.C), static_cast<unsigned>(chunks));
  visit_float(c.dtype, [&]<typename T>() {
    if (fits_int32(c))
      channel_sums_kernel<T, Mode, uint32_t><<<grid, kThreads, 0, c.stream>>>(c, mean, chunks);
    else
      channel_sums_kernel<T, Mode, int64_t><<<grid, kThreads, 0, c.stream>>>(c, mean, chunks);
  });
  KILN_CUDA_CHECK_LAUNCH("batch_norm");
}

// Blocks for the finish kernels: one warp per channel.
unsigned channel_blocks(const BatchNormCall& c) {
  return static_cast<unsigned>((c.C * 32 + kThreads - 1) / kThreads);
}

}  // namespace

int64_t batch_norm_scratch_doubles(const BatchNormCall& c) { return 2 * c.C * chunks_for(c); }

void launch_batch_norm_forward(const BatchNormCall& c, const BatchNormFinish& f, double* k1, double* k3) {
  if (f.training) run_sums<0>(c, ChannelArray{});
  finish_forward_kernel<<<channel_blocks(c), kThreads, 0, c.stream>>>(c, f, chunks_for(c), k1, k3);
  KILN_CUDA_CHECK_LAUNCH("batch_norm");
  BatchNormCall a = c;
  a.k1 = k1;
  a.k3 = k3;
  launch_batch_norm_apply(a);
}

void launch_batch_norm_backward(const BatchNormCall& c, const BatchNormFinish& f, double* k1, double* k2,
                                double* k3) {
  run_sums<2>(c, f.save_mean);
  finish_backward_kernel<<<channel_blocks(c), kThreads, 0, c.stream>>>(c, f, chunks_for(c), k1, k2, k3);
  KILN_CUDA_CHECK_LAUNCH("batch_norm_backward");
  BatchNormCall a = c;
  a.k1 = k1;
  a.k2 = k2;
  a.k3 = k3;
  launch_batch_norm_apply(a);
}

namespace {

template <typename T, ApplyLayout L, int V>
void launch_apply_as(const BatchNormCall& c, int64_t nv, unsigned blocks) {
  if (fits_int32(c))
    apply_kernel<T, uint32_t, L, V><<<blocks, kThreads, 0, c.stream>>>(c, static_cast<uint32_t>(nv));
  else
    apply_kernel<T, int64_t, L, V><<<blocks, kThreads, 0, c.stream>>>(c, nv);
}

// apply_kernel over n elements in vectors of V, int32 indexing where it fits.
// Channels-last: the block count is rounded up to a multiple of
// C / gcd(C, kThreads * V), so the grid stride (blocks * kThreads * V
// elements) is a multiple of C and each thread keeps its channels (ClFixed),
// unless that needs far more blocks than there is work for.
template <typename T, int V>
void launch_apply(const BatchNormCall& c, int64_t n) {
  const int64_t nv = n / V;
  // At least four vectors a thread where the tensor allows, so a thread's
  // coefficient loads serve several vectors (one a thread left ResNet-18's
  // 512-channel 4x4 layers at a quarter of the memory's bandwidth).
  constexpr int64_t kVectorsPerThread = 4;
  const int64_t want = std::min<int64_t>((nv + kThreads * kVectorsPerThread - 1) / (kThreads * kVectorsPerThread),
                                         int64_t{c.num_sms} * 16);
  if (!c.channels_last) return launch_apply_as<T, ApplyLayout::Nchw, V>(c, nv, static_cast<unsigned>(want));
  const int64_t unit = c.C / std::gcd(c.C, int64_t{kThreads} * V);
  const int64_t blocks = (want + unit - 1) / unit * unit;
  if (blocks <= std::max<int64_t>(2 * want, 65535) && blocks <= (int64_t{1} << 31) - 1)
    launch_apply_as<T, ApplyLayout::ClFixed, V>(c, nv, static_cast<unsigned>(blocks));
  else
    launch_apply_as<T, ApplyLayout::ClStrided, V>(c, nv, static_cast<unsigned>(want));
}

}  // namespace

void launch_batch_norm_apply(const BatchNormCall& c) {
  const int64_t n = c.N * c.C * c.HW;
  if (n == 0) return;
  visit_float(c.dtype, [&]<typename T>() {
    constexpr int V = static_cast<int>(16 / sizeof(T));
    // (Channels-last vectors also read the coefficients in pairs.)
    const bool coefficients = !c.channels_last || (aligned16(c.k1) && aligned16(c.k2) && aligned16(c.k3));
    if ((c.channels_last ? c.C % V == 0 : c.HW % V == 0) && aligned16(c.x) && aligned16(c.g) && aligned16(c.out) &&
        coefficients)
      launch_apply<T, V>(c, n);
    else
      launch_apply<T, 1>(c, n);
  });
  KILN_CUDA_CHECK_LAUNCH("batch_norm");
}

}  // namespace kiln::cuda
