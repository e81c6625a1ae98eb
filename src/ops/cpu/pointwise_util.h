// Helpers shared by the pointwise and in-place kernels (AVX2 translation
// units only): wrapped numbers, dtype conversion of inputs before a loop, and
// the scalar strided loops every dtype falls back to.
#pragma once
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>

#include "kiln/tensor.h"
#include "ops/cpu/copy.h"
#include "ops/cpu/loops.h"

namespace kiln::cpu {

// A C++ number as an op argument: a 0-dim "wrapped number" tensor, which type
// promotion treats like a Python scalar. A whole number acts as a Python int
// (int64: x_int64 + 1 stays int64), any other value as a Python float.
inline Tensor wrap_number(double v) {
  bool whole = std::isfinite(v) && v == std::trunc(v) && std::abs(v) < 9.0e15;
  Tensor t = Tensor::empty({}, whole ? DType::Int64 : DType::Float64);
  if (whole) *static_cast<int64_t*>(t.data_ptr()) = static_cast<int64_t>(v);
  else *static_cast<double*>(t.data_ptr()) = v;
  t.impl()->wrapped_number = true;
  return t;
}

// The dtype a kernel computes in for an output dtype: 16-bit floats compute
// in float32.
inline DType compute_dtype(DType out) {
  return (out == DType::Float16 || out == DType::BFloat16) ? DType::Float32 : out;
}

// `t` with dtype `dt` (itself when it already has it): a converted copy with
// the same shape, made directly by the copy kernel (no op call, no autograd).
inline Tensor converted(const Tensor& t, DType dt) {
  if (t.dtype() == dt) return t;
  Tensor r = Tensor::empty(t.shape(), dt, t.device());
  copy_cast(t, r);
  return r;
}

// Calls f.template operator()<T>() for the dtypes kernels compute in
// directly (16-bit floats are converted to float32 first).
template <typename F>
decltype(auto) visit_compute_dtype(DType t, F&& f) {
  switch (t) {
    case DType::Bool: return f.template operator()<bool>();
    case DType::UInt8: return f.template operator()<uint8_t>();
    case DType::Int32: return f.template operator()<int32_t>();
    case DType::Int64: return f.template operator()<int64_t>();
    case DType::Float32: return f.template operator()<float>();
    case DType::Float64: return f.template operator()<double>();
    default: break;
  }
  KILN_ASSERT(false, "no direct kernel for ", dtype_name(t), " (16-bit floats compute in float32)");
  __builtin_unreachable();
}
template <typename F>
decltype(auto) visit_float_dtype(DType t, F&& f) {
  if (t == DType::Float64) return f.template operator()<double>();
  KILN_ASSERT(t == DType::Float32, "expected a float32/float64 compute dtype, got ", dtype_name(t));
  return f.template operator()<float>();
}

// for_each_row, but when some operand steps through memory along the
// second-to-last dim instead of the last (a transposed input, or a transposed
// self of an in-place op), walks the last two dims in square tiles so each
// cache line that operand touches is reused across the tile's rows. Without
// tiling, every element of such an operand would cost a cache miss.
template <int N, typename F>
void for_each_row_tiled(const Tensor& out, const std::array<const Tensor*, N - 1>& inputs, F&& f,
                        int64_t grain = kParallelGrain) {
  std::array<char*, N> ptrs;
  std::array<std::array<int64_t, kMaxDims>, N> strides;
  std::array<int64_t, N> isz;
  ptrs[0] = static_cast<char*>(out.data_ptr());
  strides[0] = broadcast_byte_strides(out, out.shape());
  isz[0] = static_cast<int64_t>(out.itemsize());
  for (int k = 1; k < N; ++k) {
    ptrs[k] = static_cast<char*>(inputs[k - 1]->data_ptr());
    strides[k] = broadcast_byte_strides(*inputs[k - 1], out.shape());
    isz[k] = static_cast<int64_t>(inputs[k - 1]->itemsize());
  }
  LoopPlan<N> p = make_plan<N>(out.shape(), ptrs, strides);
  constexpr int64_t kTile = 32;
  bool tile = false;
  if (p.nd >= 2 && p.shape[p.nd - 1] >= kTile / 2 && p.shape[p.nd - 2] >= kTile / 2) {
    for (int k = 0; k < N; ++k) {
      int64_t inner = p.strides[k][p.nd - 1], outer = p.strides[k][p.nd - 2];
      if (inner != 0 && inner != isz[k] && outer == isz[k]) tile = true;
    }
  }
  if (!tile) {
    for_each_row<N>(p, f, grain);
    return;
  }
  const int r = p.nd - 2, c = p.nd - 1;
  const int64_t rows = p.shape[r], cols = p.shape[c];
  const int64_t row_tiles = (rows + kTile - 1) / kTile, col_tiles = (cols + kTile - 1) / kTile;
  const int64_t outer = p.numel / (rows * cols);
  const int64_t ntiles = outer * row_tiles * col_tiles;
  int64_t inner_strides[N];
  for (int k = 0; k < N; ++k) inner_strides[k] = p.strides[k][c];
  parallel_for(ntiles, std::max<int64_t>(1, grain / (kTile * kTile)), [&](int64_t b, int64_t e) {
    char* q[N];
    for (int64_t t = b; t < e; ++t) {
      int64_t ct = t % col_tiles, rt = (t / col_tiles) % row_tiles, o = t / (col_tiles * row_tiles);
      int64_t base_off[N];
      for (int k = 0; k < N; ++k) base_off[k] = 0;
      for (int d = r - 1; d >= 0; --d) {  // the outer dims' index of o
        int64_t i = o % p.shape[d];
        o /= p.shape[d];
        for (int k = 0; k < N; ++k) base_off[k] += i * p.strides[k][d];
      }
      int64_t r0 = rt * kTile, r1 = std::min(rows, r0 + kTile);
      int64_t c0 = ct * kTile, n = std::min(cols, c0 + kTile) - c0;
      for (int64_t i = r0; i < r1; ++i) {
        for (int k = 0; k < N; ++k) q[k] = p.base[k] + base_off[k] + i * p.strides[k][r] + c0 * p.strides[k][c];
        f(static_cast<char* const*>(q), static_cast<const int64_t*>(inner_strides), n);
      }
    }
  });
}

// Scalar loops: y = f(a), y = f(a, b), y = f(a, b, c) elementwise over `out`
// with inputs broadcast to it. Contiguous rows get a plain indexed loop the
// compiler can vectorize.
template <typename TO, typename TA, typename F>
void loop1(const Tensor& out, const Tensor& a, F f, int64_t grain = kParallelGrain) {
  for_each_row_tiled<2>(
      out, {&a},
      [&f](char* const* p, const int64_t* s, int64_t n) {
        if (s[0] == sizeof(TO) && s[1] == sizeof(TA)) {
          TO* y = reinterpret_cast<TO*>(p[0]);
          const TA* x = reinterpret_cast<const TA*>(p[1]);
          for (int64_t i = 0; i < n; ++i) y[i] = f(x[i]);
        } else {
          for (int64_t i = 0; i < n; ++i)
            *reinterpret_cast<TO*>(p[0] + i * s[0]) = f(*reinterpret_cast<const TA*>(p[1] + i * s[1]));
        }
      },
      grain);
}

template <typename TO, typename TA, typename TB, typename F>
void loop2(const Tensor& out, const Tensor& a, const Tensor& b, F f, int64_t grain = kParallelGrain) {
  for_each_row_tiled<3>(
      out, {&a, &b},
      [&f](char* const* p, const int64_t* s, int64_t n) {
        if (s[0] == sizeof(TO) && s[1] == sizeof(TA) && s[2] == sizeof(TB)) {
          TO* y = reinterpret_cast<TO*>(p[0]);
          const TA* x = reinterpret_cast<const TA*>(p[1]);
          const TB* z = reinterpret_cast<const TB*>(p[2]);
          for (int64_t i = 0; i < n; ++i) y[i] = f(x[i], z[i]);
        } else {
          for (int64_t i = 0; i < n; ++i)
            *reinterpret_cast<TO*>(p[0] + i * s[0]) =
                f(*reinterpret_cast<const TA*>(p[1] + i * s[1]), *reinterpret_cast<const TB*>(p[2] + i * s[2]));
        }
      },
      grain);
}

template <typename TO, typename TA, typename TB, typename TC, typename F>
void loop3(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& c, F f,
           int64_t grain = kParallelGrain) {
  for_each_row_tiled<4>(
      out, {&a, &b, &c},
      [&f](char* const* p, const int64_t* s, int64_t n) {
        for (int64_t i = 0; i < n; ++i)
          *reinterpret_cast<TO*>(p[0] + i * s[0]) =
              f(*reinterpret_cast<const TA*>(p[1] + i * s[1]), *reinterpret_cast<const TB*>(p[2] + i * s[2]),
                *reinterpret_cast<const TC*>(p[3] + i * s[3]));
      },
      grain);
}

// Row strides in elements when a float32 row can take the vector path
// (output contiguous, each input contiguous or a broadcast scalar).
inline bool f32_row_ok(const int64_t* s, int nops) {
  if (s[0] != 4) return false;
  for (int k = 1; k < nops; ++k)
    if (s[k] != 4 && s[k] != 0) return false;
  return true;
}

}  // namespace kiln::cpu
