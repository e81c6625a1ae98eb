// Views and layout: ops that share storage with their input, and the copies
// that materialize a layout. Views have no kernel; their derivatives map the
// gradient back to the input's shape.
#include <algorithm>
#include <numeric>

#include "kiln/ops.h"
#include "ops/cpu/copy.h"
#include "ops/families.h"
#include "kiln/memory_format.h"
#include "ops/op_def.h"

namespace kiln {
namespace {

Tensor make_view(const Tensor& base, Shape shape, Shape strides, int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = base.impl()->storage;
  impl->shape = std::move(shape);
  impl->strides = std::move(strides);
  impl->offset = offset;
  impl->dtype = base.dtype();
  return Tensor(std::move(impl));
}

// Resolves one -1 in a requested shape against numel; checks the product.
Shape infer_size(const Shape& requested, int64_t numel, const char* op, const Shape& from) {
  Shape out = requested;
  int64_t known = 1, infer_at = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      KILN_CHECK(infer_at < 0, op, ": shape ", shape_str(requested), " has more than one -1; give all sizes but one");
      infer_at = static_cast<int64_t>(i);
    } else {
      KILN_CHECK(out[i] >= 0, op, ": invalid size ", out[i], " in shape ", shape_str(requested),
                 "; sizes must be >= 0, with at most one -1 to infer a size");
      known *= out[i];
    }
  }
  if (infer_at >= 0) {
    KILN_CHECK(known != 0 && numel % known == 0, op, ": cannot view ", shape_str(from), " (", numel,
               " elements) as ", shape_str(requested), "; the sizes must multiply to ", numel);
    out[infer_at] = numel / known;
  }
  KILN_CHECK(numel_of(out) == numel, op, ": cannot view ", shape_str(from), " (", numel, " elements) as ",
             shape_str(requested), " (", numel_of(out), " elements); the sizes must multiply to ", numel);
  return out;
}

// Strides for viewing (shape, strides) as new_shape without copying, or
// nothing when the layout does not allow it (PyTorch's computeStride).
std::optional<Shape> view_strides(const Shape& shape, const Shape& strides, const Shape& new_shape) {
  if (shape.empty()) return Shape(new_shape.size(), 1);
  int64_t numel = numel_of(shape);
  if (numel == 0) return contiguous_strides(new_shape);
  Shape out(new_shape.size());
  int64_t view_d = static_cast<int64_t>(new_shape.size()) - 1;
  int64_t chunk_base_stride = strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    tensor_numel *= shape[d];
    if (d == 0 || (shape[d - 1] != 1 && strides[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_shape[view_d] == 1)) {
        out[view_d] = view_numel * chunk_base_stride;
        view_numel *= new_shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (d > 0) {
        chunk_base_stride = strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return out;
}

// ---- view ----
Tensor view_fn(TensorSpan in, const Attrs& a) {
  const Tensor& x = in[0];
  Shape shape = infer_size(a.ints("shape"), x.numel(), "view", x.shape());
  auto st = view_strides(x.shape(), x.strides(), shape);
  KILN_CHECK(st.has_value(), "view: cannot view a ", dtype_name(x.dtype()), shape_str(x.shape()),
             " tensor with strides ", shape_str(x.strides()), " as ", shape_str(shape),
             " without copying (its layout is not contiguous in those dims); use reshape() or call .contiguous() first");
  return make_view(x, shape, *st, x.offset());
}
Tensors reshape_back(const BackwardCtx& c, TensorSpan g) { return {g[0].reshape(c.input_metas[0].shape)}; }

// ---- permute ----
Tensor permute_fn(TensorSpan in, const Attrs& a) {
  const Tensor& x = in[0];
  const auto& dims = a.ints("dims");
  KILN_CHECK(static_cast<int64_t>(dims.size()) == x.dim(), "permute: got ", dims.size(), " dims ", shape_str(dims),
             " for a tensor of shape ", shape_str(x.shape()), "; give one entry per dim");
  Shape shape(dims.size()), strides(dims.size());
  std::vector<bool> seen(dims.size(), false);
  for (size_t i = 0; i < dims.size(); ++i) {
    int64_t d = wrap_dim(dims[i], x.dim(), "permute");
    KILN_CHECK(!seen[d], "permute: dim ", d, " appears twice in ", shape_str(dims), "; give a permutation");
    seen[d] = true;
    shape[i] = x.shape()[d];
    strides[i] = x.strides()[d];
  }
  return make_view(x, shape, strides, x.offset());
}
Tensors permute_back(const BackwardCtx& c, TensorSpan g) {
  const auto& dims = c.attrs.ints("dims");
  int64_t n = static_cast<int64_t>(dims.size());
  std::vector<int64_t> inv(dims.size());
  for (int64_t i = 0; i < n; ++i) inv[wrap_dim(dims[i], n, "permute")] = i;
  return {g[0].permute(inv)};
}

// ---- slice ----
Tensor slice_fn(TensorSpan in, const Attrs& a) {
  const Tensor& x = in[0];
  KILN_CHECK(x.dim() > 0, "slice: cannot slice a 0-dim tensor; unsqueeze it first");
  int64_t d = wrap_dim(a.i("dim"), x.dim(), "slice");
  int64_t start = a.i("start"), end = a.i("end"), step = a.i("step");
  Shape shape = x.shape(), strides = x.strides();
  int64_t size = shape[d];
  KILN_CHECK(step > 0, "slice: step must be positive, got ", step);
  start = start < 0 ? start + size : start;
  end = end < 0 ? end + size : end;
  start = std::clamp<int64_t>(start, 0, size);
  end = std::clamp<int64_t>(end, start, size);
  shape[d] = (end - start + step - 1) / step;
  strides[d] = x.strides()[d] * step;
  return make_view(x, shape, strides, x.offset() + start * x.strides()[d]);
}
Tensors slice_back(const BackwardCtx& c, TensorSpan g) {
  const Shape& in = c.input_metas[0].shape;
  int64_t d = wrap_dim(c.attrs.i("dim"), static_cast<int64_t>(in.size()), "slice");
  int64_t size = in[d], start = c.attrs.i("start"), end = c.attrs.i("end");
  start = std::clamp<int64_t>(start < 0 ? start + size : start, 0, size);
  end = std::clamp<int64_t>(end < 0 ? end + size : end, start, size);
  return {slice_backward(g[0], in, d, start, end, c.attrs.i("step"))};
}

// ---- select ----
Tensor select_fn(TensorSpan in, const Attrs& a) {
  const Tensor& x = in[0];
  KILN_CHECK(x.dim() > 0, "select: cannot index a 0-dim tensor");
  int64_t d = wrap_dim(a.i("dim"), x.dim(), "select");
  int64_t i = a.i("index"), size = x.shape()[d];
  KILN_CHECK(i >= -size && i < size, "select: index ", i, " is out of range for dim ", d, " of size ", size,
             " (shape ", shape_str(x.shape()), "); use an index in [", -size, ", ", size - 1, "]");
  if (i < 0) i += size;
  Shape shape = x.shape(), strides = x.strides();
  shape.erase(shape.begin() + d);
  strides.erase(strides.begin() + d);
  return make_view(x, shape, strides, x.offset() + i * x.strides()[d]);
}
Tensors select_back(const BackwardCtx& c, TensorSpan g) {
  const Shape& in = c.input_metas[0].shape;
  int64_t d = wrap_dim(c.attrs.i("dim"), static_cast<int64_t>(in.size()), "select");
  int64_t i = c.attrs.i("index");
  if (i < 0) i += in[d];
  return {slice_backward(g[0].unsqueeze(d), in, d, i, i + 1, 1)};
}

// ---- expand ----
Tensor expand_fn(TensorSpan in, const Attrs& a) {
  const Tensor& x = in[0];
  const Shape& req = a.ints("shape");
  KILN_CHECK(static_cast<int64_t>(req.size()) >= x.dim(), "expand: cannot expand ", shape_str(x.shape()), " to ",
             shape_str(req), " (fewer dims); give at least as many dims");
  size_t lead = req.size() - static_cast<size_t>(x.dim());
  Shape shape(req.size()), strides(req.size());
  for (size_t i = 0; i < req.size(); ++i) {
    if (i < lead) {
      KILN_CHECK(req[i] >= 0, "expand: size -1 is not allowed for a new leading dim in ", shape_str(req));
      shape[i] = req[i];
      strides[i] = 0;
      continue;
    }
    int64_t s = x.shape()[i - lead];
    int64_t r = req[i] == -1 ? s : req[i];
    KILN_CHECK(s == r || s == 1, "expand: dim ", i, " of size ", s, " cannot expand to ", r, " (", shape_str(x.shape()),
               " -> ", shape_str(req), "); only size-1 dims expand");
    shape[i] = r;
    strides[i] = (s == r) ? x.strides()[i - lead] : 0;
  }
  return make_view(x, shape, strides, x.offset());
}
Tensors expand_back(const BackwardCtx& c, TensorSpan g) { return {sum_to(g[0], c.input_metas[0].shape)}; }

// ---- squeeze / unsqueeze ----
Tensor squeeze_fn(TensorSpan in, const Attrs& a) {
  const Tensor& x = in[0];
  Shape shape, strides;
  int64_t only = a.has("dim") ? wrap_dim(a.i("dim"), x.dim(), "squeeze") : -1;
  for (int64_t d = 0; d < x.dim(); ++d) {
    bool drop = x.shape()[d] == 1 && (only < 0 || only == d);
    if (!drop) {
      shape.push_back(x.shape()[d]);
      strides.push_back(x.strides()[d]);
    }
  }
  return make_view(x, shape, strides, x.offset());
}
Tensor unsqueeze_fn(TensorSpan in, const Attrs& a) {
  const Tensor& x = in[0];
  int64_t d = wrap_dim(a.i("dim"), x.dim() + 1, "unsqueeze");
  Shape shape = x.shape(), strides = x.strides();
  int64_t st = d < x.dim() ? x.strides()[d] * x.shape()[d] : 1;
  shape.insert(shape.begin() + d, 1);
  strides.insert(strides.begin() + d, st);
  return make_view(x, shape, strides, x.offset());
}

// ---- as_strided ----
Tensor as_strided_fn(TensorSpan in, const Attrs& a) {
  const Tensor& x = in[0];
  const Shape& shape = a.ints("shape");
  const Shape& strides = a.ints("strides");
  int64_t offset = a.i("offset");
  KILN_CHECK(shape.size() == strides.size(), "as_strided: shape ", shape_str(shape), " and strides ",
             shape_str(strides), " differ in length");
  int64_t last = offset;
  for (size_t i = 0; i < shape.size(); ++i) {
    KILN_CHECK(shape[i] >= 0 && strides[i] >= 0, "as_strided: negative size or stride");
    if (shape[i] > 0) last += (shape[i] - 1) * strides[i];
  }
  int64_t cap = static_cast<int64_t>(x.impl()->storage->nbytes() / x.itemsize());
  KILN_CHECK(offset >= 0 && (numel_of(shape) == 0 || last < cap), "as_strided: shape ", shape_str(shape), " strides ",
             shape_str(strides), " offset ", offset, " reaches element ", last, " of a storage of ", cap, " elements");
  return make_view(x, shape, strides, offset);
}
Tensors as_strided_back(const BackwardCtx&, TensorSpan) {
  KILN_FAIL("as_strided: has no derivative (overlapping views are ambiguous); use view/slice/expand, which do");
}

// ---- composites ----
Tensors reshape_dec(TensorSpan in, const Attrs& a) {
  const Tensor& x = in[0];
  Shape shape = infer_size(a.ints("shape"), x.numel(), "reshape", x.shape());
  if (view_strides(x.shape(), x.strides(), shape)) return {x.view(shape)};
  return {x.contiguous().view(shape)};
}
Tensors flatten_dec(TensorSpan in, const Attrs& a) {
  const Tensor& x = in[0];
  if (x.dim() == 0) return {x.reshape({1})};
  int64_t s = wrap_dim(a.i("start"), x.dim(), "flatten"), e = wrap_dim(a.i("end"), x.dim(), "flatten");
  KILN_CHECK(s <= e, "flatten: start_dim ", s, " is after end_dim ", e);
  Shape shape(x.shape().begin(), x.shape().begin() + s);
  int64_t m = 1;
  for (int64_t d = s; d <= e; ++d) m *= x.shape()[d];
  shape.push_back(m);
  shape.insert(shape.end(), x.shape().begin() + e + 1, x.shape().end());
  return {x.reshape(shape)};
}
Tensors transpose_dec(TensorSpan in, const Attrs& a) {
  const Tensor& x = in[0];
  int64_t n = x.dim();
  if (n == 0) return {x};
  int64_t d0 = wrap_dim(a.i("dim0"), n, "transpose"), d1 = wrap_dim(a.i("dim1"), n, "transpose");
  std::vector<int64_t> dims(n);
  std::iota(dims.begin(), dims.end(), 0);
  std::swap(dims[d0], dims[d1]);
  return {x.permute(dims)};
}
// contiguous(x, MemoryFormat::ChannelsLast) sets memory_format; the copy
// then gets channels-last strides (ops/layout.h).
Tensors contiguous_dec(TensorSpan in, const Attrs& a) {
  const Tensor& x = in[0];
  if (a.has("memory_format") && a.s("memory_format") == "channels_last") {
    KILN_CHECK(x.dim() == 4, "contiguous(ChannelsLast): needs a 4-d [N, C, H, W] tensor, got ",
               dtype_name(x.dtype()), shape_str(x.shape()), "; use contiguous() for other ranks");
    if (is_contiguous(x, MemoryFormat::ChannelsLast)) return {x};
    return {dispatch1(OpId::copy, {x}, a)};
  }
  if (x.is_contiguous()) return {x};
  return {clone(x)};
}

// ---- copy (materialize contiguous) ----
std::vector<TensorMeta> copy_infer(TensorSpan in, const Attrs&) {
  return {{in[0].shape(), in[0].dtype(), in[0].device()}};
}
void copy_kernel(TensorSpan in, std::span<Tensor> out, const Attrs&) { cpu::copy_cast(in[0], out[0]); }
Tensors copy_back(const BackwardCtx&, TensorSpan g) { return {g[0]}; }

// ---- slice_backward ----
std::vector<TensorMeta> slice_backward_infer(TensorSpan in, const Attrs& a) {
  return {{a.ints("input_shape"), in[0].dtype(), in[0].device()}};
}
void slice_backward_kernel(TensorSpan in, std::span<Tensor> out, const Attrs& a) {
  Tensor& o = out[0];
  {
    o.fill_(0.0);
  }
  Tensor window = slice_fn(std::span<const Tensor>(&o, 1), a);
  cpu::copy_cast(in[0], window);
}
Tensors slice_backward_back(const BackwardCtx& c, TensorSpan g) {
  return {g[0].slice(c.attrs.i("dim"), c.attrs.i("start"), c.attrs.i("end"), c.attrs.i("step"))};
}

}  // namespace

void register_view_ops() {
  define_op(view_op(OpId::view, view_fn, reshape_back));
  define_op(view_op(OpId::permute, permute_fn, permute_back));
  define_op(view_op(OpId::slice, slice_fn, slice_back));
  define_op(view_op(OpId::select, select_fn, select_back));
  define_op(view_op(OpId::expand, expand_fn, expand_back));
  define_op(view_op(OpId::squeeze, squeeze_fn, reshape_back));
  define_op(view_op(OpId::unsqueeze, unsqueeze_fn, reshape_back));
  define_op(view_op(OpId::as_strided, as_strided_fn, as_strided_back));
  define_op(composite_op(OpId::reshape, reshape_dec));
  define_op(composite_op(OpId::flatten, flatten_dec));
  define_op(composite_op(OpId::transpose, transpose_dec));
  define_op(composite_op(OpId::contiguous, contiguous_dec));
  define_op(kernel_op(OpId::copy, copy_infer, copy_kernel, copy_back, kSaveNone));
  define_op(kernel_op(OpId::slice_backward, slice_backward_infer, slice_backward_kernel, slice_backward_back,
                      kSaveNone));
}

// ---- public functions ----
Tensor view(const Tensor& x, const Shape& shape) { return dispatch1(OpId::view, {x}, Attrs().set("shape", shape)); }
Tensor reshape(const Tensor& x, const Shape& shape) {
  return dispatch1(OpId::reshape, {x}, Attrs().set("shape", shape));
}
Tensor permute(const Tensor& x, const std::vector<int64_t>& dims) {
  return dispatch1(OpId::permute, {x}, Attrs().set("dims", dims));
}
Tensor transpose(const Tensor& x, int64_t d0, int64_t d1) {
  return dispatch1(OpId::transpose, {x}, Attrs().set("dim0", d0).set("dim1", d1));
}
Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step) {
  return dispatch1(OpId::slice, {x}, Attrs().set("dim", dim).set("start", start).set("end", end).set("step", step));
}
Tensor select(const Tensor& x, int64_t dim, int64_t index) {
  return dispatch1(OpId::select, {x}, Attrs().set("dim", dim).set("index", index));
}
Tensor expand(const Tensor& x, const Shape& shape) {
  return dispatch1(OpId::expand, {x}, Attrs().set("shape", shape));
}
Tensor squeeze(const Tensor& x, std::optional<int64_t> dim) {
  Attrs a;
  if (dim) a.set("dim", *dim);
  return dispatch1(OpId::squeeze, {x}, a);
}
Tensor unsqueeze(const Tensor& x, int64_t dim) { return dispatch1(OpId::unsqueeze, {x}, Attrs().set("dim", dim)); }
Tensor flatten(const Tensor& x, int64_t start_dim, int64_t end_dim) {
  return dispatch1(OpId::flatten, {x}, Attrs().set("start", start_dim).set("end", end_dim));
}
Tensor as_strided(const Tensor& x, const Shape& shape, const Shape& strides, int64_t offset) {
  return dispatch1(OpId::as_strided, {x}, Attrs().set("shape", shape).set("strides", strides).set("offset", offset));
}
Tensor contiguous(const Tensor& x) { return dispatch1(OpId::contiguous, {x}); }
Tensor clone(const Tensor& x) { return dispatch1(OpId::copy, {x}); }
Tensor slice_backward(const Tensor& grad, const Shape& input_shape, int64_t dim, int64_t start, int64_t end,
                      int64_t step) {
  return dispatch1(OpId::slice_backward, {grad},
                   Attrs().set("input_shape", input_shape).set("dim", dim).set("start", start).set("end", end).set(
                       "step", step));
}

}  // namespace kiln
