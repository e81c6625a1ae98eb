// kiln's ops on CUDA: the ops-table kernels of the CUDA backend, registered
// with register_kernel. Each turns its tensors into a launch of the kernels
// in kernels.h (pointwise loop, casts, sums) or a cuBLASLt call (matmul.cpp).
//
// Pointwise ops whose tensor operands all have the output's 16-bit dtype run
// the loop on them directly (math in float32, loop.cuh); otherwise, as on the
// CPU, 16-bit inputs are converted to float32 before the loop and 16-bit
// outputs computed in float32 and converted after. Either way the result is
// the float32 math rounded once. Numbers (wrapped scalars, which live on the
// host) are passed by value.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "cuda/backend.h"
#include "cuda/check.h"
#include "cuda/kernels.h"
#include "cuda/ops_common.h"
#include "kiln/cuda.h"
#include "kiln/memory_format.h"
#include "kiln/ops.h"
#include "ops/op_def.h"

namespace kiln::cuda {

void matmul_kernel(TensorSpan in, std::span<Tensor> out, const Attrs& a);  // matmul.cpp
void linear_kernel(TensorSpan in, std::span<Tensor> out, const Attrs& a);  // matmul.cpp

static_assert(static_cast<int>(Scalar::Float64) == static_cast<int>(DType::Float64) &&
                  static_cast<int>(Scalar::Float16) == static_cast<int>(DType::Float16) &&
                  static_cast<int>(Scalar::Bool) == static_cast<int>(DType::Bool),
              "Scalar must list the dtypes in DType's order");

Scalar scalar_of(DType t) { return static_cast<Scalar>(t); }

DType compute_dtype(DType out) {
  return (out == DType::Float16 || out == DType::BFloat16) ? DType::Float32 : out;
}

// Host scalars (numbers and 0-dim CPU tensors) go to kernels by value.
bool is_number(const Tensor& t) { return is_host_scalar(t); }

Operand number_operand(double v) {
  Operand o;
  o.is_number = true;
  o.number = v;
  o.dtype = Scalar::Float64;
  return o;
}

// A pointwise launch over `out`'s shape with inputs broadcast to it; size-1
// dims are dropped and dims merged where every operand steps evenly across
// them, so dense operands become one dim and run the vectorized loop.
PointwiseCall make_call(PointwiseOp op, DType compute, const Tensor& out, std::initializer_list<Tensor> inputs) {
  PointwiseCall c;
  c.op = op;
  c.compute = scalar_of(compute);
  c.numel = out.numel();
  c.stream = stream_for(out.device().index);
  const Shape& shape = out.shape();
  const int nd = static_cast<int>(shape.size());
  const int nops = 1 + static_cast<int>(inputs.size());
  KILN_ASSERT(nops <= 4, "make_call: at most 3 inputs");
  std::vector<std::vector<int64_t>> strides(static_cast<size_t>(nops), std::vector<int64_t>(nd, 0));
  std::vector<bool> number(static_cast<size_t>(nops), false);
  for (int d = 0; d < nd; ++d) strides[0][d] = out.strides()[d];
  c.out.data = out.data_ptr();
  c.out.dtype = scalar_of(out.dtype());
  int k = 1;
  for (const Tensor& t : inputs) {
    Operand& o = c.in[k - 1];
    if (is_number(t)) {
      o = number_operand(t.item());
      number[k] = true;
    } else {
      o.data = t.data_ptr();
      o.dtype = scalar_of(t.dtype());
      const int td = static_cast<int>(t.dim());
      for (int d = 0; d < td; ++d) {
        const int od = nd - td + d;
        strides[k][od] = t.shape()[d] == 1 ? 0 : t.strides()[d];
      }
    }
    ++k;
  }
  c.nin = nops - 1;
  // Walk the dims in out's memory order (largest stride first; a stable
  // sort keeps a contiguous out's order), so operands laid out alike (NHWC
  // channels-last ones too) merge into one dense dim.
  std::vector<int> order(static_cast<size_t>(nd));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return strides[0][a] > strides[0][b]; });
  // Keep dims of size > 1, merging a dim into the one before when every
  // operand's outer stride equals its inner stride times the inner size.
  std::vector<int64_t> sizes;
  std::vector<std::vector<int64_t>> st(static_cast<size_t>(nops));
  for (int d : order) {
    if (shape[d] == 1) continue;
    bool merge = !sizes.empty();
    for (int j = 0; j < nops && merge; ++j) merge = st[j].back() == strides[j][d] * shape[d];
    if (merge) {
      sizes.back() *= shape[d];
      for (int j = 0; j < nops; ++j) st[j].back() = strides[j][d];
    } else {
      sizes.push_back(shape[d]);
      for (int j = 0; j < nops; ++j) st[j].push_back(strides[j][d]);
    }
  }
  KILN_CHECK(sizes.size() <= static_cast<size_t>(kMaxDims), "CUDA pointwise kernel: loops take at most ",
             kMaxDims, " non-mergeable dims, got ", sizes.size(), " for shape ", shape_str(shape),
             "; make the operands contiguous first");
  c.nd = static_cast<int>(sizes.size());
  bool dense = c.nd <= 1;
  for (int d = 0; d < c.nd; ++d) {
    c.sizes[d] = sizes[d];
    c.out.strides[d] = st[0][d];
    for (int j = 1; j < nops; ++j) c.in[j - 1].strides[d] = st[j][d];
  }
  if (c.nd == 1)
    for (int j = 0; j < nops; ++j) dense = dense && (number[j] || st[j][0] == 1);
  c.contiguous = dense;
  return c;
}

// Writes src (any dtype, broadcast to dst) into dst (any dtype and layout).
void cast_into(const Tensor& src, const Tensor& dst) {
  PointwiseCall c = make_call(PointwiseOp::Cast, dst.dtype(), dst, {src});
  launch_cast(c);
}

void fill_with(const Tensor& dst, double value) {
  PointwiseCall c = make_call(PointwiseOp::Cast, dst.dtype(), dst, {});
  c.nin = 1;
  c.in[0] = number_operand(value);
  launch_cast(c);
}

Tensor empty_like_layout(const Tensor& like, DType dt) {
  return empty(like.shape(), dt, like.device(), suggest_memory_format(like));
}

Tensor converted(const Tensor& t, DType dt) {
  if (t.dtype() == dt || is_number(t)) return t;
  Tensor r = empty_like_layout(t, dt);
  cast_into(t, r);
  return r;
}

int multiprocessors(int device) {
  static int cached[64] = {};
  if (cached[device] == 0) {
    int n = 0;
    KILN_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device), "sum");
    cached[device] = std::max(n, 1);
  }
  return cached[device];
}

namespace {

bool is_16bit(DType t) { return t == DType::Float16 || t == DType::BFloat16; }

// The dtype a pointwise loop runs in for output dtype `out`: a 16-bit output
// whose tensor inputs all share its dtype runs in it (no float32 copies: the
// bf16/fp16 activations of autocast); else compute_dtype's.
DType loop_dtype(DType out, TensorSpan inputs) {
  if (!is_16bit(out)) return compute_dtype(out);
  for (const Tensor& t : inputs)
    if (!is_number(t) && t.dtype() != out) return DType::Float32;
  return out;
}

// ---- kernels ----

template <PointwiseOp Op>
void binary_kernel(TensorSpan in, std::span<Tensor> out, const Attrs&) {
  const DType cd = loop_dtype(out[0].dtype(), in);
  Tensor a = converted(in[0], cd), b = converted(in[1], cd);
  with_compute_output(out[0], cd, [&](const Tensor& y) { launch_pointwise(make_call(Op, cd, y, {a, b})); });
}

template <PointwiseOp Op>
void unary_kernel(TensorSpan in, std::span<Tensor> out, const Attrs&) {
  const DType cd = loop_dtype(out[0].dtype(), in);
  Tensor x = converted(in[0], cd);
  with_compute_output(out[0], cd, [&](const Tensor& y) { launch_pointwise(make_call(Op, cd, y, {x})); });
}

void gelu_kernel(TensorSpan in, std::span<Tensor> out, const Attrs& a) {
  if (a.s("approximate") == "tanh") unary_kernel<PointwiseOp::GeluTanh>(in, out, a);
  else unary_kernel<PointwiseOp::GeluErf>(in, out, a);
}
void gelu_backward_kernel(TensorSpan in, std::span<Tensor> out, const Attrs& a) {
  if (a.s("approximate") == "tanh") binary_kernel<PointwiseOp::GeluBackwardTanh>(in, out, a);
  else binary_kernel<PointwiseOp::GeluBackwardErf>(in, out, a);
}

void clamp_kernel(TensorSpan in, std::span<Tensor> out, const Attrs& a) {
  const DType cd = loop_dtype(out[0].dtype(), in);
  double lo = -std::numeric_limits<double>::infinity(), hi = std::numeric_limits<double>::infinity();
  if (!is_floating(cd)) {
    // Integer bounds: the bound itself clamped to the dtype's range first.
    visit_dtype(cd, [&]<typename T>() {
      lo = static_cast<double>(std::numeric_limits<T>::lowest());
      hi = static_cast<double>(std::numeric_limits<T>::max());
    });
  }
  const double tmin = lo, tmax = hi;
  if (a.has("min")) lo = std::clamp(a.f("min"), tmin, tmax);
  if (a.has("max")) hi = std::clamp(a.f("max"), tmin, tmax);
  Tensor x = converted(in[0], cd);
  with_compute_output(out[0], cd, [&](const Tensor& y) {
    PointwiseCall c = make_call(PointwiseOp::Clamp, cd, y, {x});
    c.p0 = lo;
    c.p1 = hi;
    launch_pointwise(c);
  });
}

template <PointwiseOp Op>
void compare_kernel(TensorSpan in, std::span<Tensor> out, const Attrs&) {
  const DType cd = loop_dtype(result_type(in), in);
  Tensor a = converted(in[0], cd), b = converted(in[1], cd);
  launch_pointwise(make_call(Op, cd, out[0], {a, b}));
}

void logical_not_kernel(TensorSpan in, std::span<Tensor> out, const Attrs&) {
  const DType cd = compute_dtype(in[0].dtype());
  launch_pointwise(make_call(PointwiseOp::LogicalNot, cd, out[0], {converted(in[0], cd)}));
}

void where_kernel(TensorSpan in, std::span<Tensor> out, const Attrs&) {
  const DType cd = loop_dtype(out[0].dtype(), in.subspan(1));
  Tensor cond = in[0], a = converted(in[1], cd), b = converted(in[2], cd);
  with_compute_output(out[0], cd,
                      [&](const Tensor& y) { launch_pointwise(make_call(PointwiseOp::Where, cd, y, {cond, a, b})); });
}

void cast_kernel(TensorSpan in, std::span<Tensor> out, const Attrs&) { cast_into(in[0], out[0]); }

void full_kernel(TensorSpan, std::span<Tensor> out, const Attrs& a) { fill_with(out[0], a.f("value")); }
void fill_kernel(TensorSpan, std::span<Tensor> out, const Attrs& a) { fill_with(out[0], a.f("value")); }

// An input read while self is written: a private copy unless it is self
// itself or does not overlap it (elementwise aliasing is safe).
Tensor unaliased(const Tensor& t, const Tensor& self) {
  if (is_number(t) || !t.shares_storage(self)) return t;
  if (t.offset() == self.offset() && t.shape() == self.shape() && t.strides() == self.strides()) return t;
  return t.clone();
}

void copy__kernel(TensorSpan in, std::span<Tensor> out, const Attrs&) { cast_into(unaliased(in[1], out[0]), out[0]); }

// self = op(self, inputs..., attr) for the in-place updates: add_ (alpha),
// mul_, addcmul_ / addcdiv_ (value), lerp_ (weight). 16-bit selves are
// updated in a float32 copy written back.
template <PointwiseOp Op>
void update_kernel(TensorSpan in, std::span<Tensor> out, const Attrs& a) {
  const Tensor& self = out[0];
  const DType cd = compute_dtype(self.dtype());
  Tensor s = cd == self.dtype() ? self : converted(self, cd);
  Tensor x = converted(unaliased(in[1], self), cd);
  PointwiseCall c;
  if constexpr (Op == PointwiseOp::AddCMul || Op == PointwiseOp::AddCDiv) {
    c = make_call(Op, cd, s, {s, x, converted(unaliased(in[2], self), cd)});
    c.p0 = a.f("value");
  } else {
    c = make_call(Op, cd, s, {s, x});
    if constexpr (Op == PointwiseOp::AddScaled) c.p0 = a.f("alpha");
    if constexpr (Op == PointwiseOp::Lerp) c.p0 = a.f("weight");
  }
  launch_pointwise(c);
  if (!s.shares_storage(self)) cast_into(s, self);
}

void slice_backward_kernel(TensorSpan in, std::span<Tensor> out, const Attrs& a) {
  fill_with(out[0], 0.0);
  Tensor window = slice(out[0], a.i("dim"), a.i("start"), a.i("end"), a.i("step"));
  cast_into(in[0], window);
}

// ---- sum / mean ----

// sum, mean (scaled sum), amax, amin of x over dims into out.
void reduce_into(const Tensor& x_in, const std::vector<int64_t>& dims_attr, const Tensor& out, ReduceOp op,
                 bool mean) {
  const DType acc = x_in.dtype() == DType::Float64 ? DType::Float64
                    : is_floating(x_in.dtype())    ? DType::Float32
                                                   : DType::Int64;
  Tensor x = converted(x_in, acc);
  const int64_t nd = x.dim();
  std::vector<int64_t> dims = wrap_dims(dims_attr, nd, "reduction");
  // A channels-last input is reduced as its dense NHWC view when that keeps
  // the order of the kept dims (C kept only with H and W both reduced): the
  // global average pool's mean over {2, 3} reads [N, HW, C] with no copy.
  if (nd == 4 && !dims.empty() && suggest_memory_format(x) == MemoryFormat::ChannelsLast) {
    auto reduced_dim = [&](int64_t d) { return std::binary_search(dims.begin(), dims.end(), d); };
    if (reduced_dim(1) || (reduced_dim(2) && reduced_dim(3))) {
      static constexpr int64_t kNhwcPos[4] = {0, 3, 1, 2};  // dim d of NCHW is dim kNhwcPos[d] of NHWC
      for (int64_t& d : dims) d = kNhwcPos[d];
      std::sort(dims.begin(), dims.end());
      x = x.permute({0, 2, 3, 1});
    }
  }
  int64_t reduced = 1;
  for (int64_t d : dims) reduced *= x.shape()[d];
  const int64_t kept = reduced == 0 ? out.numel() : x.numel() / std::max<int64_t>(reduced, 1);
  with_compute_output(out, acc, [&](const Tensor& y) {
    if (reduced == 0 || y.numel() == 0) {
      fill_with(y, mean ? std::numeric_limits<double>::quiet_NaN() : 0.0);
      return;
    }
    // [outer, R, inner] directly when the reduced dims are one run of a
    // dense tensor; else the kept dims moved first and made dense. The
    // column kernel (inner > 1) runs a thread per output: with few outputs
    // and long columns (a bias gradient: [batch, C] summed over the batch)
    // it would leave the GPU idle (36 GB/s measured on an H200 for
    // [65536, 1024] over dim 0), so such sums transpose first (a copy near
    // full bandwidth, then the row kernel).
    Tensor src = x;
    int64_t outer = kept, inner = 1;
    const bool run = dims.empty() || dims.back() - dims.front() + 1 == static_cast<int64_t>(dims.size());
    const bool few_long_columns = dims.empty() || dims.back() == nd - 1
                                      ? false
                                      : kept < int64_t{multiprocessors(y.device().index)} * 1024 && reduced >= 64;
    if (run && x.is_contiguous() && !dims.empty() && !few_long_columns) {
      outer = 1;
      for (int64_t d = 0; d < dims.front(); ++d) outer *= x.shape()[d];
      inner = kept / outer;
    } else if (!dims.empty()) {
      std::vector<int64_t> order;
      for (int64_t d = 0; d < nd; ++d)
        if (!std::binary_search(dims.begin(), dims.end(), d)) order.push_back(d);
      order.insert(order.end(), dims.begin(), dims.end());
      src = x.permute(order).contiguous();
    } else {
      src = x.contiguous();  // no dims: a 0-dim tensor, "summed" over nothing
    }
    ReduceCall c;
    c.op = op;
    c.in = src.data_ptr();
    c.out = y.data_ptr();
    c.dtype = scalar_of(acc);
    c.outer = outer;
    c.reduced = dims.empty() ? 1 : reduced;
    c.inner = inner;
    c.scale = mean ? 1.0 / static_cast<double>(reduced) : 1.0;
    c.stream = stream_for(y.device().index);
    c.num_sms = multiprocessors(y.device().index);
    Tensor scratch;
    if (size_t bytes = reduce_scratch_bytes(c)) {
      scratch = Tensor::empty({static_cast<int64_t>(bytes)}, DType::UInt8, y.device());
      c.scratch = scratch.data_ptr();
    }
    launch_reduce(c);
  });
}

template <ReduceOp Op, bool Mean = false>
void reduce_kernel(TensorSpan in, std::span<Tensor> out, const Attrs& a) {
  reduce_into(in[0], a.ints("dims"), out[0], Op, Mean);
}

// ---- softmax / log_softmax ----

// x as [outer, D, inner] around `dim`, dense, in float32 or float64.
struct AroundDim {
  Tensor t;
  int64_t outer = 1, D = 1, inner = 1;
};
AroundDim around_dim(const Tensor& x, int64_t dim_attr, DType cd) {
  AroundDim r;
  r.t = converted(x, cd).contiguous();
  if (x.dim() == 0) return r;
  const int64_t d = wrap_dim(dim_attr, x.dim(), "softmax");
  for (int64_t i = 0; i < x.dim(); ++i) {
    if (i < d) r.outer *= x.shape()[i];
    else if (i == d) r.D = x.shape()[i];
    else r.inner *= x.shape()[i];
  }
  return r;
}

template <bool Log>
void softmax_kernel(TensorSpan in, std::span<Tensor> out, const Attrs& a) {
  const DType cd = compute_dtype(out[0].dtype());
  AroundDim x = around_dim(in[0], a.i("dim"), cd);
  with_compute_output(out[0], cd, [&](const Tensor& y) {
    SoftmaxCall c;
    c.x = x.t.data_ptr();
    c.out = y.data_ptr();
    c.dtype = scalar_of(cd);
    c.outer = x.outer, c.dim = x.D, c.inner = x.inner;
    c.log = Log;
    c.stream = stream_for(y.device().index);
    launch_softmax(c);
  });
}

template <bool Log>
void softmax_backward_kernel(TensorSpan in, std::span<Tensor> out, const Attrs& a) {
  const DType cd = compute_dtype(out[0].dtype());
  AroundDim g = around_dim(in[0], a.i("dim"), cd), y = around_dim(in[1], a.i("dim"), cd);
  with_compute_output(out[0], cd, [&](const Tensor& o) {
    SoftmaxCall c;
    c.x = y.t.data_ptr();
    c.grad = g.t.data_ptr();
    c.out = o.data_ptr();
    c.dtype = scalar_of(cd);
    c.outer = y.outer, c.dim = y.D, c.inner = y.inner;
    c.log = Log;
    c.backward = true;
    c.stream = stream_for(o.device().index);
    launch_softmax(c);
  });
}

// ---- argmax ----

void argmax_kernel(TensorSpan in, std::span<Tensor> out, const Attrs& a) {
  const Tensor& x = in[0];
  const DType cd = x.dtype() == DType::Float64 ? DType::Float64
                   : is_floating(x.dtype())    ? DType::Float32
                                               : DType::Int64;
  if (x.dim() == 0) {
    fill_with(out[0], 0.0);
    return;
  }
  AroundDim t = around_dim(x, a.i("dim"), cd);
  ArgmaxCall c;
  c.in = t.t.data_ptr();
  c.out = static_cast<int64_t*>(out[0].data_ptr());
  c.dtype = scalar_of(cd);
  c.outer = t.outer, c.dim = t.D, c.inner = t.inner;
  c.stream = stream_for(out[0].device().index);
  launch_argmax(c);
}

// ---- nll_loss ----

// [N, C, S] of a log_probs shape ([C] or [N, C, d1, ...]); the infer rule
// has checked it against the target.
void nll_dims(const Shape& s, NllCall& c) {
  if (s.size() == 1) {
    c.C = s[0];
    return;
  }
  c.N = s[0];
  c.C = s[1];
  for (size_t d = 2; d < s.size(); ++d) c.S *= s[d];
}

int nll_reduction(const std::string& r) { return r == "none" ? 0 : r == "mean" ? 1 : 2; }

// Runs the call with its check scratch, then reports a bad target (the
// kernels record it; this read waits for the device).
void run_nll(NllCall& c, const Tensor& like, const char* op) {
  Tensor check = Tensor::empty({3}, DType::Int64, like.device());
  fill_with(check, 0.0);
  c.check = static_cast<int64_t*>(check.data_ptr());
  c.stream = stream_for(like.device().index);
  launch_nll(c);
  std::vector<int64_t> v = check.to_vector<int64_t>();
  KILN_CHECK(v[0] == 0, op, ": target ", v[1], " is out of range for ", c.C, " classes; targets must be in [0, ", c.C,
             ") or equal ignore_index (", c.ignore_index, ")");
}

void nll_kernel(TensorSpan in, std::span<Tensor> out, const Attrs& a) {
  const DType cd = compute_dtype(out[0].dtype());
  Tensor lp = converted(in[0], cd).contiguous(), target = in[1].contiguous();
  with_compute_output(out[0], cd, [&](const Tensor& y) {
    NllCall c;
    c.log_probs = lp.data_ptr();
    c.target = static_cast<const int64_t*>(target.data_ptr());
    c.out = y.data_ptr();
    c.dtype = scalar_of(cd);
    nll_dims(lp.shape(), c);
    c.reduction = nll_reduction(a.s("reduction"));
    c.ignore_index = a.i("ignore_index");
    run_nll(c, y, "nll_loss");
  });
}

void nll_backward_kernel(TensorSpan in, std::span<Tensor> out, const Attrs& a) {
  const DType cd = compute_dtype(out[0].dtype());
  Tensor g = converted(in[0], cd).contiguous(), target = in[1].contiguous();
  with_compute_output(out[0], cd, [&](const Tensor& y) {
    fill_with(y, 0.0);
    NllCall c;
    c.grad = g.data_ptr();
    c.target = static_cast<const int64_t*>(target.data_ptr());
    c.out = y.data_ptr();
    c.dtype = scalar_of(cd);
    nll_dims(y.shape(), c);
    c.reduction = nll_reduction(a.s("reduction"));
    c.ignore_index = a.i("ignore_index");
    c.backward = true;
    run_nll(c, y, "nll_loss_backward");
  });
}

}  // namespace

void register_cuda_kernels() {
  constexpr DeviceType kCuda = DeviceType::CUDA;
  using enum PointwiseOp;
  struct Entry {
    OpId id;
    KernelFn fn;
  };
  const Entry entries[] = {
      {OpId::add, on_device<binary_kernel<Add>>},
      {OpId::sub, on_device<binary_kernel<Sub>>},
      {OpId::mul, on_device<binary_kernel<Mul>>},
      {OpId::div, on_device<binary_kernel<Div>>},
      {OpId::pow, on_device<binary_kernel<Pow>>},
      {OpId::maximum, on_device<binary_kernel<Maximum>>},
      {OpId::minimum, on_device<binary_kernel<Minimum>>},
      {OpId::neg, on_device<unary_kernel<Neg>>},
      {OpId::exp, on_device<unary_kernel<Exp>>},
      {OpId::log, on_device<unary_kernel<Log>>},
      {OpId::sqrt, on_device<unary_kernel<Sqrt>>},
      {OpId::rsqrt, on_device<unary_kernel<Rsqrt>>},
      {OpId::abs, on_device<unary_kernel<Abs>>},
      {OpId::sign, on_device<unary_kernel<Sign>>},
      {OpId::relu, on_device<unary_kernel<Relu>>},
      {OpId::gelu, on_device<gelu_kernel>},
      {OpId::gelu_backward, on_device<gelu_backward_kernel>},
      {OpId::relu_backward, on_device<binary_kernel<ReluBackward>>},
      {OpId::sigmoid, on_device<unary_kernel<Sigmoid>>},
      {OpId::tanh, on_device<unary_kernel<Tanh>>},
      {OpId::erf, on_device<unary_kernel<Erf>>},
      {OpId::clamp, on_device<clamp_kernel>},
      {OpId::where, on_device<where_kernel>},
      {OpId::eq, on_device<compare_kernel<Eq>>},
      {OpId::ne, on_device<compare_kernel<Ne>>},
      {OpId::lt, on_device<compare_kernel<Lt>>},
      {OpId::le, on_device<compare_kernel<Le>>},
      {OpId::gt, on_device<compare_kernel<Gt>>},
      {OpId::ge, on_device<compare_kernel<Ge>>},
      {OpId::logical_not, on_device<logical_not_kernel>},
      {OpId::cast, on_device<cast_kernel>},
      {OpId::copy, on_device<cast_kernel>},
      {OpId::slice_backward, on_device<slice_backward_kernel>},
      {OpId::sum, on_device<reduce_kernel<ReduceOp::Sum>>},
      {OpId::mean, on_device<reduce_kernel<ReduceOp::Sum, true>>},
      {OpId::amax, on_device<reduce_kernel<ReduceOp::Max>>},
      {OpId::amin, on_device<reduce_kernel<ReduceOp::Min>>},
      {OpId::argmax, on_device<argmax_kernel>},
      {OpId::softmax, on_device<softmax_kernel<false>>},
      {OpId::log_softmax, on_device<softmax_kernel<true>>},
      {OpId::softmax_backward, on_device<softmax_backward_kernel<false>>},
      {OpId::log_softmax_backward, on_device<softmax_backward_kernel<true>>},
      {OpId::matmul, on_device<matmul_kernel>},
      {OpId::linear, on_device<linear_kernel>},
      {OpId::nll_loss, on_device<nll_kernel>},
      {OpId::nll_loss_backward, on_device<nll_backward_kernel>},
      {OpId::full, on_device<full_kernel>},
      {OpId::fill_, on_device<fill_kernel>},
      {OpId::copy_, on_device<copy__kernel>},
      {OpId::add_, on_device<update_kernel<AddScaled>>},
      {OpId::mul_, on_device<update_kernel<Mul>>},
      {OpId::addcmul_, on_device<update_kernel<AddCMul>>},
      {OpId::addcdiv_, on_device<update_kernel<AddCDiv>>},
      {OpId::lerp_, on_device<update_kernel<Lerp>>},
  };
  for (const Entry& e : entries) register_kernel(e.id, kCuda, e.fn);
  register_nn_kernels();
}

}  // namespace kiln::cuda
