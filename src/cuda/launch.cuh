// Launch helpers the hand-written kernels share (pooling, batch norm,
// indexing, random): a grid-stride loop over n items and a grid sized for
// it, and the dispatch over the storage types of float dtypes.
#pragma once
#include "cuda/loop.cuh"

namespace kiln::cuda {

constexpr int kThreads = 256;

// Blocks for n items at kThreads each, at most 32 per SM (the loop strides over the rest).
inline unsigned blocks_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  const int64_t cap = int64_t{multiprocessor_count()} * 32;
  return static_cast<unsigned>(b < cap ? b : cap);
}

#define KILN_GRID_STRIDE(i, n)                                                            \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

// Calls f.template operator()<T>() for the storage type of a float dtype.
template <typename F>
void visit_float(Scalar s, F&& f) {
  switch (s) {
    case Scalar::Float16: f.template operator()<__half>(); return;
    case Scalar::BFloat16: f.template operator()<__nv_bfloat16>(); return;
    case Scalar::Float64: f.template operator()<double>(); return;
    default: f.template operator()<float>(); return;
  }
}

// The arithmetic type of a storage type: float, or double for double.
template <typename T>
using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;

}  // namespace kiln::cuda
