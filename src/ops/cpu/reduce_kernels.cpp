#include "ops/cpu/reduce_kernels.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <numeric>
#include <type_traits>

#include "kiln/ops.h"
#include "ops/cpu/copy.h"
#include "ops/cpu/loops.h"

namespace kiln::cpu {

Tensor contiguous_nograd(const Tensor& t) {
  if (t.is_contiguous() && !t.requires_grad()) return t;
  return t.detach().contiguous();
}

namespace {

constexpr int64_t kSumBlock = 2048;  // float lanes restart (into float64) every this many elements
constexpr int64_t kColTile = 64;     // columns per tile of a column reduction
constexpr int64_t kColChunk = 64;    // rows summed in float before moving into float64

template <typename T>
inline bool is_nan(T v) {
  if constexpr (std::is_floating_point_v<T>) return v != v;
  else return false;
}

// Accumulator type of a reduction on T.
template <ReduceOp Op, typename T>
struct AccOf {
  using type = T;
};
template <>
struct AccOf<ReduceOp::Sum, float> {
  using type = double;
};
template <>
struct AccOf<ReduceOp::Sum, double> {
  using type = double;
};
template <typename T>
  requires std::is_integral_v<T>
struct AccOf<ReduceOp::Sum, T> {
  using type = int64_t;
};

template <ReduceOp Op, typename A>
inline A combine(A a, A b) {
  if constexpr (Op == ReduceOp::Sum) return a + b;
  else if constexpr (Op == ReduceOp::Max) return (b > a || is_nan(b)) ? b : a;
  else return (b < a || is_nan(b)) ? b : a;
}

// ---- rows: [n] contiguous -> one value ----
inline double hsum_pd(__m256 v) {
  __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
  __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
  __m256d s = _mm256_add_pd(lo, hi);
  __m128d t = _mm_add_pd(_mm256_castpd256_pd128(s), _mm256_extractf128_pd(s, 1));
  return _mm_cvtsd_f64(t) + _mm_cvtsd_f64(_mm_unpackhi_pd(t, t));
}

double row_sum_f32(const float* p, int64_t n) {
  double total = 0;
  int64_t i = 0;
  while (i < n) {
    int64_t e = std::min(n, i + kSumBlock);
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (; i + 32 <= e; i += 32) {
      a0 = _mm256_add_ps(a0, _mm256_loadu_ps(p + i));
      a1 = _mm256_add_ps(a1, _mm256_loadu_ps(p + i + 8));
      a2 = _mm256_add_ps(a2, _mm256_loadu_ps(p + i + 16));
      a3 = _mm256_add_ps(a3, _mm256_loadu_ps(p + i + 24));
    }
    total += hsum_pd(a0) + hsum_pd(a1) + hsum_pd(a2) + hsum_pd(a3);
    for (; i < e; ++i) total += p[i];
  }
  return total;
}

template <ReduceOp Op, typename T, typename A>
A row_reduce(const T* p, int64_t n) {
  if constexpr (Op == ReduceOp::Sum) {
    if constexpr (std::is_same_v<T, float>) {
      return row_sum_f32(p, n);
    } else {
      A s = 0;
#pragma omp simd reduction(+ : s)
      for (int64_t i = 0; i < n; ++i) s += static_cast<A>(p[i]);
      return s;
    }
  } else if constexpr (std::is_same_v<T, float>) {
    // max/min lanes plus a sticky NaN flag (PyTorch propagates NaN).
    if (n < 8) {
      A r = p[0];
      for (int64_t i = 1; i < n; ++i) r = combine<Op, A>(r, p[i]);
      return r;
    }
    __m256 acc = _mm256_loadu_ps(p), nan = _mm256_cmp_ps(acc, acc, _CMP_UNORD_Q);
    int64_t i = 8;
    for (; i + 8 <= n; i += 8) {
      __m256 v = _mm256_loadu_ps(p + i);
      acc = Op == ReduceOp::Max ? _mm256_max_ps(acc, v) : _mm256_min_ps(acc, v);
      nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    }
    if (_mm256_movemask_ps(nan) != 0) return std::numeric_limits<float>::quiet_NaN();
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, acc);
    A r = lanes[0];
    for (int k = 1; k < 8; ++k) r = combine<Op, A>(r, lanes[k]);
    for (; i < n; ++i) r = combine<Op, A>(r, p[i]);
    return r;
  } else {
    // Eight independent lanes so the compiler can vectorize the selects.
    constexpr int L = 8;
    A acc[L];
    for (int k = 0; k < L; ++k) acc[k] = p[0];
    int64_t i = 0;
    for (; i + L <= n; i += L)
      for (int k = 0; k < L; ++k) acc[k] = combine<Op, A>(acc[k], p[i + k]);
    A r = acc[0];
    for (int k = 1; k < L; ++k) r = combine<Op, A>(r, acc[k]);
    for (; i < n; ++i) r = combine<Op, A>(r, p[i]);
    return r;
  }
}

// ---- columns: in[r * inner + j] for r in [r0, r1), j in [j0, j1) -> acc[j - j0] ----
template <ReduceOp Op, typename T, typename A>
void col_reduce(const T* in, int64_t inner, int64_t r0, int64_t r1, int64_t j0, int64_t j1, A* acc) {
  int64_t w = j1 - j0;
  if constexpr (Op == ReduceOp::Sum && std::is_same_v<T, float>) {
    for (int64_t j = 0; j < w; ++j) acc[j] = 0;
    float f[kColTile];
    for (int64_t rc = r0; rc < r1; rc += kColChunk) {
      int64_t re = std::min(r1, rc + kColChunk);
      for (int64_t j = 0; j < w; ++j) f[j] = 0.0f;
      for (int64_t r = rc; r < re; ++r) {
        const float* row = in + r * inner + j0;
#pragma omp simd
        for (int64_t j = 0; j < w; ++j) f[j] += row[j];
      }
      for (int64_t j = 0; j < w; ++j) acc[j] += f[j];
    }
  } else if constexpr (Op == ReduceOp::Sum) {
    for (int64_t j = 0; j < w; ++j) acc[j] = 0;
    for (int64_t r = r0; r < r1; ++r) {
      const T* row = in + r * inner + j0;
#pragma omp simd
      for (int64_t j = 0; j < w; ++j) acc[j] += static_cast<A>(row[j]);
    }
  } else {
    const T* first = in + r0 * inner + j0;
    for (int64_t j = 0; j < w; ++j) acc[j] = first[j];
    for (int64_t r = r0 + 1; r < r1; ++r) {
      const T* row = in + r * inner + j0;
#pragma omp simd
      for (int64_t j = 0; j < w; ++j) acc[j] = combine<Op, A>(acc[j], row[j]);
    }
  }
}

// One pass: [outer, R, inner] of T -> [outer, inner] of A.
template <ReduceOp Op, typename T, typename A>
void reduce_pass(const T* in, A* out, int64_t outer, int64_t R, int64_t inner) {
  const int64_t total = outer * R * inner;
  const int nt = omp_get_max_threads();
  const bool parallel = total > kParallelGrain && nt > 1;
  if (inner == 1) {
    if (!parallel || outer >= 4 * nt) {
      parallel_for(outer, parallel ? 0 : outer, [&](int64_t b, int64_t e) {
        for (int64_t o = b; o < e; ++o) out[o] = row_reduce<Op, T, A>(in + o * R, R);
      });
      return;
    }
    // Few long rows: split each row across threads.
    for (int64_t o = 0; o < outer; ++o) {
      std::unique_ptr<A[]> part(new A[nt]);
      std::vector<char> used(static_cast<size_t>(nt), 0);
      const T* row = in + o * R;
#pragma omp parallel num_threads(nt)
      {
        int t = omp_get_thread_num(), n = omp_get_num_threads();
        int64_t chunk = (R + n - 1) / n;
        chunk = (chunk + 63) & ~int64_t{63};
        int64_t b = std::min(R, chunk * t), e = std::min(R, b + chunk);
        if (b < e) {
          part[t] = row_reduce<Op, T, A>(row + b, e - b);
          used[t] = true;
        }
      }
      A r{};
      bool any = false;
      for (int t = 0; t < nt; ++t) {
        if (!used[t]) continue;
        r = any ? combine<Op, A>(r, part[t]) : part[t];
        any = true;
      }
      out[o] = r;
    }
    return;
  }
  const int64_t tiles = (inner + kColTile - 1) / kColTile;
  const int64_t units = outer * tiles;
  auto run_units = [&](int64_t b, int64_t e) {
    for (int64_t u = b; u < e; ++u) {
      int64_t o = u / tiles, j0 = (u % tiles) * kColTile, j1 = std::min(inner, j0 + kColTile);
      col_reduce<Op, T, A>(in + o * R * inner, inner, 0, R, j0, j1, out + o * inner + j0);
    }
  };
  if (!parallel || units >= 4 * nt) {
    parallel_for(units, parallel ? 0 : units, run_units);
    return;
  }
  // Few columns, many rows: each thread reduces a slab of rows; then combine.
  std::vector<std::unique_ptr<A[]>> part(static_cast<size_t>(nt));
  std::vector<char> used(static_cast<size_t>(nt), 0);
#pragma omp parallel num_threads(nt)
  {
    int t = omp_get_thread_num(), n = omp_get_num_threads();
    int64_t chunk = (R + n - 1) / n;
    int64_t b = std::min(R, chunk * t), e = std::min(R, b + chunk);
    if (b < e) {
      part[t].reset(new A[outer * inner]);
      for (int64_t u = 0; u < units; ++u) {
        int64_t o = u / tiles, j0 = (u % tiles) * kColTile, j1 = std::min(inner, j0 + kColTile);
        col_reduce<Op, T, A>(in + o * R * inner, inner, b, e, j0, j1, part[t].get() + o * inner + j0);
      }
      used[t] = true;
    }
  }
  bool any = false;
  for (int t = 0; t < nt; ++t) {
    if (!used[t]) continue;
    const A* p = part[t].get();
    if (!any) {
      std::copy(p, p + outer * inner, out);
    } else {
      for (int64_t i = 0; i < outer * inner; ++i) out[i] = combine<Op, A>(out[i], p[i]);
    }
    any = true;
  }
}

// Coalesced groups of dims: size and whether reduced.
struct Group {
  int64_t size;
  bool reduced;
};
std::vector<Group> make_groups(const Shape& shape, const std::vector<int64_t>& dims) {
  std::vector<bool> red(shape.size(), false);
  for (int64_t d : dims) red[d] = true;
  std::vector<Group> g;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    if (!g.empty() && g.back().reduced == red[d]) g.back().size *= shape[d];
    else g.push_back({shape[d], static_cast<bool>(red[d])});
  }
  return g;
}

template <ReduceOp Op, typename T>
void reduce_typed(const Tensor& x, std::vector<Group> groups, const Tensor& out) {
  using A = typename AccOf<Op, T>::type;
  // Pass by pass: reduce the innermost reduced group, then merge its kept
  // neighbours. The first pass reads T, later ones A.
  Tensor cur = x;  // holds T on the first pass, then A
  bool first = true;
  while (true) {
    int gi = -1;
    for (int i = static_cast<int>(groups.size()) - 1; i >= 0; --i)
      if (groups[i].reduced) {
        gi = i;
        break;
      }
    if (gi < 0) break;
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < gi; ++i) outer *= groups[i].size;
    for (size_t i = gi + 1; i < groups.size(); ++i) inner *= groups[i].size;
    Tensor next = Tensor::empty({outer * inner}, dtype_v<A>);
    if (first) reduce_pass<Op, T, A>(static_cast<const T*>(cur.data_ptr()), next.data<A>(), outer, groups[gi].size, inner);
    else reduce_pass<Op, A, A>(static_cast<const A*>(cur.data_ptr()), next.data<A>(), outer, groups[gi].size, inner);
    first = false;
    cur = next;
    groups.erase(groups.begin() + gi);
    if (gi > 0 && gi < static_cast<int>(groups.size()) && !groups[gi - 1].reduced && !groups[gi].reduced) {
      groups[gi - 1].size *= groups[gi].size;
      groups.erase(groups.begin() + gi);
    }
  }
  copy_cast(cur.view(out.shape()), out);
}

}  // namespace

void reduce(const Tensor& x_in, const std::vector<int64_t>& dims, ReduceOp op, const Tensor& out) {
  if (out.numel() == 0) return;
  if (x_in.numel() == 0) {
    KILN_ASSERT(op == ReduceOp::Sum, "max/min over an empty dim reached the kernel");
    Tensor o = out;
    fill_(o, 0.0);
    return;
  }
  Tensor x = contiguous_nograd(x_in);
  if (x.dtype() == DType::Float16 || x.dtype() == DType::BFloat16) {
    x = x.detach().to(DType::Float32);
  }
  std::vector<Group> groups = make_groups(x.shape(), dims);
  visit_dtype(x.dtype(), [&]<typename T>() {
    if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
      KILN_ASSERT(false);
    } else {
      switch (op) {
        case ReduceOp::Sum: reduce_typed<ReduceOp::Sum, T>(x, groups, out); break;
        case ReduceOp::Max: reduce_typed<ReduceOp::Max, T>(x, groups, out); break;
        case ReduceOp::Min: reduce_typed<ReduceOp::Min, T>(x, groups, out); break;
      }
    }
  });
}

void argmax(const Tensor& x_in, int64_t dim, const Tensor& out) {
  if (out.numel() == 0) return;
  Tensor x = contiguous_nograd(x_in);
  if (x.dtype() == DType::Float16 || x.dtype() == DType::BFloat16) {
    x = x.detach().to(DType::Float32);
  }
  int64_t outer = 1, inner = 1, R = x.dim() == 0 ? 1 : x.shape()[dim];
  for (int64_t d = 0; d < dim; ++d) outer *= x.shape()[d];
  for (int64_t d = dim + 1; d < x.dim(); ++d) inner *= x.shape()[d];
  int64_t* o = out.data<int64_t>();
  visit_dtype(x.dtype(), [&]<typename T>() {
    if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
      KILN_ASSERT(false);
    } else {
      const T* p = static_cast<const T*>(x.data_ptr());
      auto better = [](T v, T best) { return (v > best && !is_nan(best)) || (is_nan(v) && !is_nan(best)); };
      parallel_for(outer * inner, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(R, 1)),
                   [&](int64_t b, int64_t e) {
                     if (inner == 1) {
                       for (int64_t k = b; k < e; ++k) {
                         const T* row = p + k * R;
                         T best = row[0];
                         int64_t bi = 0;
                         for (int64_t r = 1; r < R; ++r)
                           if (better(row[r], best)) {
                             best = row[r];
                             bi = r;
                           }
                         o[k] = bi;
                       }
                       return;
                     }
                     for (int64_t k = b; k < e; ++k) {
                       int64_t oi = k / inner, j = k % inner;
                       const T* col = p + oi * R * inner + j;
                       T best = col[0];
                       int64_t bi = 0;
                       for (int64_t r = 1; r < R; ++r)
                         if (better(col[r * inner], best)) {
                           best = col[r * inner];
                           bi = r;
                         }
                       o[k] = bi;
                     }
                   });
    }
  });
}

void variance(const Tensor& x_in, const std::vector<int64_t>& dims, int64_t correction, const Tensor& out) {
  if (out.numel() == 0) return;
  // Move the reduced dims last so each output is one contiguous row.
  std::vector<int64_t> perm;
  std::vector<bool> red(static_cast<size_t>(x_in.dim()), false);
  for (int64_t d : dims) red[d] = true;
  int64_t R = 1;
  for (int64_t d = 0; d < x_in.dim(); ++d)
    if (!red[d]) perm.push_back(d);
  for (int64_t d : dims) {
    perm.push_back(d);
    R *= x_in.shape()[d];
  }
  Tensor x;
  {
    x = x_in.detach();
    if (x.dim() > 0) x = x.permute(perm);
    x = x.contiguous();
    if (x.dtype() == DType::Float16 || x.dtype() == DType::BFloat16) x = x.to(DType::Float32);
  }
  int64_t rows = out.numel();
  double div = std::max<double>(0.0, static_cast<double>(R - correction));
  Tensor res = Tensor::empty({rows}, DType::Float64);
  double* rp = res.data<double>();
  visit_dtype(x.dtype(), [&]<typename T>() {
    if constexpr (std::is_floating_point_v<T>) {
      const T* p = static_cast<const T*>(x.data_ptr());
      parallel_for(rows, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(R, 1)), [&](int64_t b, int64_t e) {
        for (int64_t k = b; k < e; ++k) {
          const T* row = p + k * R;
          double s = 0;
#pragma omp simd reduction(+ : s)
          for (int64_t r = 0; r < R; ++r) s += static_cast<double>(row[r]);
          double m = s / static_cast<double>(R);
          double q = 0;
#pragma omp simd reduction(+ : q)
          for (int64_t r = 0; r < R; ++r) {
            double dlt = static_cast<double>(row[r]) - m;
            q += dlt * dlt;
          }
          rp[k] = q / div;
        }
      });
    } else {
      KILN_ASSERT(false, "variance of ", dtype_name(x.dtype()));
    }
  });
  copy_cast(res.view(out.shape()), out);
}

}  // namespace kiln::cpu
