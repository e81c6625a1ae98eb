// Convolution: conv2d (NCHW input, OIHW weight) and its two backward ops.
//
// float32 runs on oneDNN with `any` memory descriptors, so oneDNN picks its
// blocked layouts (nChw16c) and, through convolution_auto, Winograd 4x3 for
// 3x3 layers on AVX-512 (see the team notes, shared/notes/cpu-convolution.md: 2-3x
// faster than PyTorch's NCHW path). User tensors stay NCHW/OIHW; each call
// reorders into the blocked layouts and back, which costs ~10%. Primitives are
// cached by every shape and parameter, and all blocked buffers and scratchpads
// are kiln tensors, so the caching allocator hands the same blocks back each
// step instead of mapping fresh memory.
//
// float64 (gradient tests) runs a plain reference loop: oneDNN has no f64
// convolution. bfloat16 (autocast) runs oneDNN's bfloat16 convolutions where
// the CPU has them (AVX-512: avx512_core_bf16 natively, else emulated), with
// no cast of the operands; elsewhere, and for float16, it computes in
// float32 and casts.
//
// conv2d takes an optional attribute `activation` ("relu" | "gelu", the erf
// GELU): in float32 the activation runs as a oneDNN eltwise post-op of the
// same primitive, so the pre-activation output is never written to memory
// (bfloat16 too; other dtypes apply it after, and so does float32 where the
// post-op would cost oneDNN its Winograd kernel: conv2d_post_op_pays). nn::fuse_modules (kiln/fusion.h) sets it;
// the derivative recomputes the pre-activation output.
//
// conv2d takes an optional fourth input, a residual of the output's shape,
// dtype and layout: act(conv2d(x, w, b) + residual) (the compiler's
// fuse_conv_residual: ResNet's block tails once eval batch norms fold into
// their convolutions). float32 adds it with oneDNN's sum post-op, into the
// residual's own storage when nothing else holds it (conv2d_with_residual).
//
// All three ops take an optional attribute `algorithm` for float32:
// "auto" (the default: oneDNN's convolution_auto, Winograd where it has it),
// "direct", or "tuned": the faster of the two for this kind and shape on this
// machine, timed on the first call and kept on disk (ops/conv_autotune.h;
// the compiler's max-autotune mode sets it).
#include <cstdlib>
#include <cstring>
#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <unordered_map>

#include "core/cpu_features.h"
#include "kiln/ops.h"
#include "ops/cpu/copy.h"
#include "ops/cpu/loops.h"
#include "ops/conv_autotune.h"
#include "ops/blocked_layout.h"
#include "ops/conv_fused.h"
#include "ops/dnnl/dnnl_utils.h"
#include "ops/families.h"
#include "ops/fused_activation.h"
#include "ops/op_def.h"

namespace kiln {
namespace {

using dnnl::memory;

struct ConvGeom {
  int64_t N, C, H, W;  // input
  int64_t O, KH, KW;   // weight is [O, C / groups, KH, KW]
  int64_t OH, OW;
  int64_t sh, sw, ph, pw, dh, dw, groups;
};

// A 2-vector attribute given as one value (applies to both dims) or two.
std::pair<int64_t, int64_t> pair_attr(const Attrs& a, const char* name, const char* op) {
  const auto& v = a.ints(name);
  KILN_CHECK(v.size() == 1 || v.size() == 2, op, ": ", name, " must have 1 or 2 values, got ", shape_str(v));
  return {v[0], v.size() == 2 ? v[1] : v[0]};
}

ConvGeom conv_geometry(const Shape& x, const Shape& w, const Attrs& a, const char* op) {
  KILN_CHECK(x.size() == 4, op, ": input must be 4-D [N, C, H, W], got shape ", shape_str(x),
             "; unsqueeze(0) a single image");
  KILN_CHECK(w.size() == 4, op, ": weight must be 4-D [out_channels, in_channels / groups, kH, kW], got shape ",
             shape_str(w));
  ConvGeom g{};
  g.N = x[0], g.C = x[1], g.H = x[2], g.W = x[3];
  g.O = w[0], g.KH = w[2], g.KW = w[3];
  std::tie(g.sh, g.sw) = pair_attr(a, "stride", op);
  std::tie(g.ph, g.pw) = pair_attr(a, "padding", op);
  std::tie(g.dh, g.dw) = pair_attr(a, "dilation", op);
  g.groups = a.i("groups");
  KILN_CHECK(g.groups >= 1, op, ": groups must be >= 1, got ", g.groups);
  KILN_CHECK(g.sh > 0 && g.sw > 0, op, ": stride must be positive, got ", shape_str(a.ints("stride")));
  KILN_CHECK(g.dh > 0 && g.dw > 0, op, ": dilation must be positive, got ", shape_str(a.ints("dilation")));
  KILN_CHECK(g.ph >= 0 && g.pw >= 0, op, ": padding must be >= 0, got ", shape_str(a.ints("padding")));
  KILN_CHECK(g.C == w[1] * g.groups, op, ": input ", shape_str(x), " has ", g.C, " channels but weight ",
             shape_str(w), " with groups=", g.groups, " expects ", w[1] * g.groups,
             " (weight dim 1 is in_channels / groups)");
  KILN_CHECK(g.O % g.groups == 0, op, ": out_channels ", g.O, " (weight ", shape_str(w),
             ") is not divisible by groups=", g.groups);
  int64_t eh = g.dh * (g.KH - 1) + 1, ew = g.dw * (g.KW - 1) + 1;
  g.OH = (g.H + 2 * g.ph - eh) / g.sh + 1;
  g.OW = (g.W + 2 * g.pw - ew) / g.sw + 1;
  KILN_CHECK(g.H + 2 * g.ph >= eh && g.W + 2 * g.pw >= ew && g.OH > 0 && g.OW > 0, op, ": input ", shape_str(x),
             " padded by ", shape_str(a.ints("padding")), " is smaller than the dilated kernel (", eh, "x", ew,
             "); use a larger input or more padding");
  return g;
}

Attrs conv_attrs(const Conv2dParams& p) {
  return Attrs()
      .set("stride", p.stride)
      .set("padding", p.padding)
      .set("dilation", p.dilation)
      .set("groups", p.groups);
}
Conv2dParams conv_params(const Attrs& a) {
  Conv2dParams p;
  p.stride = a.ints("stride");
  p.padding = a.ints("padding");
  p.dilation = a.ints("dilation");
  p.groups = a.i("groups");
  return p;
}


// Which oneDNN algorithm a float32 convolution runs (the `algorithm` attribute).
enum class ConvAlgo : int64_t { Auto = 0, Direct = 1, Tuned = 2 };
ConvAlgo algorithm_of(const Attrs& a) {
  if (!a.has("algorithm")) return ConvAlgo::Auto;
  const std::string& s = a.s("algorithm");
  if (s == "auto") return ConvAlgo::Auto;
  if (s == "direct") return ConvAlgo::Direct;
  if (s == "tuned") return ConvAlgo::Tuned;
  KILN_FAIL("conv2d: algorithm '", s, "' is unknown; use \"auto\" (oneDNN's choice), \"direct\" or \"tuned\" ",
            "(the faster of the two, measured once per shape)");
}

// Which activations of a convolution are nChw16c (ops/blocked_layout.h):
// src the input side (the forward's input, conv2d_backward_input's output,
// conv2d_backward_weight's input), dst the output side (the forward's
// output, both backward kinds' grad_out).
struct BlockedSides {
  bool src = false, dst = false;
};

void check_float(const Tensor& t, const char* op, const char* what) {
  KILN_CHECK(is_floating(t.dtype()), op, ": ", what, " must be a floating tensor, got ", dtype_name(t.dtype()),
             shape_str(t.shape()), "; cast it with .to(DType::Float32)");
}

// ---------------------------------------------------------------------------
// oneDNN (float32)

enum class Kind { Forward, BackwardData, BackwardWeights };

struct DnnlDims {
  memory::dims src, wei, dst, bias, strides, dilates, pad_l, pad_r;
  memory::format_tag wei_tag;
};

DnnlDims dnnl_dims(const ConvGeom& g) {
  DnnlDims d;
  d.src = {g.N, g.C, g.H, g.W};
  d.dst = {g.N, g.O, g.OH, g.OW};
  d.bias = {g.O};
  if (g.groups == 1) {
    d.wei = {g.O, g.C, g.KH, g.KW};
    d.wei_tag = memory::format_tag::oihw;
  } else {
    d.wei = {g.groups, g.O / g.groups, g.C / g.groups, g.KH, g.KW};
    d.wei_tag = memory::format_tag::goihw;
  }
  d.strides = {g.sh, g.sw};
  d.dilates = {g.dh - 1, g.dw - 1};  // oneDNN counts dilation from 0
  d.pad_l = {g.ph, g.pw};
  // The right padding that gives PyTorch's output size exactly.
  d.pad_r = {(g.OH - 1) * g.sh + g.dh * (g.KH - 1) + 1 - g.H - g.ph,
             (g.OW - 1) * g.sw + g.dw * (g.KW - 1) + 1 - g.W - g.pw};
  return d;
}

using DataType = memory::data_type;
memory::desc any_md(const memory::dims& d, DataType dt) { return memory::desc(d, dt, memory::format_tag::any); }
memory::desc plain_md(const memory::dims& d, memory::format_tag tag, DataType dt) { return memory::desc(d, dt, tag); }

dnnl::primitive_attr user_scratchpad_attr() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

// sum: dst += the convolution before the activation (oneDNN's sum post-op;
// dst holds the residual when the primitive runs).
dnnl::convolution_forward::primitive_desc make_fwd_pd(const DnnlDims& d, bool bias, DataType dt,
                                                     dnnl::algorithm alg, FusedActivation act = FusedActivation::None,
                                                     bool sum = false) {
  using cf = dnnl::convolution_forward;
  auto pk = dnnl::prop_kind::forward_training;
  cf::desc desc = bias ? cf::desc(pk, alg, any_md(d.src, dt), any_md(d.wei, dt),
                                  plain_md(d.bias, memory::format_tag::x, dt), any_md(d.dst, dt), d.strides,
                                  d.dilates, d.pad_l, d.pad_r)
                       : cf::desc(pk, alg, any_md(d.src, dt), any_md(d.wei, dt), any_md(d.dst, dt), d.strides,
                                  d.dilates, d.pad_l, d.pad_r);
  dnnl::primitive_attr attr = user_scratchpad_attr();
  if (act != FusedActivation::None || sum) {
    dnnl::post_ops ops;
    if (sum) ops.append_sum(1.0f);
    if (act != FusedActivation::None)
      ops.append_eltwise(1.0f,
                         act == FusedActivation::Relu ? dnnl::algorithm::eltwise_relu
                                                      : dnnl::algorithm::eltwise_gelu_erf,
                         0.0f, 0.0f);
    attr.set_post_ops(ops);
  }
  return cf::primitive_desc(desc, attr, onednn::cpu_engine());
}

// convolution_auto lets oneDNN choose Winograd where it is faster; fall back
// to the direct algorithm where auto is not implemented for a shape.
// ConvAlgo::Direct builds the direct algorithm only.
template <typename F>
auto with_algorithm(ConvAlgo algo, F&& build) {
  if (algo == ConvAlgo::Direct) return build(dnnl::algorithm::convolution_direct);
  try {
    return build(dnnl::algorithm::convolution_auto);
  } catch (const dnnl::error&) {
    return build(dnnl::algorithm::convolution_direct);
  }
}

// oneDNN's `auto` takes Winograd for every 3x3 float32 layer, but a layer
// with few input channels pads them to a 16-channel block and pays the input
// and output transforms for a tiny product: its forward is 1.5-4x slower
// than direct up to 16 input channels, its weight gradient up to 4 (a stem
// of 1 or 3 channels, 64 out, 32x32, batch 128, 2 threads: forward 12.6-14.3
// against 3.2-3.7 ms, weight gradient 8.0-9.4 against 2.1-3.6; at 8 channels
// the weight gradient already favours Winograd, and at 24 both do;
// docs/results.md, "small-channel stems"). So `auto` means direct there; the
// data gradient keeps oneDNN's choice (it was a wash at every width).
ConvAlgo small_input_algorithm(Kind kind, const ConvGeom& g, ConvAlgo algo) {
  if (algo != ConvAlgo::Auto) return algo;
  const int64_t c = g.C / g.groups;
  if ((kind == Kind::Forward && c <= 16) || (kind == Kind::BackwardWeights && c <= 4)) return ConvAlgo::Direct;
  return algo;
}

struct ConvEntry {
  Kind kind;
  dnnl::primitive prim;
  memory::desc scratch_md;
  // Operands in the primitive's layouts and in the user's plain layouts, and
  // the reorders between them (a = src / diff_dst, b = weights / src, c = the output).
  memory::desc a_md, b_md, c_md;
  memory::desc a_user, b_user, c_user;
  onednn::Reorder a_in, b_in, c_out;
  onednn::Reorder c_in;  // a forward with a sum post-op: the residual into the primitive's dst layout
  std::string impl;
};

// Builds a backward primitive (Prim: convolution_backward_data or _weights;
// both read diff_dst as `a`) into `e`. They differ only in their type and
// in which of weights/src is the input `b` and which diff is the output `c`.
template <typename Prim>
void build_backward(ConvEntry& e, const DnnlDims& d, DataType dt, ConvAlgo algo,
                    const dnnl::convolution_forward::primitive_desc& fwd) {
  constexpr bool kData = std::is_same_v<Prim, dnnl::convolution_backward_data>;
  auto pd = with_algorithm(algo, [&](dnnl::algorithm alg) {
    typename Prim::desc desc(alg, any_md(d.src, dt), any_md(d.wei, dt), any_md(d.dst, dt), d.strides, d.dilates,
                             d.pad_l, d.pad_r);
    return typename Prim::primitive_desc(desc, user_scratchpad_attr(), onednn::cpu_engine(), fwd);
  });
  e.prim = Prim(pd);
  e.scratch_md = pd.scratchpad_desc();
  e.a_md = pd.diff_dst_desc();
  if constexpr (kData) e.b_md = pd.weights_desc(), e.c_md = pd.diff_src_desc();
  else e.b_md = pd.src_desc(), e.c_md = pd.diff_weights_desc();
  e.impl = pd.impl_info_str();
}

// A dnnl::error (no implementation for this data type on this CPU) escapes
// get_entry before anything is cached.
// algo is Auto or Direct (Tuned is resolved before).
// blocked: which activations are nChw16c tensors (ops/blocked_layout.h), not NCHW.
// sum (forward only): a sum post-op before the activation (make_fwd_pd).
std::shared_ptr<ConvEntry> get_entry(Kind kind, const ConvGeom& g, bool bias, DataType dt,
                                     FusedActivation act = FusedActivation::None, ConvAlgo algo = ConvAlgo::Auto,
                                     BlockedSides blocked = {}, bool sum = false) {
  algo = small_input_algorithm(kind, g, algo);
  onednn::PrimitiveKey key{static_cast<int64_t>(kind) + 100,
                           g.N, g.C, g.H, g.W, g.O, g.KH, g.KW, g.sh, g.sw, g.ph, g.pw, g.dh, g.dw, g.groups,
                           bias ? 1 : 0, static_cast<int64_t>(dt), static_cast<int64_t>(act),
                           static_cast<int64_t>(algo), (blocked.src ? 2 : 0) + (blocked.dst ? 1 : 0) + (sum ? 4 : 0)};
  return onednn::cached<ConvEntry>(key, [&]() {
    auto e = std::make_shared<ConvEntry>();
    e->kind = kind;
    DnnlDims d = dnnl_dims(g);
    auto activation_tag = [](bool b) { return b ? memory::format_tag::nChw16c : memory::format_tag::nchw; };
    memory::desc src_user = plain_md(d.src, activation_tag(blocked.src), dt);
    memory::desc dst_user = plain_md(d.dst, activation_tag(blocked.dst), dt);
    memory::desc wei_user = plain_md(d.wei, d.wei_tag, dt);
    auto fwd = with_algorithm(algo, [&](dnnl::algorithm alg) { return make_fwd_pd(d, bias, dt, alg); });
    if (kind == Kind::Forward) {
      if (act != FusedActivation::None || sum)
        fwd = with_algorithm(algo, [&](dnnl::algorithm alg) { return make_fwd_pd(d, bias, dt, alg, act, sum); });
      e->prim = dnnl::convolution_forward(fwd);
      e->scratch_md = fwd.scratchpad_desc();
      e->a_md = fwd.src_desc(), e->b_md = fwd.weights_desc(), e->c_md = fwd.dst_desc();
      e->a_user = src_user, e->b_user = wei_user, e->c_user = dst_user;
      e->impl = fwd.impl_info_str();
    } else if (kind == Kind::BackwardData) {
      build_backward<dnnl::convolution_backward_data>(*e, d, dt, algo, fwd);
      e->a_user = dst_user, e->b_user = wei_user, e->c_user = src_user;
    } else {
      build_backward<dnnl::convolution_backward_weights>(*e, d, dt, algo, fwd);
      e->a_user = dst_user, e->b_user = src_user, e->c_user = wei_user;
    }
    e->a_in = onednn::Reorder::make(e->a_user, e->a_md);
    e->b_in = onednn::Reorder::make(e->b_user, e->b_md);
    e->c_out = onednn::Reorder::make(e->c_md, e->c_user);
    if (sum) e->c_in = onednn::Reorder::make(e->c_user, e->c_md);
    return e;
  });
}

// Runs one cached primitive: a and b are the two inputs (contiguous, user
// layouts, of data type dt), c the contiguous output of that type; blocked as
// for get_entry. sum (forward): c holds the residual, which the convolution
// adds before the activation.
void run_dnnl(Kind kind, const ConvGeom& g, const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& c,
              DataType dt = DataType::f32, FusedActivation act = FusedActivation::None, ConvAlgo algo = ConvAlgo::Auto,
              BlockedSides blocked = {}, bool sum = false) {
  std::shared_ptr<ConvEntry> e = get_entry(kind, g, bias.defined(), dt, act, algo, blocked, sum);
  Tensor a_buf, b_buf, c_buf, scratch_buf;
  memory a_user = onednn::wrap(e->a_user, a), b_user = onednn::wrap(e->b_user, b);
  memory c_user = onednn::wrap(e->c_user, c);
  memory am = a_user, bm = b_user, cm = c_user;
  if (e->a_in.needed) {
    am = onednn::make_buffer(e->a_md, a_buf);
    e->a_in.run(a_user, am);
  }
  if (e->b_in.needed) {
    bm = onednn::make_buffer(e->b_md, b_buf);
    e->b_in.run(b_user, bm);
  }
  if (e->c_out.needed) {
    cm = onednn::make_buffer(e->c_md, c_buf);
    if (sum) e->c_in.run(c_user, cm);  // the residual the sum post-op adds
  }
  memory scratch = onednn::make_buffer(e->scratch_md, scratch_buf);
  std::unordered_map<int, memory> args{{DNNL_ARG_SCRATCHPAD, scratch}};
  switch (kind) {
    case Kind::Forward:
      args.insert({{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
      if (bias.defined())
        args.insert({DNNL_ARG_BIAS, onednn::wrap(memory::desc({g.O}, dt, memory::format_tag::x), bias)});
      break;
    case Kind::BackwardData:
      args.insert({{DNNL_ARG_DIFF_DST, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DIFF_SRC, cm}});
      break;
    case Kind::BackwardWeights:
      args.insert({{DNNL_ARG_DIFF_DST, am}, {DNNL_ARG_SRC, bm}, {DNNL_ARG_DIFF_WEIGHTS, cm}});
      break;
  }
  e->prim.execute(onednn::cpu_stream(), args);
  if (e->c_out.needed) e->c_out.run(cm, c_user);
  onednn::cpu_stream().wait();
}

// ---------------------------------------------------------------------------
// Reference loops (float64; only tests use them, so clarity over speed).

template <typename T>
void ref_forward(const ConvGeom& g, const T* x, const T* w, const T* b, T* y) {
  int64_t Cg = g.C / g.groups, Og = g.O / g.groups;
  cpu::parallel_for(g.N * g.O, 1, [&](int64_t begin, int64_t end) {
    for (int64_t no = begin; no < end; ++no) {
      int64_t n = no / g.O, o = no % g.O, grp = o / Og;
      for (int64_t oh = 0; oh < g.OH; ++oh)
        for (int64_t ow = 0; ow < g.OW; ++ow) {
          T acc = b ? b[o] : T(0);
          for (int64_t ic = 0; ic < Cg; ++ic) {
            int64_t c = grp * Cg + ic;
            for (int64_t kh = 0; kh < g.KH; ++kh) {
              int64_t ih = oh * g.sh - g.ph + kh * g.dh;
              if (ih < 0 || ih >= g.H) continue;
              for (int64_t kw = 0; kw < g.KW; ++kw) {
                int64_t iw = ow * g.sw - g.pw + kw * g.dw;
                if (iw < 0 || iw >= g.W) continue;
                acc += x[((n * g.C + c) * g.H + ih) * g.W + iw] * w[((o * Cg + ic) * g.KH + kh) * g.KW + kw];
              }
            }
          }
          y[((n * g.O + o) * g.OH + oh) * g.OW + ow] = acc;
        }
    }
  });
}

template <typename T>
void ref_backward_data(const ConvGeom& g, const T* gy, const T* w, T* gx) {
  int64_t Cg = g.C / g.groups, Og = g.O / g.groups;
  std::memset(static_cast<void*>(gx), 0, sizeof(T) * g.N * g.C * g.H * g.W);
  cpu::parallel_for(g.N, 1, [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n)
      for (int64_t o = 0; o < g.O; ++o) {
        int64_t grp = o / Og;
        for (int64_t oh = 0; oh < g.OH; ++oh)
          for (int64_t ow = 0; ow < g.OW; ++ow) {
            T go = gy[((n * g.O + o) * g.OH + oh) * g.OW + ow];
            for (int64_t ic = 0; ic < Cg; ++ic) {
              int64_t c = grp * Cg + ic;
              for (int64_t kh = 0; kh < g.KH; ++kh) {
                int64_t ih = oh * g.sh - g.ph + kh * g.dh;
                if (ih < 0 || ih >= g.H) continue;
                for (int64_t kw = 0; kw < g.KW; ++kw) {
                  int64_t iw = ow * g.sw - g.pw + kw * g.dw;
                  if (iw < 0 || iw >= g.W) continue;
                  gx[((n * g.C + c) * g.H + ih) * g.W + iw] += go * w[((o * Cg + ic) * g.KH + kh) * g.KW + kw];
                }
              }
            }
          }
      }
  });
}

template <typename T>
void ref_backward_weights(const ConvGeom& g, const T* gy, const T* x, T* gw) {
  int64_t Cg = g.C / g.groups, Og = g.O / g.groups;
  cpu::parallel_for(g.O, 1, [&](int64_t begin, int64_t end) {
    for (int64_t o = begin; o < end; ++o) {
      int64_t grp = o / Og;
      for (int64_t ic = 0; ic < Cg; ++ic) {
        int64_t c = grp * Cg + ic;
        for (int64_t kh = 0; kh < g.KH; ++kh)
          for (int64_t kw = 0; kw < g.KW; ++kw) {
            T acc = 0;
            for (int64_t n = 0; n < g.N; ++n)
              for (int64_t oh = 0; oh < g.OH; ++oh) {
                int64_t ih = oh * g.sh - g.ph + kh * g.dh;
                if (ih < 0 || ih >= g.H) continue;
                for (int64_t ow = 0; ow < g.OW; ++ow) {
                  int64_t iw = ow * g.sw - g.pw + kw * g.dw;
                  if (iw < 0 || iw >= g.W) continue;
                  acc += gy[((n * g.O + o) * g.OH + oh) * g.OW + ow] * x[((n * g.C + c) * g.H + ih) * g.W + iw];
                }
              }
            gw[((o * Cg + ic) * g.KH + kh) * g.KW + kw] = acc;
          }
      }
    }
  });
}

// ---------------------------------------------------------------------------
// Dtype routing shared by the three kernels.

// A contiguous float32 copy (or `t` itself when it already is one).
Tensor as_f32(const Tensor& t) {
  if (!t.defined()) return t;
  if (t.dtype() == DType::Float32 && t.is_contiguous()) return t;
  Tensor out = Tensor::empty(t.shape(), DType::Float32);
  cpu::copy_cast(t, out);
  return out;
}

// How a bfloat16 convolution of one kind and shape runs on this CPU.
enum class Bf16Path { Undecided, Bf16, Float32 };

// KILN_CONV_BF16: "auto" (default) times both paths of each kind and shape
// once, on its first call, and keeps the faster; "1" always runs oneDNN's
// bfloat16 primitive where it exists; "0" never does (float32 with casts,
// as float16 runs). Measured per layer (bench/conv_dtypes, docs/results.md):
// on AMX most layers run 1.5-3.6x faster in bfloat16, but some (a 3-channel
// input layer's backward, a 3x3-pixel layer's weight gradient) are slower
// than float32's Winograd, so no one answer fits every layer.
enum class Bf16Setting { Auto, Always, Never };
Bf16Setting bf16_setting() {
  static const Bf16Setting s = [] {
    const char* v = std::getenv("KILN_CONV_BF16");
    std::string t = v ? v : "auto";
    if (t == "0") return Bf16Setting::Never;
    if (t == "1") return Bf16Setting::Always;
    KILN_CHECK(t == "auto" || t.empty(), "KILN_CONV_BF16=", t, ": use auto (the faster of bfloat16 and float32 per ",
               "layer), 1 (always bfloat16) or 0 (never)");
    return Bf16Setting::Auto;
  }();
  return s;
}

// The autotuning table key of a bfloat16 layer's precision choice.
std::string bf16_key(Kind kind, const ConvGeom& g, bool bias);

// The path chosen so far for a bfloat16 convolution (Undecided: time both
// on this call). Float32 when oneDNN has no bfloat16 primitive for it here
// (none without AVX-512). A timed choice is kept in the autotuning table
// (ops/conv_autotune.h), so a later process on this machine reads it instead
// of timing again: the warm start of a bf16 model.
Bf16Path bf16_path(Kind kind, const ConvGeom& g, bool bias) {
  if (bf16_setting() == Bf16Setting::Never || !cpu_has_avx512()) return Bf16Path::Float32;
  // A recorded choice first: a layer timed before had its kernel (or ran in
  // float32), and asking oneDNN again would build a bfloat16 primitive a
  // float32 layer never runs (most of bf16 airbench's 0.4 s warm start).
  if (bf16_setting() == Bf16Setting::Auto) {
    if (std::optional<std::string> v = conv_autotune::lookup(bf16_key(kind, g, bias))) {
      if (*v == "bf16" || *v == "bf16-alone") return Bf16Path::Bf16;
      if (*v == "float32") return Bf16Path::Float32;
    }
  }
  // Whether oneDNN has a bfloat16 primitive for it, asked once per kind and
  // shape: a failed primitive creation is not cached with the primitives, and
  // asking again would cost a creation attempt and an exception every call.
  {
    static std::mutex mu;
    static std::map<std::string, bool> has_kernel;
    const std::string key = bf16_key(kind, g, bias);
    std::unique_lock<std::mutex> lock(mu);
    auto it = has_kernel.find(key);
    if (it == has_kernel.end()) {
      lock.unlock();
      bool ok = true;
      try {
        get_entry(kind, g, bias, DataType::bf16);
      } catch (const dnnl::error&) {
        ok = false;
      }
      lock.lock();
      it = has_kernel.emplace(key, ok).first;
    }
    if (!it->second) return Bf16Path::Float32;
  }
  if (bf16_setting() == Bf16Setting::Always) return Bf16Path::Bf16;
  return Bf16Path::Undecided;
}

// Applies a fused activation in place where no oneDNN post-op ran.
void apply_activation(FusedActivation act, const Tensor& out) {
  if (act == FusedActivation::None) return;
  Tensor y = act == FusedActivation::Relu ? relu(out) : gelu(out);
  cpu::copy_cast(y, out);
}

// Whether oneDNN runs the float32 forward convolution with `act` as a
// post-op on the same algorithm as without: its Winograd kernels take a ReLU
// post-op but not GELU's erf, and the direct kernel it falls back to is 2-2.5x
// slower on 3x3 layers (airbench's 7x7 maps: 35 ms against 15 ms), far more
// than the activation pass the post-op saves. Cached with the primitives.
bool is_winograd(const std::string& impl) { return impl.find("wino") != std::string::npos; }
bool post_op_keeps_algorithm(const ConvGeom& g, bool bias, FusedActivation act, ConvAlgo algo = ConvAlgo::Auto) {
  if (act == FusedActivation::None) return true;
  return is_winograd(get_entry(Kind::Forward, g, bias, DataType::f32, act, algo)->impl) ||
         !is_winograd(get_entry(Kind::Forward, g, bias, DataType::f32, FusedActivation::None, algo)->impl);
}
// The same for a sum post-op (a residual) before `act`: Winograd takes sum,
// then ReLU; not GELU.
bool residual_post_op_keeps_algorithm(const ConvGeom& g, bool bias, FusedActivation act, ConvAlgo algo) {
  return is_winograd(get_entry(Kind::Forward, g, bias, DataType::f32, act, algo, {}, true)->impl) ||
         !is_winograd(get_entry(Kind::Forward, g, bias, DataType::f32, FusedActivation::None, algo)->impl);
}

// Whether a convolution of `dtype` tensors whose primitive runs in `run_dt`
// takes `act` as a oneDNN post-op (else it is applied after): bfloat16
// kernels (direct, no Winograd) always take it; float32 ones, also a
// bfloat16 layer run in float32, where it keeps the algorithm; float16 and
// float64 apply it after. conv_compute and describe_conv_run both ask here.
bool runs_as_post_op(DType dtype, DataType run_dt, const ConvGeom& g, bool bias, FusedActivation act, ConvAlgo algo) {
  if (act == FusedActivation::None || run_dt == DataType::bf16) return true;
  return (dtype == DType::Float32 || dtype == DType::BFloat16) && post_op_keeps_algorithm(g, bias, act, algo);
}

// Seconds one call of f takes.
template <typename F>
double seconds_of(F&& f) {
  auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void conv_compute(Kind kind, const ConvGeom& g, const Tensor& a, const Tensor& b, const Tensor& bias,
                  const Tensor& out, FusedActivation act = FusedActivation::None, ConvAlgo algo = ConvAlgo::Auto,
                  BlockedSides blocked = {});

// The kind and shape part of an autotuning table key (ops/conv_autotune.h).
std::string tuned_key(Kind kind, const ConvGeom& g, bool bias, FusedActivation act) {
  std::ostringstream key;
  key << static_cast<int64_t>(kind) << ':' << g.N << ',' << g.C << ',' << g.H << ',' << g.W << ':' << g.O << ','
      << g.KH << ',' << g.KW << ':' << g.sh << ',' << g.sw << ',' << g.ph << ',' << g.pw << ',' << g.dh << ',' << g.dw
      << ',' << g.groups << ':' << (bias ? 1 : 0) << ':' << static_cast<int64_t>(act);
  return key.str();
}

std::string bf16_key(Kind kind, const ConvGeom& g, bool bias) {
  return "bf16:" + tuned_key(kind, g, bias, FusedActivation::None);
}

// algorithm="tuned" in float32: the recorded choice for this kind and shape,
// else both algorithms timed here, in the running step on the real operands
// (each run once untimed first: primitive creation and JIT, then three
// timed rounds), the faster recorded and, if it did not run last, run again
// so `out` holds its result.
void conv_compute_tuned(Kind kind, const ConvGeom& g, const Tensor& a, const Tensor& b, const Tensor& bias,
                        const Tensor& out, FusedActivation act, BlockedSides blocked) {
  const std::string key = tuned_key(kind, g, bias.defined(), act);
  if (std::optional<std::string> v = conv_autotune::lookup(key); v && (*v == "direct" || *v == "auto"))
    return conv_compute(kind, g, a, b, bias, out, act, *v == "direct" ? ConvAlgo::Direct : ConvAlgo::Auto, blocked);
  auto run = [&](ConvAlgo algo) { conv_compute(kind, g, a, b, bias, out, act, algo, blocked); };
  run(ConvAlgo::Auto);
  run(ConvAlgo::Direct);
  // Interleaved, best of three each: a burst of load from elsewhere on the
  // machine then hits both candidates alike.
  double t_auto = 1e30, t_direct = 1e30;
  for (int round = 0; round < 3; ++round) {
    t_auto = std::min(t_auto, seconds_of([&] { run(ConvAlgo::Auto); }));
    t_direct = std::min(t_direct, seconds_of([&] { run(ConvAlgo::Direct); }));
  }
  // Ties go to auto, eager's choice.
  const bool direct = t_direct < t_auto;
  conv_autotune::record(key, direct ? "direct" : "auto");
  if (!direct) run(ConvAlgo::Auto);
}

// Computes `out` = act(kind(a, b, bias)) in the right precision.
// algo applies to float32 (bfloat16 runs oneDNN's choice; float64 the reference loops).
// blocked (float32 only, checked by the ops' shape rules): the nChw16c
// activations, as for get_entry.
void conv_compute(Kind kind, const ConvGeom& g, const Tensor& a, const Tensor& b, const Tensor& bias,
                  const Tensor& out, FusedActivation act, ConvAlgo algo, BlockedSides blocked) {
  if (out.numel() == 0) return;
  if (algo == ConvAlgo::Tuned) {
    if (out.dtype() == DType::Float32 && a.numel() > 0 && b.numel() > 0)
      return conv_compute_tuned(kind, g, a, b, bias, out, act, blocked);
    algo = ConvAlgo::Auto;
  }
  // bfloat16 decides per path below (bfloat16 kernel or float32).
  if (out.dtype() != DType::BFloat16 && !runs_as_post_op(out.dtype(), DataType::f32, g, bias.defined(), act, algo)) {
    conv_compute(kind, g, a, b, bias, out, FusedActivation::None, algo, blocked);
    apply_activation(act, out);  // elementwise: the same in either layout
    return;
  }
  if (a.numel() == 0 || b.numel() == 0) {
    // An empty reduction (no input channels or no batch): zeros, plus the
    // bias for a forward convolution.
    std::memset(out.data_ptr(), 0, out.nbytes());
    if (kind == Kind::Forward && bias.defined()) {
      if (blocked.dst) {  // lane o % 16 of block o / 16; the padding stays zero
        const Tensor bp = Tensor::empty({channel_blocks(g.O) * kChannelBlock}, out.dtype());
        std::memset(bp.data_ptr(), 0, bp.nbytes());
        cpu::copy_cast(bias, bp.slice(0, 0, g.O));
        cpu::copy_cast(bp.view({1, channel_blocks(g.O), 1, 1, kChannelBlock}), out);
      } else {
        cpu::copy_cast(bias.view({1, g.O, 1, 1}), out);
      }
    }
    apply_activation(act, out);
    return;
  }
  if (out.dtype() == DType::Float64) {
    Tensor ac = a.contiguous(), bc = b.contiguous(), biasc = bias.defined() ? bias.contiguous() : bias;
    const double* pa = ac.data<double>();
    const double* pb = bc.data<double>();
    double* po = out.data<double>();
    if (kind == Kind::Forward) ref_forward<double>(g, pa, pb, biasc.defined() ? biasc.data<double>() : nullptr, po);
    else if (kind == Kind::BackwardData) ref_backward_data<double>(g, pa, pb, po);
    else ref_backward_weights<double>(g, pa, pb, po);
    return;
  }
  auto in_float32 = [&] {
    Tensor a32 = as_f32(a), b32 = as_f32(b), bias32 = as_f32(bias);
    if (out.dtype() == DType::Float32) {
      run_dnnl(kind, g, a32, b32, bias32, out, DataType::f32, act, algo, blocked);
      return;
    }
    // A bfloat16 convolution run in float32 (measured faster, or no
    // bfloat16 kernel): its activation after the cast where the post-op
    // would cost the algorithm.
    const bool post_op = runs_as_post_op(DType::BFloat16, DataType::f32, g, bias.defined(), act, algo);
    Tensor o32 = Tensor::empty(out.shape(), DType::Float32);
    run_dnnl(kind, g, a32, b32, bias32, o32, DataType::f32, post_op ? act : FusedActivation::None, algo);
    cpu::copy_cast(o32, out);
    if (!post_op) apply_activation(act, out);
  };
  if (out.dtype() != DType::BFloat16) return in_float32();
  // oneDNN's bfloat16 kernels take the activation as a post-op at no cost
  // (runs_as_post_op): computed in float32 and rounded once (for ReLU the
  // same bits as rounding first; for GELU one rounding fewer than eager's).
  auto in_bf16 = [&] {
    Tensor biasc = bias.defined() ? bias.contiguous() : bias;
    run_dnnl(kind, g, a.contiguous(), b.contiguous(), biasc, out, DataType::bf16, act);
  };
  switch (bf16_path(kind, g, bias.defined())) {
    case Bf16Path::Bf16: return in_bf16();
    case Bf16Path::Float32: return in_float32();
    case Bf16Path::Undecided: break;
  }
  // First call of this kind and shape: the faster of two runs each, in place
  // on the real operands; the chosen path runs last, so `out` holds its result.
  // A third candidate, the float32 layer on float32 operands without the
  // casts, is what the layer costs inside a compiled float32 region
  // (float32_regions): bfloat16 that wins only by saving its own casts is
  // recorded as "bf16-alone", which that pass runs in float32 where the
  // layer's neighbours are float32 (it would need the casts the other way).
  Tensor a32 = as_f32(a), b32 = as_f32(b), bias32 = as_f32(bias), o32 = Tensor::empty(out.shape(), DType::Float32);
  const bool post_op = runs_as_post_op(DType::BFloat16, DataType::f32, g, bias.defined(), act, algo);
  auto on_float32_values = [&] {
    run_dnnl(kind, g, a32, b32, bias32, o32, DataType::f32, post_op ? act : FusedActivation::None, algo);
  };
  in_bf16();  // first runs: oneDNN's one-time setup (AMX tile permission, scratch) is not timed
  in_float32();
  on_float32_values();
  const double t_bf16 = std::min(seconds_of(in_bf16), seconds_of(in_bf16));
  const double t_f32 = std::min(seconds_of(in_float32), seconds_of(in_float32));
  const double t_values = std::min(seconds_of(on_float32_values), seconds_of(on_float32_values));
  const double casts = std::max(0.0, t_f32 - t_values);
  const Bf16Path chosen = t_bf16 <= t_f32 ? Bf16Path::Bf16 : Bf16Path::Float32;
  conv_autotune::record(bf16_key(kind, g, bias.defined()),
                        chosen == Bf16Path::Float32 ? "float32" : conv_autotune::bf16_choice(t_bf16, casts, t_values));
  if (chosen == Bf16Path::Bf16) in_bf16();
}

// ---------------------------------------------------------------------------
// conv2d

BlockedSides conv2d_layouts(const Attrs& a) {
  return {wants_blocked(a, "in_layout", "conv2d"), wants_blocked(a, "out_layout", "conv2d")};
}
// The NCHW shape of a convolution's input-side activation x (conv2d's and
// conv2d_backward_weight's input), nChw16c when `blocked`: possibly padded,
// its channel count is the weight w's in_channels times groups.
Shape input_activation_shape(const Shape& x, bool blocked, const Shape& w, const Attrs& a, const char* op) {
  if (!blocked) return x;
  if (w.size() != 4) return nchw_of_blocked(x, op);  // conv_geometry names the bad weight
  return nchw_of_blocked(x, w[1] * a.i("groups"), op);
}

bool has_residual(TensorSpan in) { return in.size() > 3 && in[3].defined(); }

std::vector<TensorMeta> conv2d_infer(TensorSpan in, const Attrs& a) {
  const Tensor& x = in[0];
  const Tensor& w = in[1];
  check_float(x, "conv2d", "input");
  KILN_CHECK(x.dtype() == w.dtype(), "conv2d: input is ", dtype_name(x.dtype()), " but weight is ",
             dtype_name(w.dtype()), "; cast them to one dtype");
  const Device dev = common_device(in, "conv2d");
  const BlockedSides blocked = conv2d_layouts(a);
  if (blocked.src || blocked.dst) check_blocked_dtype(x, dev, "conv2d");
  ConvGeom g = conv_geometry(input_activation_shape(x.shape(), blocked.src, w.shape(), a, "conv2d"), w.shape(), a, "conv2d");
  fused_activation(a, "conv2d");  // checks the names
  algorithm_of(a);
  if (in.size() > 2 && in[2].defined()) {
    const Tensor& b = in[2];
    KILN_CHECK(b.dim() == 1 && b.shape()[0] == g.O, "conv2d: bias must be [", g.O, "] (one per output channel), got ",
               shape_str(b.shape()));
    KILN_CHECK(b.dtype() == x.dtype(), "conv2d: bias is ", dtype_name(b.dtype()), " but input is ",
               dtype_name(x.dtype()), "; cast them to one dtype");
  }
  Shape os{g.N, g.O, g.OH, g.OW};
  if (blocked.dst) os = padded_blocked_shape(os, "conv2d");
  if (has_residual(in)) {
    const Tensor& r = in[3];
    KILN_CHECK(r.shape() == os && r.dtype() == x.dtype(), "conv2d: the residual added to the output must have the ",
               "output's shape ", shape_str(os), " and dtype ", dtype_name(x.dtype()), blocked.dst ? " (out_layout=nChw16c)" : "",
               ", got ", dtype_name(r.dtype()), shape_str(r.shape()));
  }
  return {{os, x.dtype(), dev}};
}
// Whether output `out` may take residual r's storage: nothing but this call
// holds r (the compiled graph passes a value it reads for the last time
// here), r looks like `out`, and no gradient is recorded (autograd would
// keep r's values for the derivative).
bool can_take_storage(const Tensor& r, const Tensor& out, TensorSpan in) {
  if (r.impl_ptr().use_count() != 1 || r.impl()->storage.use_count() != 1) return false;
  if (!r.is_contiguous() || r.shape() != out.shape() || r.dtype() != out.dtype() || r.device() != out.device())
    return false;
  if (r.requires_grad() || r.impl()->grad_fn) return false;
  if (grad_mode_enabled())
    for (const Tensor& t : in)
      if (t.defined() && t.requires_grad()) return false;
  return true;
}

// out = act(conv(x, w, b) + residual). In float32 on oneDNN's sum post-op
// where it keeps the algorithm: out starts as the residual (its storage when
// can_take_storage, so the convolution adds into the residual in place: one
// read and one write of it instead of the add's separate pass; else a copy),
// else the convolution, then the add and the activation.
void conv2d_with_residual(const ConvGeom& g, TensorSpan in, Tensor& out, FusedActivation act, ConvAlgo algo,
                          BlockedSides blocked) {
  const Tensor& r = in[3];
  const Tensor bias = in.size() > 2 ? in[2] : Tensor();
  const bool post_op = out.dtype() == DType::Float32 && algo != ConvAlgo::Tuned && in[0].numel() > 0 &&
                       in[1].numel() > 0 && out.numel() > 0 &&
                       residual_post_op_keeps_algorithm(g, bias.defined(), act, algo);
  if (!post_op) {
    conv_compute(Kind::Forward, g, in[0], in[1], bias, out, FusedActivation::None, algo, blocked);
    add_(out, r);
    apply_activation(act, out);
    return;
  }
  if (can_take_storage(r, out, in)) {
    out.impl()->storage = r.impl()->storage;
    out.impl()->offset = r.offset();
  } else {
    cpu::copy_cast(r, out);
  }
  run_dnnl(Kind::Forward, g, in[0].contiguous(), in[1].contiguous(), bias.defined() ? bias.contiguous() : bias, out,
           DataType::f32, act, algo, blocked, true);
}

void conv2d_kernel(TensorSpan in, std::span<Tensor> out, const Attrs& a) {
  const BlockedSides blocked = conv2d_layouts(a);
  ConvGeom g = conv_geometry(input_activation_shape(in[0].shape(), blocked.src, in[1].shape(), a, "conv2d"), in[1].shape(), a, "conv2d");
  if (has_residual(in)) return conv2d_with_residual(g, in, out[0], fused_activation(a, "conv2d"), algorithm_of(a), blocked);
  Tensor bias = in.size() > 2 ? in[2] : Tensor();
  conv_compute(Kind::Forward, g, in[0], in[1], bias, out[0], fused_activation(a, "conv2d"), algorithm_of(a), blocked);
}
Tensors conv2d_back(const BackwardCtx& c, TensorSpan grads) {
  check_no_blocked_derivative(c.attrs, "out_layout", "conv2d");
  check_no_blocked_derivative(c.attrs, "in_layout", "conv2d");
  Conv2dParams p = conv_params(c.attrs);
  const Tensor& x = c.inputs[0];
  const Tensor& w = c.inputs[1];
  Tensors out(c.input_metas.size());
  // A fused activation: the gradient at the pre-activation output, which is
  // recomputed (the fused forward never wrote it).
  // With a residual r, the pre-activation output is conv + r, and r's
  // gradient is the pre-activation gradient.
  Tensors g(grads.begin(), grads.end());
  const bool residual = c.input_metas.size() > 3 && c.inputs[3].defined();
  if (FusedActivation act = fused_activation(c.attrs, "conv2d"); act != FusedActivation::None) {
    Tensor z = conv2d(x, w, c.input_metas.size() > 2 ? c.inputs[2] : Tensor(), p);
    if (residual) z = add(z, c.inputs[3]);
    g[0] = act == FusedActivation::Relu ? relu_backward(g[0], z) : gelu_backward(g[0], z);
  }
  if (residual && c.needs_grad[3]) out[3] = g[0];
  if (c.needs_grad[0]) out[0] = conv2d_backward_input(g[0], w, x.shape(), p);
  if (c.needs_grad[1]) out[1] = conv2d_backward_weight(g[0], x, w.shape(), p);
  if (out.size() > 2 && c.needs_grad[2]) out[2] = sum(g[0], {0, 2, 3});
  return out;
}

// ---- conv2d_backward_input / conv2d_backward_weight ----
void check_grad_out(const Tensor& go, const ConvGeom& g, bool blocked, const char* op) {
  Shape want{g.N, g.O, g.OH, g.OW};
  if (blocked) want = padded_blocked_shape(want, op);
  KILN_CHECK(go.shape() == want, op, ": grad_out has shape ", shape_str(go.shape()), " but the convolution's output is ",
             shape_str(want), blocked ? " (grad_out_layout=nChw16c)" : "");
}
// The two backward ops take (grad_out, other) and the shape of what they
// produce as an attribute: for Data, other is the weight and the attribute
// input_shape; for Weights, other is the input and the attribute weight_shape.
// The input-side activation (Data: the output; Weights: `other`) is nChw16c
// with the attribute src_attr, grad_out with grad_out_layout.
template <Kind K>
struct BackwardOp {
  static constexpr bool kData = K == Kind::BackwardData;
  static constexpr const char* name = kData ? "conv2d_backward_input" : "conv2d_backward_weight";
  static constexpr const char* other = kData ? "weight" : "input";
  static constexpr const char* src_attr = kData ? "grad_input_layout" : "input_layout";
  static const Shape& out_shape(const Attrs& a) { return a.ints(kData ? "input_shape" : "weight_shape"); }
  static BlockedSides layouts(const Attrs& a) {
    return {wants_blocked(a, src_attr, name), wants_blocked(a, "grad_out_layout", name)};
  }
  static ConvGeom geometry(const Shape& other, const Attrs& a) {
    const bool src = layouts(a).src;
    return kData ? conv_geometry(out_shape(a), other, a, name)
                 : conv_geometry(input_activation_shape(other, src, out_shape(a), a, name), out_shape(a), a, name);
  }
};
template <Kind K>
std::vector<TensorMeta> conv2d_bwd_infer(TensorSpan in, const Attrs& a) {
  using Op = BackwardOp<K>;
  const Tensor& go = in[0];
  const Tensor& other = in[1];
  check_float(go, Op::name, "grad_out");
  KILN_CHECK(go.dtype() == other.dtype(), Op::name, ": grad_out is ", dtype_name(go.dtype()), " but ", Op::other,
             " is ", dtype_name(other.dtype()));
  const Device dev = common_device(in, Op::name);
  const BlockedSides blocked = Op::layouts(a);
  if (blocked.src || blocked.dst) check_blocked_dtype(go, dev, Op::name);
  check_grad_out(go, Op::geometry(other.shape(), a), blocked.dst, Op::name);
  algorithm_of(a);  // checks the name
  Shape os = Op::out_shape(a);
  if (Op::kData && blocked.src) os = padded_blocked_shape(os, Op::name);
  return {{os, go.dtype(), dev}};
}
template <Kind K>
void conv2d_bwd_kernel(TensorSpan in, std::span<Tensor> out, const Attrs& a) {
  conv_compute(K, BackwardOp<K>::geometry(in[1].shape(), a), in[0], in[1], Tensor(), out[0], FusedActivation::None,
               algorithm_of(a), BackwardOp<K>::layouts(a));
}

// ---- conv2d_backward_input(grad_out, weight) -> grad_input ----
// conv2d_backward_input is bilinear in (grad_out, weight): its derivative
// is a forward convolution and a weight gradient.
Tensors conv2d_bwd_input_back(const BackwardCtx& c, TensorSpan gg) {
  check_no_blocked_derivative(c.attrs, "grad_out_layout", "conv2d_backward_input");
  check_no_blocked_derivative(c.attrs, "grad_input_layout", "conv2d_backward_input");
  Conv2dParams p = conv_params(c.attrs);
  const Tensor& go = c.inputs[0];
  const Tensor& w = c.inputs[1];
  Tensors out(2);
  if (c.needs_grad[0]) out[0] = conv2d(gg[0], w, Tensor(), p);
  if (c.needs_grad[1]) out[1] = conv2d_backward_weight(go, gg[0], w.shape(), p);
  return out;
}

// ---- conv2d_backward_weight(grad_out, input) -> grad_weight ----
Tensors conv2d_bwd_weight_back(const BackwardCtx& c, TensorSpan gg) {
  check_no_blocked_derivative(c.attrs, "grad_out_layout", "conv2d_backward_weight");
  check_no_blocked_derivative(c.attrs, "input_layout", "conv2d_backward_weight");
  Conv2dParams p = conv_params(c.attrs);
  const Tensor& go = c.inputs[0];
  const Tensor& x = c.inputs[1];
  Tensors out(2);
  if (c.needs_grad[0]) out[0] = conv2d(x, gg[0], Tensor(), p);
  if (c.needs_grad[1]) out[1] = conv2d_backward_input(go, gg[0], x.shape(), p);
  return out;
}

}  // namespace

void register_conv_ops() {
  define_op(kernel_op(OpId::conv2d, conv2d_infer, conv2d_kernel, conv2d_back, kSaveInputs));
  define_op(kernel_op(OpId::conv2d_backward_input, conv2d_bwd_infer<Kind::BackwardData>,
                      conv2d_bwd_kernel<Kind::BackwardData>, conv2d_bwd_input_back, kSaveInputs));
  define_op(kernel_op(OpId::conv2d_backward_weight, conv2d_bwd_infer<Kind::BackwardWeights>,
                      conv2d_bwd_kernel<Kind::BackwardWeights>, conv2d_bwd_weight_back, kSaveInputs));
}

// ---- public functions ----
Tensor conv2d_fused(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p,
                    const std::string& activation) {
  KILN_CHECK(x.defined() && weight.defined(), "conv2d: input and weight must be defined tensors");
  Tensors in{x, weight};
  if (bias.defined()) in.push_back(bias);
  Attrs a = conv_attrs(p);
  if (!activation.empty()) a.set("activation", activation);
  return dispatch1(OpId::conv2d, std::move(in), a);
}
bool conv2d_post_op_pays(const Shape& x, const Shape& weight, bool bias, const Conv2dParams& p,
                         const std::string& activation) {
  if (x.size() != 4 || weight.size() != 4) return false;
  Attrs a = conv_attrs(p);
  a.set("activation", activation);
  ConvGeom g = conv_geometry(x, weight, a, "conv2d");
  if (g.N * g.C * g.H * g.W == 0 || g.O * g.OH * g.OW == 0) return false;
  try {
    return post_op_keeps_algorithm(g, bias, fused_activation(a, "conv2d"));
  } catch (const dnnl::error&) {
    return false;
  }
}
bool conv2d_residual_post_op_pays(const Shape& x, const Shape& weight, bool bias, const Conv2dParams& p,
                                  const std::string& activation) {
  if (x.size() != 4 || weight.size() != 4) return false;
  Attrs a = conv_attrs(p);
  if (!activation.empty()) a.set("activation", activation);
  ConvGeom g = conv_geometry(x, weight, a, "conv2d");
  if (g.N * g.C * g.H * g.W == 0 || g.O * g.OH * g.OW == 0) return false;
  try {
    return residual_post_op_keeps_algorithm(g, bias, fused_activation(a, "conv2d"), ConvAlgo::Auto);
  } catch (const dnnl::error&) {
    return false;
  }
}
Conv2dParams conv2d_params(const Attrs& a) { return conv_params(a); }

namespace {
// The kind and geometry of a conv2d, conv2d_backward_input or
// conv2d_backward_weight node from its first two inputs' shapes.
std::pair<Kind, ConvGeom> conv_op_geometry(OpId op, const Shape& in0, const Shape& in1, const Attrs& attrs) {
  if (op == OpId::conv2d)
    return {Kind::Forward,
            conv_geometry(input_activation_shape(in0, conv2d_layouts(attrs).src, in1, attrs, "conv2d"), in1, attrs, "conv2d")};
  if (op == OpId::conv2d_backward_input)
    return {Kind::BackwardData, BackwardOp<Kind::BackwardData>::geometry(in1, attrs)};
  KILN_CHECK(op == OpId::conv2d_backward_weight, "conv2d geometry: ", op_name(op), " is not a convolution");
  return {Kind::BackwardWeights, BackwardOp<Kind::BackwardWeights>::geometry(in1, attrs)};
}
}  // namespace

PaddedBlockedSides conv_keeps_padded_blocked(OpId op, const Shape& in0, const Shape& in1, bool bias,
                                             const Attrs& attrs) {
  if (in0.size() != 4 || in1.size() != 4 || algorithm_of(attrs) == ConvAlgo::Tuned) return {};
  for (const char* layout : {"in_layout", "out_layout", "grad_out_layout", "grad_input_layout", "input_layout"})
    if (attrs.has(layout)) return {};  // asks about the plain op's node
  try {
    const auto [kind, g] = conv_op_geometry(op, in0, in1, attrs);
    if (g.N * g.C * g.H * g.W == 0 || g.O * g.OH * g.OW == 0) return {};
    const ConvAlgo algo = algorithm_of(attrs);
    FusedActivation act = kind == Kind::Forward ? fused_activation(attrs, "conv2d") : FusedActivation::None;
    if (!runs_as_post_op(DType::Float32, DataType::f32, g, bias, act, algo)) act = FusedActivation::None;
    std::shared_ptr<ConvEntry> e = get_entry(kind, g, kind == Kind::Forward && bias, DataType::f32, act, algo,
                                             {true, true});
    // a, b, c (get_entry): Forward src, weights, dst; BackwardData diff_dst,
    // weights, diff_src; BackwardWeights diff_dst, src, diff_weights.
    if (kind == Kind::Forward) return {!e->a_in.needed, !e->c_out.needed};
    if (kind == Kind::BackwardData) return {!e->c_out.needed, !e->a_in.needed};
    return {!e->b_in.needed, !e->a_in.needed};
  } catch (const dnnl::error&) {
    return {};
  } catch (const Error&) {
    return {};
  }
}
bool conv_bf16_runs_float32(OpId op, const Shape& in0, const Shape& in1, bool bias, const Attrs& attrs) {
  const auto [kind, g] = conv_op_geometry(op, in0, in1, attrs);
  const Bf16Path path = bf16_path(kind, g, bias);
  if (path != Bf16Path::Undecided) return path == Bf16Path::Float32;
  // Not called yet: its first call's timing, now, on synthetic operands of
  // the layer's shapes (a dense convolution's speed does not depend on the
  // values), so a compiled graph knows before it first runs.
  Shape out;
  if (kind == Kind::Forward) out = {g.N, g.O, g.OH, g.OW};
  else if (kind == Kind::BackwardData) out = {g.N, g.C, g.H, g.W};
  else out = {g.O, g.C / g.groups, g.KH, g.KW};
  conv_compute(kind, g, cpu::synthetic_operand(in0, DType::BFloat16), cpu::synthetic_operand(in1, DType::BFloat16),
               bias ? cpu::synthetic_operand({g.O}, DType::BFloat16) : Tensor(),
               Tensor::empty(out, DType::BFloat16));
  return bf16_path(kind, g, bias) == Bf16Path::Float32;
}

bool conv_bf16_loses_among_float32(OpId op, const Shape& in0, const Shape& in1, bool bias, const Attrs& attrs) {
  if (conv_bf16_runs_float32(op, in0, in1, bias, attrs)) return true;  // decides an undecided layer
  const auto [kind, g] = conv_op_geometry(op, in0, in1, attrs);
  return bf16_setting() == Bf16Setting::Auto && conv_autotune::lookup(bf16_key(kind, g, bias)) == "bf16-alone";
}

bool conv_bf16_chosen_by_timing() { return bf16_setting() == Bf16Setting::Auto && cpu_has_avx512(); }

void record_conv_bf16_choice(OpId op, const Shape& in0, const Shape& in1, bool bias, const Attrs& attrs,
                             const std::string& choice) {
  const auto [kind, g] = conv_op_geometry(op, in0, in1, attrs);
  conv_autotune::record_bf16_choice(bf16_key(kind, g, bias), choice, "record_conv_bf16_choice");
}

ConvRun describe_conv_run(OpId op, const Shape& in0, const Shape& in1, bool bias, DType dtype, const Attrs& attrs) {
  const auto [kind, g] = conv_op_geometry(op, in0, in1, attrs);
  const FusedActivation act = kind == Kind::Forward ? fused_activation(attrs, "conv2d") : FusedActivation::None;
  const ConvAlgo asked = algorithm_of(attrs);
  ConvRun r;
  r.precision = dtype_name(dtype);
  if (dtype == DType::Float64) {
    r.algorithm = "direct";
    r.impl = "kiln's reference loop (oneDNN has no float64 convolution)";
    return r;
  }
  DataType dt = DataType::f32;
  ConvAlgo algo = asked == ConvAlgo::Tuned && dtype != DType::Float32 ? ConvAlgo::Auto : asked;
  r.algorithm = asked == ConvAlgo::Direct ? "direct" : "auto";
  if (dtype == DType::BFloat16) {
    switch (bf16_path(kind, g, bias)) {
      case Bf16Path::Bf16: dt = DataType::bf16; break;
      case Bf16Path::Float32: r.precision = "float32 (bfloat16 measured slower here, or no kernel)"; break;
      case Bf16Path::Undecided: r.impl = "bfloat16 or float32: timed on the first call"; return r;
    }
  } else if (dtype != DType::Float32) {
    r.precision = "float32 (casts around it)";
  }
  if (algo == ConvAlgo::Tuned) {
    std::optional<std::string> v = conv_autotune::lookup(tuned_key(kind, g, bias, act));
    if (!v || (*v != "direct" && *v != "auto")) {
      r.algorithm = "tuned: not measured yet (timed on the first call)";
      return r;
    }
    algo = *v == "direct" ? ConvAlgo::Direct : ConvAlgo::Auto;
    r.algorithm = "tuned: " + *v;
  }
  const bool post_op = runs_as_post_op(dtype, dt, g, bias, act, algo);
  r.impl = get_entry(kind, g, bias, dt, post_op ? act : FusedActivation::None, algo)->impl;
  if (!post_op) r.impl += " (activation applied after: its post-op would cost this kernel)";
  return r;
}
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p) {
  KILN_CHECK(x.defined() && weight.defined(), "conv2d: input and weight must be defined tensors");
  Tensors in{x, weight};
  if (bias.defined()) in.push_back(bias);
  return dispatch1(OpId::conv2d, std::move(in), conv_attrs(p));
}
Tensor conv2d_backward_input(const Tensor& grad_out, const Tensor& weight, const Shape& input_shape,
                             const Conv2dParams& p) {
  return dispatch1(OpId::conv2d_backward_input, {grad_out, weight}, conv_attrs(p).set("input_shape", input_shape));
}
Tensor conv2d_backward_weight(const Tensor& grad_out, const Tensor& x, const Shape& weight_shape,
                              const Conv2dParams& p) {
  return dispatch1(OpId::conv2d_backward_weight, {grad_out, x}, conv_attrs(p).set("weight_shape", weight_shape));
}

}  // namespace kiln
