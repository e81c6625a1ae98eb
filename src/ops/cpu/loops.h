// Strided iteration for CPU kernels (a small TensorIterator).
//
// for_each_row<N>(shape, ptrs, byte_strides, f) walks the elements of `shape`
// for N operands (output first, inputs broadcast to `shape` via stride 0),
// merging dims that are contiguous for every operand, and calls
//   f(char* const* ptrs, const int64_t* strides, int64_t n)
// on runs of n elements along the innermost dim, with per-operand byte
// strides. Kernels check strides[k] == sizeof(T) (or 0 for a broadcast
// scalar) to take their vectorized path. Large iterations are split across
// OpenMP threads by flat element ranges.
#pragma once
#include <omp.h>

#include <array>
#include <cstdint>

#include "kiln/tensor.h"

namespace kiln::cpu {

constexpr int kMaxDims = 16;
// Below this many elements a loop runs on one thread (OpenMP start-up costs
// more than it saves).
constexpr int64_t kParallelGrain = 32768;

// Byte strides of `t` viewed as broadcast to `shape` (0 where broadcast).
inline std::array<int64_t, kMaxDims> broadcast_byte_strides(const Tensor& t, const Shape& shape) {
  std::array<int64_t, kMaxDims> out{};
  int64_t nd = static_cast<int64_t>(shape.size());
  int64_t td = t.dim();
  int64_t isz = static_cast<int64_t>(t.itemsize());
  for (int64_t i = 0; i < nd; ++i) {
    int64_t ti = i - (nd - td);
    out[i] = (ti < 0 || t.shape()[ti] == 1) ? 0 : t.strides()[ti] * isz;
  }
  return out;
}

template <int N>
struct LoopPlan {
  int nd = 0;
  int64_t shape[kMaxDims];
  int64_t strides[N][kMaxDims];
  char* base[N];
  int64_t numel = 1;
};

template <int N>
LoopPlan<N> make_plan(const Shape& shape, const std::array<char*, N>& ptrs,
                      const std::array<std::array<int64_t, kMaxDims>, N>& strides) {
  KILN_CHECK(shape.size() <= static_cast<size_t>(kMaxDims), "kernels support at most ", kMaxDims,
             " dims; got shape ", shape_str(shape), ". Reshape to fewer dims");
  LoopPlan<N> p;
  for (int k = 0; k < N; ++k) p.base[k] = ptrs[k];
  // Drop size-1 dims, then merge a dim into the one inside it when every
  // operand steps through both as through one.
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    if (p.nd > 0) {
      bool mergeable = true;
      for (int k = 0; k < N; ++k)
        if (strides[k][d] * shape[d] != p.strides[k][p.nd - 1]) mergeable = false;
      if (mergeable) {
        p.shape[p.nd - 1] *= shape[d];
        for (int k = 0; k < N; ++k) p.strides[k][p.nd - 1] = strides[k][d];
        continue;
      }
    }
    p.shape[p.nd] = shape[d];
    for (int k = 0; k < N; ++k) p.strides[k][p.nd] = strides[k][d];
    ++p.nd;
  }
  if (p.nd == 0) {  // a single element
    p.shape[0] = 1;
    for (int k = 0; k < N; ++k) p.strides[k][0] = 0;
    p.nd = 1;
  }
  for (int d = 0; d < p.nd; ++d) p.numel *= p.shape[d];
  return p;
}

// Runs rows covering flat elements [begin, end).
template <int N, typename F>
void run_range(const LoopPlan<N>& p, int64_t begin, int64_t end, F& f) {
  // An empty range has no row to run, and with a zero-size dim the index
  // arithmetic below would divide by zero (an in-place op on an empty tensor).
  if (begin >= end) return;
  int64_t idx[kMaxDims];
  int64_t rem = begin;
  for (int d = p.nd - 1; d >= 0; --d) {
    idx[d] = rem % p.shape[d];
    rem /= p.shape[d];
  }
  const int last = p.nd - 1;
  int64_t inner[N];
  for (int k = 0; k < N; ++k) inner[k] = p.strides[k][last];
  char* ptrs[N];
  while (begin < end) {
    for (int k = 0; k < N; ++k) {
      char* q = p.base[k];
      for (int d = 0; d < p.nd; ++d) q += idx[d] * p.strides[k][d];
      ptrs[k] = q;
    }
    int64_t n = std::min(p.shape[last] - idx[last], end - begin);
    f(static_cast<char* const*>(ptrs), static_cast<const int64_t*>(inner), n);
    begin += n;
    idx[last] += n;
    for (int d = last; d > 0 && idx[d] == p.shape[d]; --d) {
      idx[d] = 0;
      ++idx[d - 1];
    }
  }
}

template <int N, typename F>
void for_each_row(const LoopPlan<N>& p, F&& f, int64_t grain = kParallelGrain) {
  if (p.numel <= grain || omp_in_parallel() || omp_get_max_threads() == 1) {
    run_range(p, 0, p.numel, f);
    return;
  }
#pragma omp parallel
  {
    int nt = omp_get_num_threads(), t = omp_get_thread_num();
    int64_t chunk = (p.numel + nt - 1) / nt;
    chunk = (chunk + 15) & ~int64_t{15};  // keep vector-friendly boundaries
    int64_t b = std::min(p.numel, chunk * t), e = std::min(p.numel, b + chunk);
    if (b < e) run_range(p, b, e, f);
  }
}

// Convenience: output tensor `out` (contiguous or not) and inputs broadcast to its shape.
template <int N, typename F>
void for_each_row(const Tensor& out, const std::array<const Tensor*, N - 1>& inputs, F&& f,
                  int64_t grain = kParallelGrain) {
  std::array<char*, N> ptrs;
  std::array<std::array<int64_t, kMaxDims>, N> strides;
  ptrs[0] = static_cast<char*>(out.data_ptr());
  strides[0] = broadcast_byte_strides(out, out.shape());
  for (int k = 1; k < N; ++k) {
    ptrs[k] = static_cast<char*>(inputs[k - 1]->data_ptr());
    strides[k] = broadcast_byte_strides(*inputs[k - 1], out.shape());
  }
  for_each_row<N>(make_plan<N>(out.shape(), ptrs, strides), f, grain);
}

// A shape seen as [outer, D, inner] around `dim` (softmax, gather, cat...).
struct Around {
  int64_t outer = 1, D = 1, inner = 1;
};
inline Around around(const Shape& s, int64_t dim) {
  Around r;
  if (s.empty()) return r;
  for (int64_t d = 0; d < dim; ++d) r.outer *= s[d];
  r.D = s[dim];
  for (size_t d = static_cast<size_t>(dim) + 1; d < s.size(); ++d) r.inner *= s[d];
  return r;
}

// Runs f(begin, end) over [0, n) split across threads when n * cost is large.
template <typename F>
void parallel_for(int64_t n, int64_t grain, F&& f) {
  if (n <= grain || omp_in_parallel() || omp_get_max_threads() == 1) {
    if (n > 0) f(int64_t{0}, n);
    return;
  }
#pragma omp parallel
  {
    int nt = omp_get_num_threads(), t = omp_get_thread_num();
    int64_t chunk = (n + nt - 1) / nt;
    int64_t b = std::min(n, chunk * t), e = std::min(n, b + chunk);
    if (b < e) f(b, e);
  }
}

}  // namespace kiln::cpu
