// Indexing and joining: cat, stack (composite), index_select / index_add,
// gather / scatter_add (each pair is the other's derivative) and one_hot.
// Out-of-range indices throw kiln::Error before anything is written.
#include <cstring>

#include "kiln/ops.h"
#include "ops/cpu/copy.h"
#include "ops/cpu/loops.h"
#include "ops/cpu/reduce_kernels.h"
#include "ops/families.h"
#include "ops/op_def.h"

namespace kiln {
namespace {

// ---- cat ----
// PyTorch (still in 1.13) skips 1-D empty tensors of shape [0] in cat.
bool skipped_in_cat(const Tensor& t) { return t.dim() == 1 && t.shape()[0] == 0; }

std::vector<TensorMeta> cat_infer(TensorSpan in, const Attrs& a) {
  KILN_CHECK(!in.empty(), "cat: expects a non-empty list of tensors");
  const Tensor* ref = nullptr;
  for (const Tensor& t : in) {
    KILN_CHECK(t.defined(), "cat: got an undefined tensor in the list");
    KILN_CHECK(t.dim() > 0, "cat: zero-dimensional tensor cannot be concatenated; unsqueeze it first");
    if (!ref && !skipped_in_cat(t)) ref = &t;
  }
  DType dt = result_type(in);
  Device dev = common_device(in, "cat");
  if (!ref) return {{{0}, dt, dev}};
  int64_t d = wrap_dim(a.i("dim"), ref->dim(), "cat");
  Shape out = ref->shape();
  out[d] = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    const Tensor& t = in[i];
    if (skipped_in_cat(t)) continue;
    KILN_CHECK(t.dim() == ref->dim(), "cat: tensor ", i, " has ", t.dim(), " dims ", shape_str(t.shape()),
               " but tensor 0 has ", ref->dim(), " ", shape_str(ref->shape()), "; all tensors need the same number of dims");
    for (int64_t k = 0; k < t.dim(); ++k)
      KILN_CHECK(k == d || t.shape()[k] == ref->shape()[k], "cat: sizes must match except in dim ", d,
                 "; tensor ", i, " is ", shape_str(t.shape()), " and the first is ", shape_str(ref->shape()),
                 " (dim ", k, " differs)");
    out[d] += t.shape()[d];
  }
  return {{out, dt, dev}};
}
void cat_kernel(TensorSpan in, std::span<Tensor> out, const Attrs& a) {
  const Tensor& o = out[0];
  if (o.numel() == 0) return;
  int64_t d = wrap_dim(a.i("dim"), o.dim(), "cat");
  int64_t off = 0;
  for (const Tensor& t : in) {
    if (skipped_in_cat(t)) continue;
    int64_t n = t.shape()[d];
    if (n > 0) cpu::copy_cast(t, o.slice(d, off, off + n));
    off += n;
  }
}
Tensors cat_back(const BackwardCtx& c, TensorSpan g) {
  Tensors out(c.input_metas.size());
  const Tensor& gr = g[0];
  int64_t d = wrap_dim(c.attrs.i("dim"), gr.dim(), "cat");
  int64_t off = 0;
  for (size_t i = 0; i < c.input_metas.size(); ++i) {
    const Shape& s = c.input_metas[i].shape;
    if (s.size() == 1 && s[0] == 0) {
      if (c.needs_grad[i]) out[i] = zeros({0}, dtype(gr.dtype()).with_device(gr.device()));
      continue;
    }
    if (c.needs_grad[i]) out[i] = gr.slice(d, off, off + s[d]);
    off += s[d];
  }
  return out;
}

// ---- stack ----
Tensors stack_dec(TensorSpan in, const Attrs& a) {
  KILN_CHECK(!in.empty(), "stack: expects a non-empty list of tensors");
  int64_t d = wrap_dim(a.i("dim"), in[0].dim() + 1, "stack");
  Tensors parts;
  for (size_t i = 0; i < in.size(); ++i) {
    KILN_CHECK(in[i].shape() == in[0].shape(), "stack: expects each tensor to be equal size, but got ",
               shape_str(in[0].shape()), " at entry 0 and ", shape_str(in[i].shape()), " at entry ", i);
    parts.push_back(in[i].unsqueeze(d));
  }
  return {cat(parts, d)};
}

// ---- shared index checks ----
void check_index_dtype(const Tensor& index, const char* op) {
  KILN_CHECK(index.dtype() == DType::Int64 || index.dtype() == DType::Int32, op,
             ": index must be int64 (or int32), got ", dtype_name(index.dtype()), "; cast it with .to(DType::Int64)");
}
// The index as contiguous int64.
Tensor index_i64(const Tensor& index) {
  Tensor i = cpu::contiguous_nograd(index);
  if (i.dtype() != DType::Int64) {
    i = i.detach().to(DType::Int64);
  }
  return i;
}
void check_range(const int64_t* p, int64_t n, int64_t size, const char* op, int64_t dim, const Shape& shape) {
  for (int64_t i = 0; i < n; ++i)
    KILN_CHECK(p[i] >= -size && p[i] < size, op, ": index ", p[i], " is out of range for dim ", dim, " of size ",
               size, " (tensor shape ", shape_str(shape), "); indices must be in [", -size, ", ", size, ")");
}
inline int64_t wrap_index(int64_t i, int64_t size) { return i < 0 ? i + size : i; }

using cpu::Around;
using cpu::around;

// ---- index_select ----
std::vector<TensorMeta> index_select_infer(TensorSpan in, const Attrs& a) {
  const Tensor &x = in[0], &index = in[1];
  int64_t d = wrap_dim(a.i("dim"), x.dim(), "index_select");
  check_index_dtype(index, "index_select");
  KILN_CHECK(index.dim() <= 1, "index_select: index must be 0-dim or 1-D, got ", shape_str(index.shape()),
             "; flatten it first");
  Shape out = x.shape();
  if (x.dim() > 0) out[d] = index.numel();
  else KILN_CHECK(index.numel() == 1, "index_select: a 0-dim input takes exactly one index");
  return {{out, x.dtype(), x.device()}};
}
void index_select_kernel(TensorSpan in, std::span<Tensor> out, const Attrs& a) {
  Tensor x = cpu::contiguous_nograd(in[0]);
  Tensor idx = index_i64(in[1]);
  int64_t d = wrap_dim(a.i("dim"), x.dim(), "index_select");
  Around g = around(x.shape(), d);
  int64_t K = idx.numel();
  const int64_t* ip = idx.data<int64_t>();
  check_range(ip, K, g.D, "index_select", d, x.shape());
  const Tensor& o = out[0];
  size_t row = static_cast<size_t>(g.inner) * x.itemsize();
  const char* xp = static_cast<const char*>(x.data_ptr());
  char* op = static_cast<char*>(o.data_ptr());
  cpu::parallel_for(g.outer * K, std::max<int64_t>(1, cpu::kParallelGrain / std::max<int64_t>(g.inner, 1)),
                    [&](int64_t b, int64_t e) {
                      for (int64_t u = b; u < e; ++u) {
                        int64_t oi = u / K, k = u % K;
                        int64_t src = oi * g.D + wrap_index(ip[k], g.D);
                        std::memcpy(op + u * row, xp + src * row, row);
                      }
                    });
}
Tensors index_select_back(const BackwardCtx& c, TensorSpan g) {
  const TensorMeta& m = c.input_metas[0];
  int64_t d = c.attrs.i("dim");
  return {index_add(zeros(m.shape, dtype(g[0].dtype()).with_device(g[0].device())), d, c.inputs[1], g[0]), Tensor()};
}

// ---- index_add: out = x; out[index[k]] += source[k] along dim ----
std::vector<TensorMeta> index_add_infer(TensorSpan in, const Attrs& a) {
  const Tensor &x = in[0], &index = in[1], &src = in[2];
  int64_t d = wrap_dim(a.i("dim"), x.dim(), "index_add");
  check_index_dtype(index, "index_add");
  KILN_CHECK(index.dim() <= 1, "index_add: index must be 0-dim or 1-D, got ", shape_str(index.shape()));
  Shape want = x.shape();
  if (x.dim() > 0) want[d] = index.numel();
  KILN_CHECK(src.shape() == want || (x.dim() == 0 && src.numel() == 1), "index_add: source ",
             shape_str(src.shape()), " must be ", shape_str(want), " (the input ", shape_str(x.shape()),
             " with dim ", d, " = the ", index.numel(), " indices)");
  KILN_CHECK(src.dtype() == x.dtype(), "index_add: source dtype ", dtype_name(src.dtype()),
             " must match the input's ", dtype_name(x.dtype()));
  return {{x.shape(), x.dtype(), x.device()}};
}
void index_add_kernel(TensorSpan in, std::span<Tensor> out, const Attrs& a) {
  const Tensor& o = out[0];
  Tensor idx = index_i64(in[1]);
  Tensor src = cpu::contiguous_nograd(in[2]);
  int64_t d = wrap_dim(a.i("dim"), o.dim(), "index_add");
  Around g = around(o.shape(), d);
  int64_t K = idx.numel();
  const int64_t* ip = idx.data<int64_t>();
  check_range(ip, K, g.D, "index_add", d, o.shape());
  cpu::copy_cast(in[0], o);
  visit_dtype(o.dtype(), [&]<typename T>() {
    T* op = static_cast<T*>(o.data_ptr());
    const T* sp = static_cast<const T*>(src.data_ptr());
    // Parallel over outer only: duplicate indices write the same rows.
    cpu::parallel_for(g.outer, std::max<int64_t>(1, cpu::kParallelGrain / std::max<int64_t>(K * g.inner, 1)),
                      [&](int64_t b, int64_t e) {
                        for (int64_t oi = b; oi < e; ++oi)
                          for (int64_t k = 0; k < K; ++k) {
                            T* dst = op + (oi * g.D + wrap_index(ip[k], g.D)) * g.inner;
                            const T* s = sp + (oi * K + k) * g.inner;
                            for (int64_t j = 0; j < g.inner; ++j) {
                              if constexpr (std::is_same_v<T, bool>) dst[j] = dst[j] || s[j];
                              else if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>)
                                dst[j] = T(static_cast<float>(dst[j]) + static_cast<float>(s[j]));
                              else dst[j] = static_cast<T>(dst[j] + s[j]);
                            }
                          }
                      });
  });
}
Tensors index_add_back(const BackwardCtx& c, TensorSpan g) {
  Tensors r(3);
  if (c.needs_grad[0]) r[0] = g[0];
  if (c.needs_grad[2]) r[2] = index_select(g[0], c.attrs.i("dim"), c.inputs[1]).reshape(c.input_metas[2].shape);
  return r;
}

// ---- gather / scatter_add: walk every position of `index` ----
// Calls f(pos, a_off, b_off, idx) where pos is the flat position in index,
// a_off the offset (without dim) in a tensor with strides sa, b_off in one
// with strides sb.
template <typename F>
void walk_index(const Shape& is, int64_t dim, const Shape& sa, const Shape& sb, int64_t begin, int64_t end, F&& f) {
  int64_t nd = static_cast<int64_t>(is.size());
  std::vector<int64_t> cnt(static_cast<size_t>(nd), 0);
  int64_t rem = begin;
  for (int64_t k = nd - 1; k >= 0; --k) {
    cnt[k] = rem % is[k];
    rem /= is[k];
  }
  for (int64_t pos = begin; pos < end; ++pos) {
    int64_t ao = 0, bo = 0;
    for (int64_t k = 0; k < nd; ++k) {
      bo += cnt[k] * sb[k];
      if (k != dim) ao += cnt[k] * sa[k];
    }
    f(pos, ao, bo);
    for (int64_t k = nd - 1; k >= 0; --k) {
      if (++cnt[k] < is[k]) break;
      cnt[k] = 0;
    }
  }
}

void check_gather_shapes(const Tensor& x, int64_t d, const Tensor& index, const Tensor* src, const char* op) {
  check_index_dtype(index, op);
  KILN_CHECK(index.dtype() == DType::Int64, op, ": index must be int64, got ", dtype_name(index.dtype()));
  KILN_CHECK(index.dim() == x.dim() || (index.dim() <= 1 && x.dim() <= 1), op, ": index ", shape_str(index.shape()),
             " must have as many dims as the input ", shape_str(x.shape()));
  for (int64_t k = 0; k < index.dim() && x.dim() > 0; ++k) {
    KILN_CHECK(k == d || index.shape()[k] <= x.shape()[k], op, ": index ", shape_str(index.shape()),
               " is larger than the input ", shape_str(x.shape()), " in dim ", k, " (only dim ", d, " may be larger)");
    if (src)
      KILN_CHECK(index.shape()[k] <= src->shape()[k], op, ": index ", shape_str(index.shape()),
                 " is larger than src ", shape_str(src->shape()), " in dim ", k);
  }
}

std::vector<TensorMeta> gather_infer(TensorSpan in, const Attrs& a) {
  const Tensor &x = in[0], &index = in[1];
  int64_t d = wrap_dim(a.i("dim"), x.dim(), "gather");
  check_gather_shapes(x, d, index, nullptr, "gather");
  return {{index.shape(), x.dtype(), x.device()}};
}
void gather_kernel(TensorSpan in, std::span<Tensor> out, const Attrs& a) {
  Tensor x = cpu::contiguous_nograd(in[0]);
  Tensor idx = index_i64(in[1]);
  const Tensor& o = out[0];
  int64_t d = wrap_dim(a.i("dim"), x.dim(), "gather");
  int64_t size = x.dim() == 0 ? 1 : x.shape()[d];
  int64_t dstride = x.dim() == 0 ? 0 : x.strides()[d];
  const int64_t* ip = idx.data<int64_t>();
  check_range(ip, idx.numel(), size, "gather", d, x.shape());
  Shape is = idx.shape(), xs = x.strides(), os = contiguous_strides(is);
  if (x.dim() == 0) xs = Shape(is.size(), 0);
  visit_dtype(x.dtype(), [&]<typename T>() {
    const T* xp = static_cast<const T*>(x.data_ptr());
    T* op = static_cast<T*>(o.data_ptr());
    cpu::parallel_for(idx.numel(), cpu::kParallelGrain, [&](int64_t b, int64_t e) {
      walk_index(is, d, xs, os, b, e, [&](int64_t pos, int64_t xo, int64_t) {
        op[pos] = xp[xo + wrap_index(ip[pos], size) * dstride];
      });
    });
  });
}
Tensors gather_back(const BackwardCtx& c, TensorSpan g) {
  const TensorMeta& m = c.input_metas[0];
  return {scatter_add(zeros(m.shape, dtype(g[0].dtype()).with_device(g[0].device())), c.attrs.i("dim"), c.inputs[1], g[0]), Tensor()};
}

std::vector<TensorMeta> scatter_add_infer(TensorSpan in, const Attrs& a) {
  const Tensor &x = in[0], &index = in[1], &src = in[2];
  int64_t d = wrap_dim(a.i("dim"), x.dim(), "scatter_add");
  KILN_CHECK(src.dim() == index.dim() || (src.dim() <= 1 && index.dim() <= 1), "scatter_add: src ",
             shape_str(src.shape()), " must have as many dims as index ", shape_str(index.shape()));
  check_gather_shapes(x, d, index, &src, "scatter_add");
  KILN_CHECK(src.dtype() == x.dtype(), "scatter_add: src dtype ", dtype_name(src.dtype()), " must match the input's ",
             dtype_name(x.dtype()));
  return {{x.shape(), x.dtype(), x.device()}};
}
void scatter_add_kernel(TensorSpan in, std::span<Tensor> out, const Attrs& a) {
  const Tensor& o = out[0];
  Tensor idx = index_i64(in[1]);
  Tensor src = cpu::contiguous_nograd(in[2]);
  int64_t d = wrap_dim(a.i("dim"), o.dim(), "scatter_add");
  int64_t size = o.dim() == 0 ? 1 : o.shape()[d];
  const int64_t* ip = idx.data<int64_t>();
  check_range(ip, idx.numel(), size, "scatter_add", d, o.shape());
  cpu::copy_cast(in[0], o);
  Shape is = idx.shape(), os = o.strides(), ss = src.strides();
  if (o.dim() == 0) os = Shape(is.size(), 0);
  if (src.dim() == 0) ss = Shape(is.size(), 0);
  int64_t dstride = o.dim() == 0 ? 0 : os[d];
  visit_dtype(o.dtype(), [&]<typename T>() {
    T* op = static_cast<T*>(o.data_ptr());
    const T* sp = static_cast<const T*>(src.data_ptr());
    // Serial: duplicate indices add into the same element.
    walk_index(is, d, os, ss, 0, idx.numel(), [&](int64_t pos, int64_t oo, int64_t so) {
      T& dst = op[oo + wrap_index(ip[pos], size) * dstride];
      if constexpr (std::is_same_v<T, bool>) dst = dst || sp[so];
      else if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>)
        dst = T(static_cast<float>(dst) + static_cast<float>(sp[so]));
      else dst = static_cast<T>(dst + sp[so]);
    });
  });
}
Tensors scatter_add_back(const BackwardCtx& c, TensorSpan g) {
  Tensors r(3);
  if (c.needs_grad[0]) r[0] = g[0];
  if (c.needs_grad[2]) {
    KILN_CHECK(c.input_metas[1].shape == c.input_metas[2].shape, "scatter_add: the gradient for src needs src ",
               shape_str(c.input_metas[2].shape), " to have the index's shape ", shape_str(c.input_metas[1].shape),
               "; slice src to the index's shape first");
    r[2] = gather(g[0], c.attrs.i("dim"), c.inputs[1]);
  }
  return r;
}

// ---- one_hot ----
std::vector<TensorMeta> one_hot_infer(TensorSpan in, const Attrs& a) {
  const Tensor& x = in[0];
  KILN_CHECK(x.dtype() == DType::Int64, "one_hot: indices must be int64, got ", dtype_name(x.dtype()),
             "; cast with .to(DType::Int64)");
  int64_t c = a.i("num_classes");
  KILN_CHECK(c >= 0, "one_hot: num_classes must be >= 0 (or -1 to infer it), got ", c);
  Shape s = x.shape();
  s.push_back(c);
  return {{s, DType::Int64, x.device()}};
}
void one_hot_kernel(TensorSpan in, std::span<Tensor> out, const Attrs& a) {
  Tensor x = cpu::contiguous_nograd(in[0]);
  int64_t c = a.i("num_classes");
  const int64_t* xp = x.data<int64_t>();
  for (int64_t i = 0; i < x.numel(); ++i)
    KILN_CHECK(xp[i] >= 0 && xp[i] < c, "one_hot: class value ", xp[i], " is out of range for ", c,
               " classes; values must be in [0, num_classes)");
  int64_t* op = out[0].data<int64_t>();
  std::fill(op, op + out[0].numel(), int64_t{0});
  for (int64_t i = 0; i < x.numel(); ++i) op[i * c + xp[i]] = 1;
}

}  // namespace

void register_index_ops() {
  define_op(kernel_op(OpId::cat, cat_infer, cat_kernel, cat_back, kSaveNone));
  define_op(composite_op(OpId::stack, stack_dec));
  define_op(kernel_op(OpId::index_select, index_select_infer, index_select_kernel, index_select_back, kSaveInputs));
  define_op(kernel_op(OpId::index_add, index_add_infer, index_add_kernel, index_add_back, kSaveInputs));
  define_op(kernel_op(OpId::gather, gather_infer, gather_kernel, gather_back, kSaveInputs));
  define_op(kernel_op(OpId::scatter_add, scatter_add_infer, scatter_add_kernel, scatter_add_back, kSaveInputs));
  define_op(kernel_op(OpId::one_hot, one_hot_infer, one_hot_kernel, nullptr, kSaveNone));
}

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  return dispatch1(OpId::cat, tensors, Attrs().set("dim", dim));
}
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  return dispatch1(OpId::stack, tensors, Attrs().set("dim", dim));
}
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  return dispatch1(OpId::index_select, {x, index}, Attrs().set("dim", dim));
}
Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& source) {
  return dispatch1(OpId::index_add, {x, index, source}, Attrs().set("dim", dim));
}
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  return dispatch1(OpId::gather, {x, index}, Attrs().set("dim", dim));
}
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  return dispatch1(OpId::scatter_add, {x, index, src}, Attrs().set("dim", dim));
}
Tensor one_hot(const Tensor& indices, int64_t num_classes) {
  if (num_classes == -1) {
    KILN_CHECK(indices.numel() > 0, "one_hot: cannot infer the number of classes from an empty tensor; pass num_classes");
    KILN_CHECK(indices.dtype() == DType::Int64, "one_hot: indices must be int64, got ", dtype_name(indices.dtype()));
    NoGradGuard ng;
    num_classes = static_cast<int64_t>(amax(indices).item()) + 1;
  }
  return dispatch1(OpId::one_hot, {indices}, Attrs().set("num_classes", num_classes));
}

}  // namespace kiln
