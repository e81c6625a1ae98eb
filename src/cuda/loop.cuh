// The elementwise loop every pointwise and cast kernel shares: one grid-stride
// kernel over the output, templated on the element types and a functor, with
// a vectorized variant (16-byte float loads) for dense operands.
//
// Operands are stored in their own types and computed in their math types
// (Math<T>): 16-bit floats are read, widened to float for the functor, and
// the result rounded once into the output, so a bf16 or fp16 tensor runs the
// loop directly, without float32 copies in and out (what autocast's 16-bit
// activations need); numbers enter in the math type, never rounded to 16 bits.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>
#include <utility>

#include "cuda/check.h"
#include "cuda/kernels.h"

namespace kiln::cuda {

// What a kernel reads of a PointwiseCall (by value: kernel parameters are
// constant memory, read by every thread without a memory round trip).
struct Loop {
  int nd = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t strides[4][kMaxDims] = {};  // [0] out, [1..3] inputs
  void* ptr[4] = {};
  double number[4] = {};
  bool is_number[4] = {};
};

template <typename T>
constexpr bool kIsHalf = std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;

// Value conversion as kiln's CPU copy does it: 16-bit floats through float,
// anything to bool as "nonzero".
template <typename To, typename From>
__host__ __device__ inline To convert(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (kIsHalf<From>) {
    return convert<To>(static_cast<float>(v));
  } else if constexpr (kIsHalf<To>) {
    return To(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, bool>) {
    return v != From(0);
  } else {
    return static_cast<To>(v);
  }
}

// The type a functor sees for an operand stored as T.
template <typename T>
using Math = std::conditional_t<kIsHalf<T>, float, T>;

template <typename T>
__device__ inline Math<T> load(const Loop& L, int k, int64_t off) {
  if (L.is_number[k]) return convert<Math<T>>(L.number[k]);
  return convert<Math<T>>(static_cast<const T*>(L.ptr[k])[off]);
}

template <typename Out, typename F, typename... In, size_t... I>
__device__ inline void apply_at(const Loop& L, const int64_t* off, const F& f, std::index_sequence<I...>) {
  static_cast<Out*>(L.ptr[0])[off[0]] = convert<Out>(f(load<In>(L, static_cast<int>(I) + 1, off[I + 1])...));
}

template <typename Out, typename F, typename... In>
__global__ void pointwise_kernel(Loop L, int64_t n, bool contiguous, F f) {
  constexpr int N = 1 + sizeof...(In);
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    int64_t off[N];
    if (contiguous) {
#pragma unroll
      for (int k = 0; k < N; ++k) off[k] = i;
    } else {
#pragma unroll
      for (int k = 0; k < N; ++k) off[k] = 0;
      int64_t r = i;
      for (int d = L.nd - 1; d >= 0; --d) {
        const int64_t q = r / L.sizes[d];
        const int64_t c = r - q * L.sizes[d];
        r = q;
#pragma unroll
        for (int k = 0; k < N; ++k) off[k] += c * L.strides[k][d];
      }
    }
    apply_at<Out, F, In...>(L, off, f, std::index_sequence_for<In...>{});
  }
}

// Elements per thread and iteration of the dense kernel: 16-byte loads of
// the widest operand (4 float32, 8 bfloat16/float16, as torch's half
// kernels; with 4-wide bf16 packs ResNet-18's ReLU took 26 us a call on an
// H100 against torch's 21), at most 8.
template <typename Out, typename... In>
constexpr int vec_width() {
  size_t widest = sizeof(Out);
  ((widest = sizeof(In) > widest ? sizeof(In) : widest), ...);
  const size_t w = 16 / widest;
  return static_cast<int>(w > 8 ? 8 : w);
}

template <typename T, int W>
struct alignas(sizeof(T) * W) Pack {
  T v[W];
};

// W values of an operand in its math type (one wide load of its storage).
template <typename T, int W>
struct MathPack {
  Math<T> v[W];
};

template <typename T, int W>
__device__ inline MathPack<T, W> load_pack(const Loop& L, int k, int64_t base) {
  MathPack<T, W> p;
  if (L.is_number[k]) {
    const Math<T> x = convert<Math<T>>(L.number[k]);
#pragma unroll
    for (int j = 0; j < W; ++j) p.v[j] = x;
    return p;
  }
  const Pack<T, W> raw = *reinterpret_cast<const Pack<T, W>*>(static_cast<const T*>(L.ptr[k]) + base);
#pragma unroll
  for (int j = 0; j < W; ++j) p.v[j] = convert<Math<T>>(raw.v[j]);
  return p;
}

template <typename Out, int W, typename F, typename... P>
__device__ inline void apply_packs(Pack<Out, W>& o, const F& f, const P&... packs) {
#pragma unroll
  for (int j = 0; j < W; ++j) o.v[j] = convert<Out>(f(packs.v[j]...));
}

template <typename Out, int W, typename F, typename... In, size_t... I>
__device__ inline void apply_vec_at(const Loop& L, int64_t base, const F& f, std::index_sequence<I...>) {
  Pack<Out, W> o;
  apply_packs<Out, W>(o, f, load_pack<In, W>(L, static_cast<int>(I) + 1, base)...);
  *reinterpret_cast<Pack<Out, W>*>(static_cast<Out*>(L.ptr[0]) + base) = o;
}

// Dense operands, every pointer aligned to a whole Pack: W elements per
// thread and iteration with one wide load per input.
template <typename Out, int W, typename F, typename... In>
__global__ void pointwise_vec_kernel(Loop L, int64_t n, F f) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t packs = n / W;
  for (int64_t v = tid; v < packs; v += step)
    apply_vec_at<Out, W, F, In...>(L, v * W, f, std::index_sequence_for<In...>{});
  for (int64_t i = packs * W + tid; i < n; i += step) {
    int64_t off[1 + sizeof...(In)];
    for (auto& o : off) o = i;
    apply_at<Out, F, In...>(L, off, f, std::index_sequence_for<In...>{});
  }
}

template <typename T>
constexpr bool kVecType = std::is_same_v<T, float> || std::is_same_v<T, bool> || kIsHalf<T>;

int multiprocessor_count();  // of the current device (cached)

inline Loop make_loop(const PointwiseCall& c) {
  Loop L;
  L.nd = c.nd;
  for (int d = 0; d < c.nd; ++d) {
    L.sizes[d] = c.sizes[d];
    L.strides[0][d] = c.out.strides[d];
    for (int k = 0; k < c.nin; ++k) L.strides[k + 1][d] = c.in[k].strides[d];
  }
  L.ptr[0] = c.out.data;
  for (int k = 0; k < c.nin; ++k) {
    L.ptr[k + 1] = c.in[k].data;
    L.is_number[k + 1] = c.in[k].is_number;
    L.number[k + 1] = c.in[k].number;
  }
  return L;
}

inline bool packs_aligned(const Loop& L, int n_ptrs, const size_t* itemsizes, int width) {
  for (int k = 0; k < n_ptrs; ++k) {
    if (L.is_number[k]) continue;
    if (reinterpret_cast<uintptr_t>(L.ptr[k]) % (itemsizes[k] * static_cast<size_t>(width)) != 0) return false;
  }
  return true;
}

template <typename Out, typename... In, typename F>
void run_loop(const PointwiseCall& c, F f) {
  if (c.numel == 0) return;
  Loop L = make_loop(c);
  constexpr int kThreads = 256;
  const int64_t max_blocks = static_cast<int64_t>(multiprocessor_count()) * 16;
  if constexpr (kVecType<Out> && (kVecType<In> && ...)) {
    constexpr int W = vec_width<Out, In...>();
    const size_t sizes[] = {sizeof(Out), sizeof(In)...};
    if (c.contiguous && c.numel >= W && packs_aligned(L, 1 + static_cast<int>(sizeof...(In)), sizes, W)) {
      int64_t blocks = (c.numel / W + kThreads - 1) / kThreads;
      blocks = blocks < max_blocks ? blocks : max_blocks;
      pointwise_vec_kernel<Out, W, F, In...><<<static_cast<unsigned>(blocks), kThreads, 0, c.stream>>>(L, c.numel, f);
      KILN_CUDA_CHECK_LAUNCH("pointwise kernel");
      return;
    }
  }
  int64_t blocks = (c.numel + kThreads - 1) / kThreads;
  blocks = blocks < max_blocks ? blocks : max_blocks;
  pointwise_kernel<Out, F, In...><<<static_cast<unsigned>(blocks), kThreads, 0, c.stream>>>(L, c.numel, c.contiguous, f);
  KILN_CUDA_CHECK_LAUNCH("pointwise kernel");
}

// Calls f.template operator()<T>() for the C++ type of a Scalar.
template <typename F>
void visit_scalar(Scalar s, F&& f) {
  switch (s) {
    case Scalar::Bool: f.template operator()<bool>(); return;
    case Scalar::UInt8: f.template operator()<uint8_t>(); return;
    case Scalar::Int32: f.template operator()<int32_t>(); return;
    case Scalar::Int64: f.template operator()<int64_t>(); return;
    case Scalar::Float16: f.template operator()<__half>(); return;
    case Scalar::BFloat16: f.template operator()<__nv_bfloat16>(); return;
    case Scalar::Float32: f.template operator()<float>(); return;
    case Scalar::Float64: f.template operator()<double>(); return;
  }
}

}  // namespace kiln::cuda
