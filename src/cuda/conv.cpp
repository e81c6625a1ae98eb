// conv2d and its two backward ops on CUDA through cuDNN 9.
//
// Each shape (kind, dtype, geometry, layout) gets a plan once and keeps it:
// through cuDNN's backend (graph) API (conv_graph.cpp), or its legacy
// convolution calls (conv_legacy.cpp) when no graph engine takes the shape or
// KILN_CUDNN_GRAPH=0. Plans are timed on the first call's buffers, as
// torch.backends.cudnn.benchmark. Workspaces are kiln tensors, so the caching
// allocator serves them. float32 and float64 run in FMA math (no TF32), so
// results match the CPU's (KILN_CUDNN_TF32=1 allows TF32 for float32, as
// PyTorch's default). float32 may run Winograd (KILN_CUDNN_WINOGRAD=0 leaves
// it out); float64 never does; float16/bfloat16 use tensor cores with float32
// accumulation. Operands are NCHW / OIHW (made contiguous first), or all NHWC
// when an activation is channels-last (MemoryFormat::ChannelsLast).
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>

#include "cuda/check.h"
#include "cuda/conv_cudnn.h"
#include "cuda/cudnn_util.h"
#include "cuda/kernels.h"
#include "kiln/cuda.h"
#include "kiln/memory_format.h"
#include "kiln/ops.h"
#include "ops/op_def.h"

namespace kiln::cuda {

const char* kind_name(Kind k) {
  return k == Kind::Forward ? "conv2d" : k == Kind::BackwardData ? "conv2d_backward_input" : "conv2d_backward_weight";
}

cudnnDataType_t cudnn_data_type(DType t) {
  switch (t) {
    case DType::Float32: return CUDNN_DATA_FLOAT;
    case DType::Float64: return CUDNN_DATA_DOUBLE;
    case DType::Float16: return CUDNN_DATA_HALF;
    case DType::BFloat16: return CUDNN_DATA_BFLOAT16;
    default: KILN_FAIL("conv2d on CUDA: dtype ", dtype_name(t), " is not supported; use a floating dtype");
  }
}

namespace {

bool env_is(const char* name, const char* value) {
  const char* v = std::getenv(name);
  return v != nullptr && std::string(v) == value;
}

// KILN_CUDNN_TF32=1: float32 convolutions may use TF32 tensor cores, as
// PyTorch's default (torch.backends.cudnn.allow_tf32 = True); results then
// differ from the CPU's by about 1e-3 relative. Off by default.
bool float32_may_round() {
  static const bool on = env_is("KILN_CUDNN_TF32", "1");
  return on;
}

// float32 may run cuDNN's Winograd algorithms (in FMA math), as torch's
// default does; KILN_CUDNN_WINOGRAD=0 leaves them out. Their transforms round
// to about 1e-4 of the output's scale (conv2d_resnet_layer4: 4.3e-3 on an rms
// of 56.5 against the CPU; TF32 is ten times that), and they are what makes
// float32 fast: on an H100 airbench's train step went 0.90x -> 1.54x torch
// eager, ResNet-18's 1.00x -> 1.72x (docs/results.md).
bool float32_winograd() {
  static const bool on = !env_is("KILN_CUDNN_WINOGRAD", "0");
  return on;
}

// KILN_CUDNN_GRAPH=0: every shape through the legacy calls.
bool graph_enabled() {
  static const bool on = !env_is("KILN_CUDNN_GRAPH", "0");
  return on;
}

}  // namespace

Numerics numerics_for(DType dt) {
  const bool exact = dt == DType::Float64 || (dt == DType::Float32 && !float32_may_round());
  // (TF32 float32 and 16-bit floats round anyway: Winograd as cuDNN likes.)
  const bool winograd = dt != DType::Float64 && (!exact || float32_winograd());
  return {exact, winograd};
}

bool find_enabled() {
  static const bool on = !env_is("KILN_CUDNN_FIND", "0");
  return on;
}

bool runtime_fusion_enabled() {
  static const bool on = env_is("KILN_CUDNN_RUNTIME_FUSION", "1");
  return on;
}

void log_plan(const char* api, Kind kind, const Geom& g, DType dt, const char* choice, size_t workspace) {
  if (!std::getenv("KILN_CUDNN_LOG")) return;
  std::fprintf(stderr,
               "kiln cudnn: %s %s x[%lld,%lld,%lld,%lld] w[%lld,%lld,%lld,%lld] stride %lld pad %lld: %s %s, "
               "workspace %zu\n",
               kind_name(kind), dtype_name(dt), static_cast<long long>(g.N), static_cast<long long>(g.C),
               static_cast<long long>(g.H), static_cast<long long>(g.W), static_cast<long long>(g.O),
               static_cast<long long>(g.C / g.groups), static_cast<long long>(g.KH), static_cast<long long>(g.KW),
               static_cast<long long>(g.sh), static_cast<long long>(g.ph), api, choice, workspace);
}

namespace {

std::pair<int64_t, int64_t> pair_of(const std::vector<int64_t>& v) { return {v[0], v.size() == 2 ? v[1] : v[0]}; }

// The infer rule has checked the attributes and shapes; here they are read.
Geom geometry(const Shape& x, const Shape& w, const Shape& y, const Attrs& a) {
  Geom g{};
  g.N = x[0], g.C = x[1], g.H = x[2], g.W = x[3];
  g.O = w[0], g.KH = w[2], g.KW = w[3];
  g.OH = y[2], g.OW = y[3];
  std::tie(g.sh, g.sw) = pair_of(a.ints("stride"));
  std::tie(g.ph, g.pw) = pair_of(a.ints("padding"));
  std::tie(g.dh, g.dw) = pair_of(a.ints("dilation"));
  g.groups = a.i("groups");
  return g;
}

// KILN_CUDNN_FUSE=0: a forward convolution's bias and activation always run
// as kiln's own kernels after it, never in its cuDNN graph.
bool epilogue_enabled() {
  static const bool on = !env_is("KILN_CUDNN_FUSE", "0");
  return on;
}

using Key = std::array<int64_t, 22>;

// The plan of a shape (made on the first call, kept for the process). With
// an epilogue: the graph plan that computes it, or nullptr (kept too) when
// no engine takes it.
const ConvPlan* plan_for(int device, cudnnHandle_t h, Kind kind, const Geom& g, DType dt, const Operands& o,
                         bool cl, Epilogue e) {
  static std::map<Key, std::unique_ptr<ConvPlan>> cache;
  static std::mutex mu;
  const Key key{device, static_cast<int64_t>(kind), static_cast<int64_t>(dt), g.N, g.C, g.H, g.W, g.O, g.KH, g.KW,
                g.OH, g.OW, g.sh, g.sw, g.ph, g.pw, g.dh, g.dw, g.groups, cl ? 1 : 0, e.bias ? 1 : 0,
                static_cast<int64_t>(e.act)};
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second.get();
  std::unique_ptr<ConvPlan> p;
  if (e.any()) {
    try {
      p = make_graph_plan(h, kind, g, dt, o, cl, e);
    } catch (const Error&) {  // a descriptor of the epilogue this cuDNN refuses
      p = nullptr;
    }
    if (!p) log_plan("graph with epilogue", kind, g, dt, "no engine: runs unfused", 0);
  } else {
    if (graph_enabled()) p = make_graph_plan(h, kind, g, dt, o, cl);
    if (!p) p = make_legacy_plan(h, kind, g, dt, o, cl);
  }
  return cache.emplace(key, std::move(p)).first->second.get();
}

// t in format fmt at a 16-byte aligned address (the graph plans' promise to
// cuDNN): a no-op for tensors the allocator made, a copy for odd views.
Tensor dense_aligned(const Tensor& t, MemoryFormat fmt) {
  Tensor c = contiguous(t, fmt);
  if (aligned16(c.data_ptr())) return c;
  Tensor copy = empty(t.shape(), t.dtype(), t.device(), fmt);
  copy.copy_(t);
  return copy;
}

// out = kind(a, b) where (a, b) is (x, w) forward, (dy, w) for the input's
// gradient and (dy, x) for the weight's; forward, with epilogue e (bias of
// out's dtype) when a graph plan takes it. Returns whether it ran e (false
// when e is empty: the caller then applies what e would have).
bool run(Kind kind, const Geom& g, const Tensor& a_in, const Tensor& b_in, const Tensor& out,
         const Tensor& bias = Tensor(), Epilogue e = {}) {
  const int device = out.device().index;
  if (out.numel() == 0) return false;
  if (a_in.numel() == 0 || b_in.numel() == 0) {  // an empty sum
    Tensor(out).fill_(0.0);
    return false;
  }
  // Channels-last when an activation of the call is (x, y, dy; the weight
  // follows): every operand is then made NHWC, a no-op for those already so
  // (the weights of a module moved with to(MemoryFormat::ChannelsLast)).
  const Tensor& act_b = kind == Kind::BackwardFilter ? b_in : out;  // x (weight grad) or y / dx
  const bool cl = suggest_memory_format(a_in) == MemoryFormat::ChannelsLast ||
                  suggest_memory_format(act_b) == MemoryFormat::ChannelsLast;
  const MemoryFormat fmt = cl ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;
  Tensor a = dense_aligned(a_in, fmt), b = dense_aligned(b_in, fmt);
  Tensor o = is_contiguous(out, fmt) && aligned16(out.data_ptr()) ? out
                                                                  : empty(out.shape(), out.dtype(), out.device(), fmt);
  cudnnHandle_t h = cudnn_handle(device, kind_name(kind));
  Operands ops{a.data_ptr(), b.data_ptr(), o.data_ptr(), out.device()};
  Tensor bias_dense;
  if (e.bias) {
    bias_dense = dense_aligned(bias, MemoryFormat::Contiguous);
    ops.bias = bias_dense.data_ptr();
  }
  const ConvPlan* p = e.any() && epilogue_enabled() ? plan_for(device, h, kind, g, out.dtype(), ops, cl, e) : nullptr;
  const bool fused = p != nullptr;
  if (!fused) p = plan_for(device, h, kind, g, out.dtype(), ops, cl, {});
  Tensor ws;
  if (p->workspace() > 0) ws = Tensor::empty({static_cast<int64_t>(p->workspace())}, DType::UInt8, out.device());
  p->run(h, ops, p->workspace() > 0 ? ws.data_ptr() : nullptr);
  if (!o.shares_storage(out)) Tensor(out).copy_(o);
  return fused;
}

}  // namespace

// The bias, then the activation nn::fuse_modules and the compiler's
// fuse_conv_activation set (attribute `activation`, "relu" or "gelu" with
// erf; the infer rule checked the name): in the convolution's cuDNN graph
// where an engine takes it, else applied in place after it.
void conv2d_kernel(TensorSpan in, std::span<Tensor> out, const Attrs& a) {
  Geom g = geometry(in[0].shape(), in[1].shape(), out[0].shape(), a);
  const bool has_bias = in.size() > 2 && in[2].defined();
  const std::string act = a.has("activation") ? a.s("activation") : "";
  Epilogue e;
  e.act = fused_activation(a, "conv2d");
  e.bias = has_bias;
  if (has_bias && in[2].dtype() != out[0].dtype()) e = {};  // the graph takes a bias of the output's dtype
  if (run(Kind::Forward, g, in[0], in[1], out[0], has_bias ? in[2] : Tensor(), e)) return;
  if (has_bias) out[0].add_(in[2].view({1, g.O, 1, 1}));
  if (!act.empty()) out[0].copy_(act == "relu" ? relu(out[0]) : gelu(out[0], "none"));
}

void conv2d_backward_input_kernel(TensorSpan in, std::span<Tensor> out, const Attrs& a) {
  // in: grad_out [N, O, OH, OW], weight; out: grad_input
  Geom g = geometry(out[0].shape(), in[1].shape(), in[0].shape(), a);
  run(Kind::BackwardData, g, in[0], in[1], out[0]);
}

void conv2d_backward_weight_kernel(TensorSpan in, std::span<Tensor> out, const Attrs& a) {
  // in: grad_out, input; out: grad_weight
  Geom g = geometry(in[1].shape(), out[0].shape(), in[0].shape(), a);
  run(Kind::BackwardFilter, g, in[0], in[1], out[0]);
}

}  // namespace kiln::cuda
