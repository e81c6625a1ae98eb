// Indexing kernels: index_select / index_add over [outer, D, inner] views,
// gather / scatter_add walking every position of the index, one_hot.
// Selections move raw words; the adds are atomic (duplicate indices add
// into one element). A bad index is recorded in c.bad, which the caller
// reads back to raise the CPU's error.
#include "cuda/launch.cuh"

namespace kiln::cuda {
namespace {

// index k wrapped into [0, D), or -1 (and recorded) when outside [-D, D).
__device__ inline int64_t checked_index(int64_t k, int64_t D, int64_t* bad) {
  if (k < -D || k >= D) {
    bad[1] = k;
    bad[0] = 1;
    return -1;
  }
  return k < 0 ? k + D : k;
}

template <typename W>
__global__ void index_select_kernel(IndexCall c, int64_t n) {
  const W* src = static_cast<const W*>(c.src);
  W* dst = static_cast<W*>(c.dst);
  KILN_GRID_STRIDE(u, n) {
    const int64_t i = u % c.inner, k = (u / c.inner) % c.K, o = u / (c.inner * c.K);
    const int64_t r = checked_index(c.index[k], c.D, c.bad);
    if (r < 0) continue;
    dst[u] = src[(o * c.D + r) * c.inner + i];
  }
}

// atomicAdd for every element type index_add / scatter_add take.
template <typename T>
__device__ inline void atomic_add(T* p, T v) {
  if constexpr (std::is_same_v<T, int64_t>) {
    atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
  } else {
    atomicAdd(p, v);
  }
}

template <typename T>
__global__ void index_add_kernel(IndexCall c, int64_t n) {
  const T* src = static_cast<const T*>(c.src);
  T* dst = static_cast<T*>(c.dst);
  KILN_GRID_STRIDE(u, n) {
    const int64_t i = u % c.inner, k = (u / c.inner) % c.K, o = u / (c.inner * c.K);
    const int64_t r = checked_index(c.index[k], c.D, c.bad);
    if (r < 0) continue;
    atomic_add(dst + (o * c.D + r) * c.inner + i, src[u]);
  }
}

// The offset of index position p in the indexed tensor (strides, dim left
// out) and the size of that tensor along dim (c.D).
__device__ inline int64_t offset_without_dim(const IndexCall& c, int64_t p) {
  int64_t off = 0;
  for (int d = c.nd - 1; d >= 0; --d) {
    const int64_t q = p / c.sizes[d];
    if (d != c.dim) off += (p - q * c.sizes[d]) * c.strides[d];
    p = q;
  }
  return off;
}

template <typename W>
__global__ void gather_kernel(IndexCall c, int64_t n) {
  const W* src = static_cast<const W*>(c.src);
  W* dst = static_cast<W*>(c.dst);
  const int64_t dstride = c.nd > 0 ? c.strides[c.dim] : 0;
  KILN_GRID_STRIDE(p, n) {
    const int64_t r = checked_index(c.index[p], c.D, c.bad);
    if (r < 0) continue;
    dst[p] = src[offset_without_dim(c, p) + r * dstride];
  }
}

template <typename T>
__global__ void scatter_add_kernel(IndexCall c, int64_t n) {
  const T* src = static_cast<const T*>(c.src);
  T* dst = static_cast<T*>(c.dst);
  const int64_t dstride = c.nd > 0 ? c.strides[c.dim] : 0;
  KILN_GRID_STRIDE(p, n) {
    const int64_t r = checked_index(c.index[p], c.D, c.bad);
    if (r < 0) continue;
    atomic_add(dst + offset_without_dim(c, p) + r * dstride, src[p]);
  }
}

__global__ void one_hot_kernel(IndexCall c, int64_t n) {
  int64_t* dst = static_cast<int64_t*>(c.dst);
  KILN_GRID_STRIDE(i, n) {
    const int64_t k = c.index[i];
    if (k < 0 || k >= c.D) {
      c.bad[1] = k;
      c.bad[0] = 1;
      continue;
    }
    dst[i * c.D + k] = 1;
  }
}

// Calls f.template operator()<W>() with an unsigned word of the item size.
template <typename F>
void visit_word(int itemsize, F&& f) {
  switch (itemsize) {
    case 1: f.template operator()<uint8_t>(); return;
    case 2: f.template operator()<uint16_t>(); return;
    case 4: f.template operator()<uint32_t>(); return;
    default: f.template operator()<uint64_t>(); return;
  }
}

// The element types atomic adds take (bool and uint8 are refused by the caller).
template <typename F>
void visit_addable(Scalar s, F&& f) {
  switch (s) {
    case Scalar::Int32: f.template operator()<int32_t>(); return;
    case Scalar::Int64: f.template operator()<int64_t>(); return;
    case Scalar::Float16: f.template operator()<__half>(); return;
    case Scalar::BFloat16: f.template operator()<__nv_bfloat16>(); return;
    case Scalar::Float64: f.template operator()<double>(); return;
    default: f.template operator()<float>(); return;
  }
}

}  // namespace

void launch_index_select(const IndexCall& c) {
  const int64_t n = c.outer * c.K * c.inner;
  if (n == 0) return;
  visit_word(c.itemsize,
             [&]<typename W>() { index_select_kernel<W><<<blocks_for(n), kThreads, 0, c.stream>>>(c, n); });
  KILN_CUDA_CHECK_LAUNCH("index_select");
}

void launch_index_add(const IndexCall& c) {
  const int64_t n = c.outer * c.K * c.inner;
  if (n == 0) return;
  visit_addable(c.dtype,
                [&]<typename T>() { index_add_kernel<T><<<blocks_for(n), kThreads, 0, c.stream>>>(c, n); });
  KILN_CUDA_CHECK_LAUNCH("index_add");
}

void launch_gather(const IndexCall& c) {
  if (c.numel == 0) return;
  visit_word(c.itemsize,
             [&]<typename W>() { gather_kernel<W><<<blocks_for(c.numel), kThreads, 0, c.stream>>>(c, c.numel); });
  KILN_CUDA_CHECK_LAUNCH("gather");
}

void launch_scatter_add(const IndexCall& c) {
  if (c.numel == 0) return;
  visit_addable(c.dtype, [&]<typename T>() {
    scatter_add_kernel<T><<<blocks_for(c.numel), kThreads, 0, c.stream>>>(c, c.numel);
  });
  KILN_CUDA_CHECK_LAUNCH("scatter_add");
}

void launch_one_hot(const IndexCall& c) {
  if (c.numel == 0) return;
  one_hot_kernel<<<blocks_for(c.numel), kThreads, 0, c.stream>>>(c, c.numel);
  KILN_CUDA_CHECK_LAUNCH("one_hot");
}

}  // namespace kiln::cuda
