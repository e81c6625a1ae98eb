// Reductions (sum, mean, amax, amin, argmax, var), softmax/log_softmax and
// their backward ops, and sum_to. The kernels are in cpu/reduce_kernels.cpp
// (passes over [outer, R, inner]); the derivatives are written with public ops.
#include <immintrin.h>
#include <sleef.h>

#include <cmath>
#include <limits>

#include "kiln/ops.h"
#include "ops/cpu/copy.h"
#include "ops/cpu/loops.h"
#include "ops/cpu/reduce_kernels.h"
#include "ops/families.h"
#include "ops/op_def.h"

namespace kiln {
namespace {

std::vector<int64_t> reduce_dims(const Attrs& a, int64_t ndim, const char* op) {
  return wrap_dims(a.ints("dims"), ndim, op);
}

Shape reduced_shape(const Shape& s, const std::vector<int64_t>& dims, bool keepdim) {
  Shape out;
  size_t k = 0;
  for (size_t d = 0; d < s.size(); ++d) {
    bool red = k < dims.size() && dims[k] == static_cast<int64_t>(d);
    if (red) ++k;
    if (!red) out.push_back(s[d]);
    else if (keepdim) out.push_back(1);
  }
  return out;
}

int64_t reduced_count(const Shape& s, const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= s[d];
  return n;
}

// The gradient of a reduction's output, broadcast back to the input's shape.
Tensor expand_back(const Tensor& g, const Shape& input_shape, const std::vector<int64_t>& dims, bool keepdim) {
  Tensor r = g;
  if (!keepdim && !input_shape.empty())
    for (int64_t d : dims) r = r.unsqueeze(d);
  return r.expand(input_shape);
}
Tensor keep_dims(const Tensor& t, size_t ndim, const std::vector<int64_t>& dims, bool keepdim) {
  Tensor r = t;
  if (!keepdim && ndim > 0)
    for (int64_t d : dims) r = r.unsqueeze(d);
  return r;
}

std::vector<TensorMeta> reduce_infer_as(TensorSpan in, const Attrs& a, const char* op, DType out_dtype) {
  const Tensor& x = in[0];
  auto dims = reduce_dims(a, x.dim(), op);
  return {{reduced_shape(x.shape(), dims, a.b("keepdim")), out_dtype, x.device()}};
}

// ---- sum ----
std::vector<TensorMeta> sum_infer(TensorSpan in, const Attrs& a) {
  DType t = in[0].dtype();
  return reduce_infer_as(in, a, "sum", is_floating(t) ? t : DType::Int64);
}
void sum_kernel(TensorSpan in, std::span<Tensor> out, const Attrs& a) {
  cpu::reduce(in[0], reduce_dims(a, in[0].dim(), "sum"), cpu::ReduceOp::Sum, out[0]);
}
Tensors sum_back(const BackwardCtx& c, TensorSpan g) {
  const Shape& s = c.input_metas[0].shape;
  auto dims = wrap_dims(c.attrs.ints("dims"), static_cast<int64_t>(s.size()), "sum");
  return {expand_back(g[0], s, dims, c.attrs.b("keepdim"))};
}

// ---- mean ----
std::vector<TensorMeta> mean_infer(TensorSpan in, const Attrs& a) {
  DType t = in[0].dtype();
  KILN_CHECK(is_floating(t), "mean: input dtype ", dtype_name(t),
             " is not floating point; mean of integers is not defined (as in PyTorch). Cast first, e.g. "
             "mean(x.to(DType::Float32))");
  return reduce_infer_as(in, a, "mean", t);
}
void mean_kernel(TensorSpan in, std::span<Tensor> out, const Attrs& a) {
  auto dims = reduce_dims(a, in[0].dim(), "mean");
  int64_t n = reduced_count(in[0].shape(), dims);
  Tensor o = out[0];
  Tensor acc = Tensor::empty(o.shape(), DType::Float64);
  cpu::reduce(in[0], dims, cpu::ReduceOp::Sum, acc);
  double* p = acc.data<double>();
  double inv = 1.0 / static_cast<double>(n);
  for (int64_t i = 0; i < acc.numel(); ++i) p[i] = n == 0 ? std::numeric_limits<double>::quiet_NaN() : p[i] * inv;
  cpu::copy_cast(acc, o);
}
Tensors mean_back(const BackwardCtx& c, TensorSpan g) {
  const Shape& s = c.input_metas[0].shape;
  auto dims = wrap_dims(c.attrs.ints("dims"), static_cast<int64_t>(s.size()), "mean");
  double n = static_cast<double>(reduced_count(s, dims));
  return {expand_back(mul(g[0], 1.0 / n), s, dims, c.attrs.b("keepdim"))};
}

// ---- amax / amin ----
std::vector<TensorMeta> extreme_infer(TensorSpan in, const Attrs& a, const char* op) {
  const Tensor& x = in[0];
  auto dims = reduce_dims(a, x.dim(), op);
  if (x.numel() == 0) {
    for (int64_t d : dims)
      KILN_CHECK(x.shape()[d] != 0, op, ": cannot reduce over dim ", d, " of size 0 (shape ", shape_str(x.shape()),
                 "); the maximum/minimum of no elements is undefined");
  }
  return {{reduced_shape(x.shape(), dims, a.b("keepdim")), x.dtype(), x.device()}};
}
std::vector<TensorMeta> amax_infer(TensorSpan in, const Attrs& a) { return extreme_infer(in, a, "amax"); }
std::vector<TensorMeta> amin_infer(TensorSpan in, const Attrs& a) { return extreme_infer(in, a, "amin"); }
void amax_kernel(TensorSpan in, std::span<Tensor> out, const Attrs& a) {
  cpu::reduce(in[0], reduce_dims(a, in[0].dim(), "amax"), cpu::ReduceOp::Max, out[0]);
}
void amin_kernel(TensorSpan in, std::span<Tensor> out, const Attrs& a) {
  cpu::reduce(in[0], reduce_dims(a, in[0].dim(), "amin"), cpu::ReduceOp::Min, out[0]);
}
// PyTorch's amax/amin derivative: the gradient is shared equally by the ties.
Tensors extreme_back(const BackwardCtx& c, TensorSpan g) {
  const Tensor& x = c.inputs[0];
  const Shape& s = x.shape();
  auto dims = wrap_dims(c.attrs.ints("dims"), x.dim(), "amax");
  bool keepdim = c.attrs.b("keepdim");
  Tensor mask = eq(x, keep_dims(c.outputs[0], s.size(), dims, keepdim));
  Tensor count = x.dim() == 0 ? sum(mask) : sum(mask, dims, true);
  Tensor share = div(keep_dims(g[0], s.size(), dims, keepdim), count);
  return {where(mask, share, scalar_tensor(0.0, g[0].dtype()))};
}

// ---- argmax ----
std::vector<TensorMeta> argmax_infer(TensorSpan in, const Attrs& a) {
  const Tensor& x = in[0];
  int64_t d = wrap_dim(a.i("dim"), x.dim(), "argmax");
  KILN_CHECK(x.dim() == 0 || x.shape()[d] != 0, "argmax: cannot take the argmax over dim ", d,
             " of size 0 (shape ", shape_str(x.shape()), ")");
  KILN_CHECK(x.dtype() != DType::Bool, "argmax: bool input is not supported; cast it to an integer type first");
  Shape out = x.dim() == 0 ? Shape{} : reduced_shape(x.shape(), {d}, a.b("keepdim"));
  return {{out, DType::Int64, x.device()}};
}
void argmax_kernel(TensorSpan in, std::span<Tensor> out, const Attrs& a) {
  cpu::argmax(in[0], wrap_dim(a.i("dim"), in[0].dim(), "argmax"), out[0]);
}

// ---- var ----
std::vector<TensorMeta> var_infer(TensorSpan in, const Attrs& a) {
  DType t = in[0].dtype();
  KILN_CHECK(is_floating(t), "var: input dtype ", dtype_name(t),
             " is not floating point; var is only defined for floating types. Cast first, e.g. x.to(DType::Float32)");
  return reduce_infer_as(in, a, "var", t);
}
void var_kernel(TensorSpan in, std::span<Tensor> out, const Attrs& a) {
  cpu::variance(in[0], reduce_dims(a, in[0].dim(), "var"), a.i("correction"), out[0]);
}
Tensors var_back(const BackwardCtx& c, TensorSpan g) {
  const Tensor& x = c.inputs[0];
  auto dims = wrap_dims(c.attrs.ints("dims"), x.dim(), "var");
  int64_t n = reduced_count(x.shape(), dims);
  double div = std::max<double>(0.0, static_cast<double>(n - c.attrs.i("correction")));
  Tensor centered = sub(x, mean(x, dims, true));
  Tensor gk = keep_dims(g[0], x.shape().size(), dims, c.attrs.b("keepdim"));
  return {mul(mul(centered, gk), 2.0 / div)};
}

// ---- softmax / log_softmax ----
using cpu::Around;
using cpu::around;

// y[i] = exp(y[i]) over a contiguous run.
inline void exp_inplace(float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, Sleef_expf8_u10avx2(_mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] = std::exp(y[i]);
}
inline void exp_inplace(double* y, int64_t n) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) _mm256_storeu_pd(y + i, Sleef_expd4_u10avx2(_mm256_loadu_pd(y + i)));
  for (; i < n; ++i) y[i] = std::exp(y[i]);
}

constexpr int64_t kTile = 64;

template <typename T, bool Log>
void softmax_typed(const T* x, T* y, Around g) {
  const int64_t D = g.D, inner = g.inner;
  if (inner == 1) {
    cpu::parallel_for(g.outer, std::max<int64_t>(1, cpu::kParallelGrain / std::max<int64_t>(D, 1)),
                      [&](int64_t b, int64_t e) {
                        for (int64_t o = b; o < e; ++o) {
                          const T* xr = x + o * D;
                          T* yr = y + o * D;
                          T m = -std::numeric_limits<T>::infinity();
                          for (int64_t i = 0; i < D; ++i) m = xr[i] > m ? xr[i] : m;
                          if (std::isinf(m)) m = 0;  // all -inf rows: keep exp finite
#pragma omp simd
                          for (int64_t i = 0; i < D; ++i) yr[i] = xr[i] - m;
                          exp_inplace(yr, D);
                          T s = 0;
#pragma omp simd reduction(+ : s)
                          for (int64_t i = 0; i < D; ++i) s += yr[i];
                          if constexpr (Log) {
                            T sh = m + std::log(s);
#pragma omp simd
                            for (int64_t i = 0; i < D; ++i) yr[i] = xr[i] - sh;
                          } else {
                            T inv = T(1) / s;
#pragma omp simd
                            for (int64_t i = 0; i < D; ++i) yr[i] *= inv;
                          }
                        }
                      });
    return;
  }
  const int64_t tiles = (inner + kTile - 1) / kTile;
  cpu::parallel_for(g.outer * tiles, std::max<int64_t>(1, cpu::kParallelGrain / std::max<int64_t>(D * kTile, 1)),
                    [&](int64_t b, int64_t e) {
                      T m[kTile], s[kTile];
                      for (int64_t u = b; u < e; ++u) {
                        int64_t o = u / tiles, j0 = (u % tiles) * kTile, w = std::min(inner - j0, kTile);
                        const T* xb = x + o * D * inner + j0;
                        T* yb = y + o * D * inner + j0;
                        for (int64_t j = 0; j < w; ++j) m[j] = -std::numeric_limits<T>::infinity();
                        for (int64_t r = 0; r < D; ++r) {
#pragma omp simd
                          for (int64_t j = 0; j < w; ++j) m[j] = xb[r * inner + j] > m[j] ? xb[r * inner + j] : m[j];
                        }
                        for (int64_t j = 0; j < w; ++j) {
                          if (std::isinf(m[j])) m[j] = 0;
                          s[j] = 0;
                        }
                        for (int64_t r = 0; r < D; ++r) {
                          T* yr = yb + r * inner;
                          const T* xr = xb + r * inner;
#pragma omp simd
                          for (int64_t j = 0; j < w; ++j) yr[j] = xr[j] - m[j];
                          exp_inplace(yr, w);
#pragma omp simd
                          for (int64_t j = 0; j < w; ++j) s[j] += yr[j];
                        }
                        if constexpr (Log) {
                          for (int64_t j = 0; j < w; ++j) s[j] = m[j] + std::log(s[j]);
                          for (int64_t r = 0; r < D; ++r) {
#pragma omp simd
                            for (int64_t j = 0; j < w; ++j) yb[r * inner + j] = xb[r * inner + j] - s[j];
                          }
                        } else {
                          for (int64_t j = 0; j < w; ++j) s[j] = T(1) / s[j];
                          for (int64_t r = 0; r < D; ++r) {
#pragma omp simd
                            for (int64_t j = 0; j < w; ++j) yb[r * inner + j] *= s[j];
                          }
                        }
                      }
                    });
}

// Runs f.template operator()<C>(inputs as C, output as C) with C = float or
// double: 16-bit floats go through float32 copies.
template <typename F>
void with_compute_type(std::vector<Tensor> ins, const Tensor& out, F&& f) {
  DType t = out.dtype();
  bool narrow = t == DType::Float16 || t == DType::BFloat16;
  DType c = narrow ? DType::Float32 : t;
  for (Tensor& x : ins) {
    x = cpu::contiguous_nograd(x);
    if (x.dtype() != c) {
      x = x.detach().to(c);
    }
  }
  Tensor o = narrow ? Tensor::empty(out.shape(), c) : out;
  if (c == DType::Float32) f.template operator()<float>(ins, o);
  else f.template operator()<double>(ins, o);
  if (narrow) cpu::copy_cast(o, out);
}

std::vector<TensorMeta> softmax_infer_as(TensorSpan in, const Attrs& a, const char* op) {
  const Tensor& x = in[0];
  wrap_dim(a.i("dim"), x.dim(), op);
  KILN_CHECK(is_floating(x.dtype()), op, ": input dtype ", dtype_name(x.dtype()),
             " is not floating point; cast it first, e.g. x.to(DType::Float32)");
  return {{x.shape(), x.dtype(), x.device()}};
}
std::vector<TensorMeta> softmax_infer(TensorSpan in, const Attrs& a) { return softmax_infer_as(in, a, "softmax"); }
std::vector<TensorMeta> log_softmax_infer(TensorSpan in, const Attrs& a) {
  return softmax_infer_as(in, a, "log_softmax");
}
template <bool Log>
void softmax_kernel(TensorSpan in, std::span<Tensor> out, const Attrs& a) {
  if (out[0].numel() == 0) return;
  Around g = around(in[0].shape(), wrap_dim(a.i("dim"), in[0].dim(), "softmax"));
  with_compute_type({in[0]}, out[0], [&]<typename C>(const std::vector<Tensor>& xs, const Tensor& o) {
    softmax_typed<C, Log>(static_cast<const C*>(xs[0].data_ptr()), static_cast<C*>(o.data_ptr()), g);
  });
}
Tensors softmax_back(const BackwardCtx& c, TensorSpan g) {
  return {dispatch1(OpId::softmax_backward, {g[0], c.outputs[0]}, Attrs().set("dim", c.attrs.i("dim")))};
}
Tensors log_softmax_back(const BackwardCtx& c, TensorSpan g) {
  return {dispatch1(OpId::log_softmax_backward, {g[0], c.outputs[0]}, Attrs().set("dim", c.attrs.i("dim")))};
}

// ---- softmax_backward: gx = y * (g - sum(g * y)); log_softmax_backward: gx = g - exp(y) * sum(g) ----
std::vector<TensorMeta> softmax_backward_infer(TensorSpan in, const Attrs& a) {
  KILN_CHECK(in[0].shape() == in[1].shape(), "softmax_backward: grad ", shape_str(in[0].shape()), " and output ",
             shape_str(in[1].shape()), " must have the same shape");
  wrap_dim(a.i("dim"), in[1].dim(), "softmax_backward");
  return {{in[1].shape(), in[1].dtype(), in[1].device()}};
}

template <typename T, bool Log>
void softmax_backward_typed(const T* gp, const T* yp, T* out, Around g) {
  const int64_t D = g.D, inner = g.inner;
  const int64_t tiles = (inner + kTile - 1) / kTile;
  cpu::parallel_for(g.outer * tiles, std::max<int64_t>(1, cpu::kParallelGrain / std::max<int64_t>(D * kTile, 1)),
                    [&](int64_t b, int64_t e) {
                      T s[kTile];
                      for (int64_t u = b; u < e; ++u) {
                        int64_t o = u / tiles, j0 = (u % tiles) * kTile, w = std::min(inner - j0, kTile);
                        int64_t base = o * D * inner + j0;
                        const T* gb = gp + base;
                        const T* yb = yp + base;
                        T* ob = out + base;
                        for (int64_t j = 0; j < w; ++j) s[j] = 0;
                        if (inner == 1) {
                          T acc = 0;
                          if constexpr (Log) {
#pragma omp simd reduction(+ : acc)
                            for (int64_t r = 0; r < D; ++r) acc += gb[r];
#pragma omp simd
                            for (int64_t r = 0; r < D; ++r) ob[r] = yb[r];
                            exp_inplace(ob, D);
#pragma omp simd
                            for (int64_t r = 0; r < D; ++r) ob[r] = gb[r] - ob[r] * acc;
                          } else {
#pragma omp simd reduction(+ : acc)
                            for (int64_t r = 0; r < D; ++r) acc += gb[r] * yb[r];
#pragma omp simd
                            for (int64_t r = 0; r < D; ++r) ob[r] = yb[r] * (gb[r] - acc);
                          }
                          continue;
                        }
                        for (int64_t r = 0; r < D; ++r) {
#pragma omp simd
                          for (int64_t j = 0; j < w; ++j) {
                            if constexpr (Log) s[j] += gb[r * inner + j];
                            else s[j] += gb[r * inner + j] * yb[r * inner + j];
                          }
                        }
                        for (int64_t r = 0; r < D; ++r) {
                          int64_t k = r * inner;
                          if constexpr (Log) {
#pragma omp simd
                            for (int64_t j = 0; j < w; ++j) ob[k + j] = yb[k + j];
                            exp_inplace(ob + k, w);
#pragma omp simd
                            for (int64_t j = 0; j < w; ++j) ob[k + j] = gb[k + j] - ob[k + j] * s[j];
                          } else {
#pragma omp simd
                            for (int64_t j = 0; j < w; ++j) ob[k + j] = yb[k + j] * (gb[k + j] - s[j]);
                          }
                        }
                      }
                    });
}
template <bool Log>
void softmax_backward_kernel(TensorSpan in, std::span<Tensor> out, const Attrs& a) {
  if (out[0].numel() == 0) return;
  Around g = around(in[1].shape(), wrap_dim(a.i("dim"), in[1].dim(), "softmax_backward"));
  with_compute_type({in[0], in[1]}, out[0], [&]<typename C>(const std::vector<Tensor>& xs, const Tensor& o) {
    softmax_backward_typed<C, Log>(static_cast<const C*>(xs[0].data_ptr()), static_cast<const C*>(xs[1].data_ptr()),
                                   static_cast<C*>(o.data_ptr()), g);
  });
}

}  // namespace

void register_reduce_ops() {
  define_op(kernel_op(OpId::sum, sum_infer, sum_kernel, sum_back, kSaveNone));
  define_op(kernel_op(OpId::mean, mean_infer, mean_kernel, mean_back, kSaveNone));
  define_op(kernel_op(OpId::amax, amax_infer, amax_kernel, extreme_back, kSaveBoth));
  define_op(kernel_op(OpId::amin, amin_infer, amin_kernel, extreme_back, kSaveBoth));
  define_op(kernel_op(OpId::argmax, argmax_infer, argmax_kernel, nullptr, kSaveNone));
  define_op(kernel_op(OpId::var, var_infer, var_kernel, var_back, kSaveInputs));
  define_op(kernel_op(OpId::softmax, softmax_infer, softmax_kernel<false>, softmax_back, kSaveOutputs));
  define_op(kernel_op(OpId::log_softmax, log_softmax_infer, softmax_kernel<true>, log_softmax_back, kSaveOutputs));
  define_op(kernel_op(OpId::softmax_backward, softmax_backward_infer, softmax_backward_kernel<false>, nullptr,
                      kSaveNone));
  define_op(kernel_op(OpId::log_softmax_backward, softmax_backward_infer, softmax_backward_kernel<true>, nullptr,
                      kSaveNone));
}

// ---- public functions ----
namespace {
Attrs reduce_attrs(const std::vector<int64_t>& dims, bool keepdim) {
  return Attrs().set("dims", dims).set("keepdim", keepdim);
}
}  // namespace

Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return dispatch1(OpId::sum, {x}, reduce_attrs(dims, keepdim));
}
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return dispatch1(OpId::mean, {x}, reduce_attrs(dims, keepdim));
}
Tensor amax(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return dispatch1(OpId::amax, {x}, reduce_attrs(dims, keepdim));
}
Tensor amin(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return dispatch1(OpId::amin, {x}, reduce_attrs(dims, keepdim));
}
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim) {
  return dispatch1(OpId::argmax, {x}, Attrs().set("dim", dim).set("keepdim", keepdim));
}
Tensor var(const Tensor& x, const std::vector<int64_t>& dims, int64_t correction, bool keepdim) {
  return dispatch1(OpId::var, {x}, reduce_attrs(dims, keepdim).set("correction", correction));
}
Tensor softmax(const Tensor& x, int64_t dim) { return dispatch1(OpId::softmax, {x}, Attrs().set("dim", dim)); }
Tensor log_softmax(const Tensor& x, int64_t dim) {
  return dispatch1(OpId::log_softmax, {x}, Attrs().set("dim", dim));
}

Tensor sum_to(const Tensor& x, const Shape& shape) {
  if (x.shape() == shape) return x;
  int64_t nd = x.dim(), td = static_cast<int64_t>(shape.size());
  KILN_CHECK(td <= nd, "sum_to: cannot sum ", shape_str(x.shape()), " down to ", shape_str(shape),
             " (more dims); the target must be a shape that broadcasts to the input");
  int64_t lead = nd - td;
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < lead; ++d) dims.push_back(d);
  for (int64_t d = lead; d < nd; ++d) {
    int64_t want = shape[d - lead], have = x.shape()[d];
    KILN_CHECK(want == have || want == 1, "sum_to: cannot sum ", shape_str(x.shape()), " down to ", shape_str(shape),
               " (dim ", d, ": ", have, " vs ", want, "); the target must broadcast to the input");
    if (want == 1 && have != 1) dims.push_back(d);
  }
  Tensor r = dims.empty() ? x : sum(x, dims, true);
  return r.reshape(shape);
}

}  // namespace kiln
