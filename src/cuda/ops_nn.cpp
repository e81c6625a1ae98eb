// The CUDA kernels of the network ops: convolution (cuDNN, conv.cpp),
// pooling and batch norm (pool.cu, norm.cu), var, the indexing ops
// (index.cu), arange and the random ops (random.cu). Each follows its CPU
// kernel's conventions (src/ops/{pool,norm,reduce,index,factory}.cpp):
// max_pool2d's indices, batch norm's saved statistics and running-stat
// update, the Philox stream of the random ops, the errors for bad indices.
#include <cmath>
#include <vector>

#include "cuda/kernels.h"
#include "cuda/ops_common.h"
#include "kiln/cuda.h"
#include "kiln/memory_format.h"
#include "kiln/ops.h"
#include "ops/op_def.h"
#include "ops/pool_attrs.h"

namespace kiln::cuda {

void conv2d_kernel(TensorSpan in, std::span<Tensor> out, const Attrs& a);                  // conv.cpp
void conv2d_backward_input_kernel(TensorSpan in, std::span<Tensor> out, const Attrs& a);   // conv.cpp
void conv2d_backward_weight_kernel(TensorSpan in, std::span<Tensor> out, const Attrs& a);  // conv.cpp

namespace {

cudaStream_t stream_of(const Tensor& t) { return stream_for(t.device().index); }

// Two int64 of device scratch, zeroed, for a kernel to report a bad value.
Tensor flag_scratch(const Tensor& like) {
  Tensor f = Tensor::empty({2}, DType::Int64, like.device());
  fill_with(f, 0.0);
  return f;
}
// [seen, value] of a flag scratch (waits for the device).
std::vector<int64_t> read_flag(const Tensor& f) { return f.to_vector<int64_t>(); }

// ---- pooling ----

std::pair<int64_t, int64_t> pair_of(const std::vector<int64_t>& v) { return {v[0], v.size() == 2 ? v[1] : v[0]}; }

// The call for pooling x_shape into y_shape (the infer rule has checked
// both against the attributes).
PoolCall pool_call(const Shape& xs, const Shape& ys, const Attrs& a, bool dilated) {
  PoolCall c;
  c.planes = xs[0] * xs[1];
  c.H = xs[2], c.W = xs[3];
  c.OH = ys[2], c.OW = ys[3];
  std::tie(c.kh, c.kw) = pair_of(a.ints("kernel_size"));
  const auto& st = a.ints("stride");
  std::tie(c.sh, c.sw) = st.empty() ? std::make_pair(c.kh, c.kw) : pair_of(st);
  std::tie(c.ph, c.pw) = pair_of(a.ints("padding"));
  if (dilated) std::tie(c.dh, c.dw) = pair_of(a.ints("dilation"));
  return c;
}

// out itself when dense in `format`, else a temporary that is (the caller
// copies it into out afterwards).
Tensor dense_output(const Tensor& out, MemoryFormat format) {
  return is_contiguous(out, format) ? out : empty(out.shape(), out.dtype(), out.device(), format);
}

// Pooling runs NHWC kernels when the activation (the input forward, the
// input's gradient backward) is channels-last, NCHW ones otherwise.
void set_layout(PoolCall& c, MemoryFormat format, int64_t C) {
  c.channels_last = format == MemoryFormat::ChannelsLast;
  c.C = C;
}

void max_pool_kernel(TensorSpan in, std::span<Tensor> out, const Attrs& a) {
  const MemoryFormat fmt = suggest_memory_format(in[0]);
  Tensor x = contiguous(in[0], fmt);
  PoolCall c = pool_call(x.shape(), out[0].shape(), a, true);
  set_layout(c, fmt, x.shape()[1]);
  const bool with_indices = wants_max_pool_indices(a);
  Tensor y = dense_output(out[0], fmt), idx = with_indices ? dense_output(out[1], fmt) : out[1];
  c.in = x.data_ptr();
  c.out = y.data_ptr();
  c.indices = with_indices ? static_cast<int64_t*>(idx.data_ptr()) : nullptr;  // null: values only
  c.dtype = scalar_of(x.dtype());
  c.stream = stream_of(x);
  launch_max_pool(c);
  if (!y.shares_storage(out[0])) cast_into(y, out[0]);
  if (!idx.shares_storage(out[1])) cast_into(idx, out[1]);
}

void max_pool_backward_kernel(TensorSpan in, std::span<Tensor> out, const Attrs& a) {
  const Shape& xs = a.ints("input_shape");
  const MemoryFormat fmt = suggest_memory_format(out[0]);
  Tensor go = contiguous(in[0], fmt), idx = contiguous(in[1], fmt);
  const DType cd = compute_dtype(out[0].dtype());
  Tensor bad = flag_scratch(go);
  with_compute_output(out[0], cd, [&](const Tensor& gx_out) {
    Tensor gx = dense_output(gx_out, fmt);
    fill_with(gx, 0.0);
    PoolCall c;
    set_layout(c, fmt, xs[1]);
    c.planes = xs[0] * xs[1];
    c.H = xs[2], c.W = xs[3];
    c.OH = go.shape()[2], c.OW = go.shape()[3];
    c.in = go.data_ptr();
    c.out = gx.data_ptr();
    c.indices = static_cast<int64_t*>(idx.data_ptr());
    c.bad = static_cast<int64_t*>(bad.data_ptr());
    c.dtype = scalar_of(go.dtype());
    c.stream = stream_of(go);
    launch_max_pool_backward(c);
    if (!gx.shares_storage(gx_out)) cast_into(gx, gx_out);
  });
  std::vector<int64_t> f = read_flag(bad);
  KILN_CHECK(f[0] == 0, "max_pool2d_backward: index ", f[1], " is outside the input plane of ", xs[2], "x", xs[3],
             " = ", xs[2] * xs[3], " elements (input_shape ", shape_str(xs),
             "); indices must be in [0, H*W), as max_pool2d_with_indices returns them");
}

void avg_pool_kernel(TensorSpan in, std::span<Tensor> out, const Attrs& a) {
  const MemoryFormat fmt = suggest_memory_format(in[0]);
  Tensor x = contiguous(in[0], fmt);
  PoolCall c = pool_call(x.shape(), out[0].shape(), a, false);
  set_layout(c, fmt, x.shape()[1]);
  Tensor y = dense_output(out[0], fmt);
  c.in = x.data_ptr();
  c.out = y.data_ptr();
  c.dtype = scalar_of(x.dtype());
  c.count_include_pad = a.b("count_include_pad");
  c.stream = stream_of(x);
  launch_avg_pool(c);
  if (!y.shares_storage(out[0])) cast_into(y, out[0]);
}

void avg_pool_backward_kernel(TensorSpan in, std::span<Tensor> out, const Attrs& a) {
  const MemoryFormat fmt = suggest_memory_format(out[0]);
  Tensor go = contiguous(in[0], fmt);
  const DType cd = compute_dtype(out[0].dtype());
  with_compute_output(out[0], cd, [&](const Tensor& gx_out) {
    Tensor gx = dense_output(gx_out, fmt);
    fill_with(gx, 0.0);
    PoolCall c = pool_call(gx.shape(), go.shape(), a, false);
    set_layout(c, fmt, gx.shape()[1]);
    c.in = go.data_ptr();
    c.out = gx.data_ptr();
    c.dtype = scalar_of(go.dtype());
    c.count_include_pad = a.b("count_include_pad");
    c.stream = stream_of(go);
    launch_avg_pool_backward(c);
    if (!gx.shares_storage(gx_out)) cast_into(gx, gx_out);
  });
}

// ---- batch norm ----

BatchNormCall bn_call(const Tensor& x) {
  BatchNormCall c;
  c.channels_last = suggest_memory_format(x) == MemoryFormat::ChannelsLast;
  c.x = x.data_ptr();
  c.dtype = scalar_of(x.dtype());
  c.N = x.shape()[0];
  c.C = x.shape()[1];
  for (int64_t d = 2; d < x.dim(); ++d) c.HW *= x.shape()[d];
  c.num_sms = multiprocessors(x.device().index);
  c.stream = stream_of(x);
  return c;
}

Tensor bn_scratch(const BatchNormCall& c, const Device& dev) {
  return Tensor::empty({batch_norm_scratch_doubles(c)}, DType::Float64, dev);
}

double* f64(const Tensor& t) { return static_cast<double*>(t.data_ptr()); }

// A [C] tensor the finishing kernel reads or writes in place: itself when
// dense on the device in a float dtype, else a dense float copy, which
// `write_back` copies into the original afterwards.
struct ChannelTensor {
  Tensor original, dense;
  ChannelTensor(const Tensor& t, [[maybe_unused]] const Device& dev) : original(t) {
    if (!t.defined()) return;
    KILN_ASSERT(t.device() == dev, "batch_norm: a per-channel tensor on another device");
    dense = t.is_contiguous() && is_floating(t.dtype()) ? t : converted(t.contiguous(), DType::Float64).contiguous();
  }
  ChannelArray array() const {
    ChannelArray a;
    if (dense.defined()) a = ChannelArray{dense.data_ptr(), scalar_of(dense.dtype())};
    return a;
  }
  void write_back() const {
    if (dense.defined() && !dense.shares_storage(original)) cast_into(dense, original);
  }
};

void batch_norm_kernel(TensorSpan in, std::span<Tensor> out, const Attrs& a) {
  const MemoryFormat fmt = suggest_memory_format(in[0]);
  Tensor x = contiguous(in[0], fmt);
  const Device dev = x.device();
  BatchNormCall c = bn_call(x);
  BatchNormFinish f;
  f.training = a.b("training");
  f.momentum = a.f("momentum");
  f.eps = a.f("eps");
  ChannelTensor w(in[1], dev), b(in[2], dev), rm(in[3], dev), rv(in[4], dev), sm(out[1], dev), si(out[2], dev);
  f.weight = w.array(), f.bias = b.array(), f.running_mean = rm.array(), f.running_var = rv.array();
  f.save_mean = sm.array(), f.save_invstd = si.array();
  Tensor scratch = bn_scratch(c, dev), k = Tensor::empty({2, c.C}, DType::Float64, dev);
  c.scratch = f64(scratch);
  Tensor y = dense_output(out[0], fmt);
  c.out = y.data_ptr();
  launch_batch_norm_forward(c, f, f64(k), f64(k) + c.C);
  if (!y.shares_storage(out[0])) cast_into(y, out[0]);
  sm.write_back();
  si.write_back();
  if (f.training) {
    rm.write_back();
    rv.write_back();
    if (in[3].defined()) in[3].bump_version();
    if (in[4].defined()) in[4].bump_version();
  }
}

void batch_norm_backward_kernel(TensorSpan in, std::span<Tensor> out, const Attrs& a) {
  const MemoryFormat fmt = suggest_memory_format(in[1]);
  Tensor go = contiguous(in[0], fmt), x = contiguous(in[1], fmt);
  const Device dev = x.device();
  BatchNormCall c = bn_call(x);
  BatchNormFinish f;
  f.training = a.b("training");
  ChannelTensor w(in[2], dev), sm(in[3], dev), si(in[4], dev), gw(out[1], dev), gb(out[2], dev);
  f.weight = w.array(), f.save_mean = sm.array(), f.save_invstd = si.array();
  f.grad_weight = gw.array(), f.grad_bias = gb.array();
  Tensor scratch = bn_scratch(c, dev), k = Tensor::empty({3, c.C}, DType::Float64, dev);
  c.g = go.data_ptr();
  c.scratch = f64(scratch);
  Tensor gx = dense_output(out[0], fmt);
  c.out = gx.data_ptr();
  launch_batch_norm_backward(c, f, f64(k), f64(k) + c.C, f64(k) + 2 * c.C);
  if (!gx.shares_storage(out[0])) cast_into(gx, out[0]);
  gw.write_back();
  gb.write_back();
}

// ---- var: the CPU's two passes (mean, then squared deviations), in float64 ----

void var_kernel(TensorSpan in, std::span<Tensor> out, const Attrs& a) {
  const Tensor& x = in[0];
  std::vector<int64_t> dims = wrap_dims(a.ints("dims"), x.dim(), "var");
  if (dims.empty() && x.dim() > 0) {  // no dims: every dim, as the CPU's reduce_dims reads it
    for (int64_t d = 0; d < x.dim(); ++d) dims.push_back(d);
  }
  int64_t R = 1;
  for (int64_t d : dims) R *= x.shape()[d];
  Tensor x64 = converted(x, DType::Float64);
  Tensor dev = sub(x64, mean(x64, dims, true));
  const double div_by = std::max<double>(0.0, static_cast<double>(R - a.i("correction")));
  Tensor v = div(sum(mul(dev, dev), dims, false), div_by);
  cast_into(v.reshape(out[0].shape()), out[0]);
}

// ---- indexing ----

Tensor index_i64(const Tensor& index) { return converted(index.contiguous(), DType::Int64).contiguous(); }

void check_bad_index(const Tensor& bad, const char* op, int64_t dim, int64_t size, const Shape& shape) {
  std::vector<int64_t> f = read_flag(bad);
  KILN_CHECK(f[0] == 0, op, ": index ", f[1], " is out of range for dim ", dim, " of size ", size,
             " (tensor shape ", shape_str(shape), "); indices must be in [", -size, ", ", size, ")");
}

// [outer, D, inner] around dim of a shape (a 0-dim shape: all 1).
void around(const Shape& s, int64_t d, IndexCall& c) {
  c.outer = 1, c.D = 1, c.inner = 1;
  for (int64_t k = 0; k < static_cast<int64_t>(s.size()); ++k) {
    if (k < d) c.outer *= s[k];
    else if (k == d) c.D = s[k];
    else c.inner *= s[k];
  }
}

bool skipped_in_cat(const Tensor& t) { return t.dim() == 1 && t.shape()[0] == 0; }

void cat_kernel(TensorSpan in, std::span<Tensor> out, const Attrs& a) {
  const Tensor& o = out[0];
  if (o.numel() == 0) return;
  const int64_t d = wrap_dim(a.i("dim"), o.dim(), "cat");
  int64_t off = 0;
  for (const Tensor& t : in) {
    if (skipped_in_cat(t)) continue;
    const int64_t n = t.shape()[d];
    if (n > 0) cast_into(t, o.slice(d, off, off + n));
    off += n;
  }
}

// A call moving elements of src into dst (same dtype) by idx, with a bad-index flag.
IndexCall index_call(const Tensor& src, const Tensor& dst, const Tensor& idx, const Tensor& bad) {
  IndexCall c;
  c.src = src.data_ptr();
  c.dst = dst.data_ptr();
  c.index = static_cast<const int64_t*>(idx.data_ptr());
  c.bad = static_cast<int64_t*>(bad.data_ptr());
  c.dtype = scalar_of(dst.dtype());
  c.itemsize = static_cast<int>(dst.itemsize());
  c.stream = stream_of(dst);
  return c;
}

void index_select_kernel(TensorSpan in, std::span<Tensor> out, const Attrs& a) {
  Tensor x = in[0].contiguous(), idx = index_i64(in[1]);
  const int64_t d = x.dim() == 0 ? 0 : wrap_dim(a.i("dim"), x.dim(), "index_select");
  Tensor o = out[0].is_contiguous() ? out[0] : Tensor::empty(out[0].shape(), out[0].dtype(), out[0].device());
  Tensor bad = flag_scratch(x);
  IndexCall c = index_call(x, o, idx, bad);
  around(x.shape(), d, c);
  c.K = idx.numel();
  launch_index_select(c);
  check_bad_index(bad, "index_select", d, c.D, x.shape());
  if (!o.shares_storage(out[0])) cast_into(o, out[0]);
}

void check_addable(DType t, const char* op) {
  KILN_CHECK(t != DType::Bool && t != DType::UInt8, op, " on CUDA: ", dtype_name(t),
             " is not supported (atomic adds); use int32, int64 or a float dtype");
}

void index_add_kernel(TensorSpan in, std::span<Tensor> out, const Attrs& a) {
  const Tensor& o_out = out[0];
  check_addable(o_out.dtype(), "index_add");
  Tensor idx = index_i64(in[1]), src = in[2].contiguous();
  const int64_t d = o_out.dim() == 0 ? 0 : wrap_dim(a.i("dim"), o_out.dim(), "index_add");
  Tensor o = o_out.is_contiguous() ? o_out : Tensor::empty(o_out.shape(), o_out.dtype(), o_out.device());
  cast_into(in[0], o);
  Tensor bad = flag_scratch(o);
  IndexCall c = index_call(src, o, idx, bad);
  around(o.shape(), d, c);
  c.K = idx.numel();
  launch_index_add(c);
  check_bad_index(bad, "index_add", d, c.D, o.shape());
  if (!o.shares_storage(o_out)) cast_into(o, o_out);
}

// The walk over the index's positions: sizes of the (dense) index, strides
// of the indexed tensor t (zeros for a 0-dim t).
void index_walk(IndexCall& c, const Tensor& idx, const Tensor& t, int64_t d) {
  KILN_CHECK(idx.dim() <= kMaxDims, "gather/scatter_add on CUDA: at most ", kMaxDims, " dims, got index ",
             shape_str(idx.shape()));
  c.nd = static_cast<int>(idx.dim());
  c.dim = static_cast<int>(d);
  c.numel = idx.numel();
  for (int k = 0; k < c.nd; ++k) {
    c.sizes[k] = idx.shape()[k];
    c.strides[k] = t.dim() == 0 ? 0 : t.strides()[k];
  }
  c.D = t.dim() == 0 ? 1 : t.shape()[d];
}

void gather_kernel(TensorSpan in, std::span<Tensor> out, const Attrs& a) {
  const Tensor& x = in[0];
  Tensor idx = index_i64(in[1]);
  const int64_t d = x.dim() == 0 ? 0 : wrap_dim(a.i("dim"), x.dim(), "gather");
  Tensor o = out[0].is_contiguous() ? out[0] : Tensor::empty(out[0].shape(), out[0].dtype(), out[0].device());
  Tensor bad = flag_scratch(o);
  IndexCall c = index_call(x, o, idx, bad);
  index_walk(c, idx, x, d);
  launch_gather(c);
  check_bad_index(bad, "gather", d, c.D, x.shape());
  if (!o.shares_storage(out[0])) cast_into(o, out[0]);
}

void scatter_add_kernel(TensorSpan in, std::span<Tensor> out, const Attrs& a) {
  const Tensor& o_out = out[0];
  check_addable(o_out.dtype(), "scatter_add");
  Tensor idx = index_i64(in[1]);
  // src read at the index's positions only: its leading window, made dense.
  Tensor src = in[2];
  for (int64_t k = 0; k < idx.dim() && src.dim() > 0; ++k) src = src.slice(k, 0, idx.shape()[k]);
  src = src.contiguous();
  const int64_t d = o_out.dim() == 0 ? 0 : wrap_dim(a.i("dim"), o_out.dim(), "scatter_add");
  Tensor o = o_out.is_contiguous() ? o_out : Tensor::empty(o_out.shape(), o_out.dtype(), o_out.device());
  cast_into(in[0], o);
  Tensor bad = flag_scratch(o);
  IndexCall c = index_call(src, o, idx, bad);
  index_walk(c, idx, o, d);
  launch_scatter_add(c);
  check_bad_index(bad, "scatter_add", d, c.D, o.shape());
  if (!o.shares_storage(o_out)) cast_into(o, o_out);
}

void one_hot_kernel(TensorSpan in, std::span<Tensor> out, const Attrs& a) {
  Tensor x = in[0].contiguous();
  const int64_t classes = a.i("num_classes");
  fill_with(out[0], 0.0);  // a fresh output: contiguous
  Tensor bad = flag_scratch(x);
  IndexCall c;
  c.dst = out[0].data_ptr();
  c.index = static_cast<const int64_t*>(x.data_ptr());
  c.bad = static_cast<int64_t*>(bad.data_ptr());
  c.D = classes;
  c.numel = x.numel();
  c.stream = stream_of(x);
  launch_one_hot(c);
  std::vector<int64_t> f = read_flag(bad);
  KILN_CHECK(f[0] == 0, "one_hot: class value ", f[1], " is out of range for ", classes,
             " classes; values must be in [0, num_classes)");
}

// ---- arange and random ----

RandomCall random_call(RandomOp op, const Tensor& o, const Attrs& a) {
  RandomCall c;
  c.op = op;
  c.out = o.data_ptr();  // a fresh output: contiguous
  c.dtype = scalar_of(o.dtype());
  c.n = o.numel();
  if (op != RandomOp::Arange) {
    c.seed = static_cast<uint64_t>(a.i("seed"));
    c.offset = static_cast<uint64_t>(a.i("offset"));
  }
  c.stream = stream_of(o);
  return c;
}

void arange_kernel(TensorSpan, std::span<Tensor> out, const Attrs& a) {
  RandomCall c = random_call(RandomOp::Arange, out[0], a);
  c.start = a.f("start");
  c.step = a.f("step");
  launch_random(c);
}

template <RandomOp Op>
void draw_kernel(TensorSpan, std::span<Tensor> out, const Attrs& a) {
  RandomCall c = random_call(Op, out[0], a);
  if constexpr (Op == RandomOp::Randint) {
    c.low = a.i("low");
    c.range = static_cast<uint64_t>(a.i("high")) - static_cast<uint64_t>(c.low);
  }
  launch_random(c);
}

void bernoulli_kernel(TensorSpan in, std::span<Tensor> out, const Attrs& a) {
  Tensor p = in[0].contiguous();
  Tensor bad = flag_scratch(p);
  RandomCall c = random_call(RandomOp::Bernoulli, out[0], a);
  c.in = p.data_ptr();
  c.bad = static_cast<int64_t*>(bad.data_ptr());
  launch_random(c);
  KILN_CHECK(read_flag(bad)[0] == 0, "bernoulli: every probability must be in [0, 1]");
}

void dropout_kernel(TensorSpan in, std::span<Tensor> out, const Attrs& a) {
  Tensor x = in[0].contiguous();
  const double p = a.f("p");
  // keep when word < (1 - p) 2^32, compared in integers as the CPU does.
  const uint64_t thresh64 = static_cast<uint64_t>(std::ldexp(1.0 - p, 32));
  RandomCall c = random_call(RandomOp::Dropout, out[0], a);
  c.in = x.data_ptr();
  c.mask = static_cast<bool*>(out[1].data_ptr());
  c.keep_all = thresh64 >= (uint64_t{1} << 32);
  c.keep_threshold = c.keep_all ? 0xffffffffu : static_cast<uint32_t>(thresh64);
  c.scale = p >= 1.0 ? 0.0 : 1.0 / (1.0 - p);
  launch_random(c);
}

}  // namespace

void register_nn_kernels() {
  constexpr DeviceType kCuda = DeviceType::CUDA;
  struct Entry {
    OpId id;
    KernelFn fn;
  };
  const Entry entries[] = {
      {OpId::conv2d, on_device<conv2d_kernel>},
      {OpId::conv2d_backward_input, on_device<conv2d_backward_input_kernel>},
      {OpId::conv2d_backward_weight, on_device<conv2d_backward_weight_kernel>},
      {OpId::max_pool2d, on_device<max_pool_kernel>},
      {OpId::max_pool2d_backward, on_device<max_pool_backward_kernel>},
      {OpId::avg_pool2d, on_device<avg_pool_kernel>},
      {OpId::avg_pool2d_backward, on_device<avg_pool_backward_kernel>},
      {OpId::batch_norm, on_device<batch_norm_kernel>},
      {OpId::batch_norm_backward, on_device<batch_norm_backward_kernel>},
      {OpId::var, on_device<var_kernel>},
      {OpId::cat, on_device<cat_kernel>},
      {OpId::index_select, on_device<index_select_kernel>},
      {OpId::index_add, on_device<index_add_kernel>},
      {OpId::gather, on_device<gather_kernel>},
      {OpId::scatter_add, on_device<scatter_add_kernel>},
      {OpId::one_hot, on_device<one_hot_kernel>},
      {OpId::arange, on_device<arange_kernel>},
      {OpId::rand, on_device<draw_kernel<RandomOp::Rand>>},
      {OpId::randn, on_device<draw_kernel<RandomOp::Randn>>},
      {OpId::randint, on_device<draw_kernel<RandomOp::Randint>>},
      {OpId::bernoulli, on_device<bernoulli_kernel>},
      {OpId::dropout, on_device<dropout_kernel>},
  };
  for (const Entry& e : entries) register_kernel(e.id, kCuda, e.fn);
}

}  // namespace kiln::cuda
