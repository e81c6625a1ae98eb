// conv2d and its two backward ops on CUDA through cuDNN 9's convolution API
// (cudnnConvolutionForward / BackwardData / BackwardFilter).
//
// Each shape (kind, dtype, geometry) gets a plan once: its descriptors and
// the fastest algorithm on this GPU, timed by cuDNN's Find on the first
// call's own buffers (as torch.backends.cudnn.benchmark; KILN_CUDNN_FIND=0
// takes the heuristics' first algorithm that runs instead), with its
// workspace size. The heuristics' first pick was up to 2x slower on some of
// ResNet-18's and airbench's shapes at batch 512. Workspaces are kiln
// tensors, so the caching allocator serves them. float32 and float64 run with
// CUDNN_FMA_MATH (no TF32), so results match the CPU's (KILN_CUDNN_TF32=1
// allows TF32 for float32, as PyTorch's default). float32 may run Winograd
// (KILN_CUDNN_WINOGRAD=0 leaves it out: float32_winograd); float64 never does;
// float16/bfloat16 use tensor cores with float32 accumulation. Operands are
// NCHW / OIHW (made contiguous first), or all NHWC when an activation is
// channels-last (MemoryFormat::ChannelsLast).
#include <cudnn.h>

#include <array>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <vector>

#include "cuda/check.h"
#include "kiln/cuda.h"
#include "kiln/memory_format.h"
#include "kiln/ops.h"
#include "ops/op_def.h"

namespace kiln::cuda {

namespace {

#define KILN_CUDNN_CHECK(call, what)                                                                    \
  do {                                                                                                  \
    cudnnStatus_t kiln_st_ = (call);                                                                    \
    if (kiln_st_ != CUDNN_STATUS_SUCCESS)                                                               \
      KILN_FAIL(what, ": cuDNN error ", static_cast<int>(kiln_st_), " (", cudnnGetErrorString(kiln_st_), \
                ") from ", #call);                                                                      \
  } while (0)

constexpr int kMaxDevices = 64;

cudnnHandle_t handle_for(int device) {
  static std::array<cudnnHandle_t, kMaxDevices> all{};
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  cudnnHandle_t& h = all[static_cast<size_t>(device)];
  if (h == nullptr) KILN_CUDNN_CHECK(cudnnCreate(&h), "conv2d");
  return h;
}

enum class Kind { Forward, BackwardData, BackwardFilter };

struct Geom {
  int64_t N, C, H, W, O, KH, KW, OH, OW;
  int64_t sh, sw, ph, pw, dh, dw, groups;
};

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

cudnnDataType_t data_type(DType t) {
  switch (t) {
    case DType::Float32: return CUDNN_DATA_FLOAT;
    case DType::Float64: return CUDNN_DATA_DOUBLE;
    case DType::Float16: return CUDNN_DATA_HALF;
    case DType::BFloat16: return CUDNN_DATA_BFLOAT16;
    default: KILN_FAIL("conv2d on CUDA: dtype ", dtype_name(t), " is not supported; use a floating dtype");
  }
}

int as_int(int64_t v) {
  KILN_CHECK(v <= INT32_MAX, "conv2d on CUDA: size ", v, " exceeds cuDNN's 32-bit sizes");
  return static_cast<int>(v);
}

// The descriptors and chosen algorithm of one convolution shape.
struct Plan {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  int algo = 0;
  size_t workspace = 0;
  bool timed = false;  // chosen by Find (else by the heuristics)
  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {
    if (x) cudnnDestroyTensorDescriptor(x);
    if (y) cudnnDestroyTensorDescriptor(y);
    if (w) cudnnDestroyFilterDescriptor(w);
    if (conv) cudnnDestroyConvolutionDescriptor(conv);
  }
};

using Key = std::array<int64_t, 20>;

// The heuristics' ranking of algorithms for one kind, best first, as
// (algo, math type) pairs.
std::vector<std::pair<int, cudnnMathType_t>> ranked_algos(cudnnHandle_t h, Kind kind, const Plan& p) {
  std::vector<std::pair<int, cudnnMathType_t>> r;
  int n = 0;
  if (kind == Kind::Forward) {
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    KILN_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(h, p.x, p.w, p.conv, p.y,
                                                            CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, perf),
                     "conv2d");
    for (int i = 0; i < n; ++i)
      if (perf[i].status == CUDNN_STATUS_SUCCESS) r.emplace_back(static_cast<int>(perf[i].algo), perf[i].mathType);
  } else if (kind == Kind::BackwardData) {
    cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    KILN_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, p.w, p.y, p.conv, p.x,
                                                                 CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n, perf),
                     "conv2d_backward_input");
    for (int i = 0; i < n; ++i)
      if (perf[i].status == CUDNN_STATUS_SUCCESS) r.emplace_back(static_cast<int>(perf[i].algo), perf[i].mathType);
  } else {
    cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    KILN_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, p.x, p.y, p.conv, p.w,
                                                                   CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n, perf),
                     "conv2d_backward_weight");
    for (int i = 0; i < n; ++i)
      if (perf[i].status == CUDNN_STATUS_SUCCESS) r.emplace_back(static_cast<int>(perf[i].algo), perf[i].mathType);
  }
  return r;
}

cudnnStatus_t workspace_size(cudnnHandle_t h, Kind kind, const Plan& p, int algo, size_t* bytes) {
  if (kind == Kind::Forward)
    return cudnnGetConvolutionForwardWorkspaceSize(h, p.x, p.w, p.conv, p.y,
                                                   static_cast<cudnnConvolutionFwdAlgo_t>(algo), bytes);
  if (kind == Kind::BackwardData)
    return cudnnGetConvolutionBackwardDataWorkspaceSize(h, p.w, p.y, p.conv, p.x,
                                                        static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), bytes);
  return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, p.x, p.y, p.conv, p.w,
                                                        static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo), bytes);
}

const char* kind_name(Kind k) {
  return k == Kind::Forward ? "conv2d" : k == Kind::BackwardData ? "conv2d_backward_input" : "conv2d_backward_weight";
}

// Workspaces above this are skipped for a lesser algorithm.
constexpr size_t kMaxWorkspace = size_t{1} << 30;

// The buffers of the call a plan is made for: Find times the algorithms on
// them (out is overwritten; the real call writes it again).
struct Operands {
  const void* a;  // x forward, dy for both backward kinds
  const void* b;  // w forward and for the input's gradient, x for the weight's
  void* out;
  Device device;
};

struct Timed {
  int algo;
  cudnnMathType_t math;
  size_t memory;
};

// cuDNN's Find over every algorithm that fits in `ws_bytes`, fastest first.
std::vector<Timed> find_algos(cudnnHandle_t h, Kind kind, const Plan& p, const Operands& o, void* ws,
                              size_t ws_bytes) {
  std::vector<Timed> r;
  int n = 0;
  const char* op = kind_name(kind);
  auto keep = [&r](const auto& perf, int count) {
    for (int i = 0; i < count; ++i)
      if (perf[i].status == CUDNN_STATUS_SUCCESS)
        r.push_back({static_cast<int>(perf[i].algo), perf[i].mathType, perf[i].memory});
  };
  if (kind == Kind::Forward) {
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    KILN_CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(h, p.x, o.a, p.w, o.b, p.conv, p.y, o.out,
                                                            CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, perf, ws, ws_bytes),
                     op);
    keep(perf, n);
  } else if (kind == Kind::BackwardData) {
    cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    KILN_CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(h, p.w, o.b, p.y, o.a, p.conv, p.x, o.out,
                                                                 CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n, perf, ws,
                                                                 ws_bytes),
                     op);
    keep(perf, n);
  } else {
    cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    KILN_CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(h, p.x, o.b, p.y, o.a, p.conv, p.w, o.out,
                                                                   CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n, perf,
                                                                   ws, ws_bytes),
                     op);
    keep(perf, n);
  }
  return r;
}

// Winograd's transforms add rounding error (about 1e-4 of the output's scale
// in float32): float64 never runs them, float32 unless KILN_CUDNN_WINOGRAD=0.
bool is_winograd(Kind kind, int algo) {
  if (kind == Kind::Forward)
    return algo == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD || algo == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED;
  if (kind == Kind::BackwardData)
    return algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD || algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED;
  return algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD || algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED;
}

// KILN_CUDNN_TF32=1: float32 convolutions may use TF32 tensor cores, as
// PyTorch's default (torch.backends.cudnn.allow_tf32 = True); results then
// differ from the CPU's by about 1e-3 relative. Off by default.
bool float32_may_round() {
  static const bool on = [] {
    const char* v = std::getenv("KILN_CUDNN_TF32");
    return v != nullptr && std::string(v) == "1";
  }();
  return on;
}

// float32 may run cuDNN's Winograd algorithms (in FMA math), as torch's
// default does; KILN_CUDNN_WINOGRAD=0 leaves them out. Their transforms round
// to about 1e-4 of the output's scale (conv2d_resnet_layer4: 4.3e-3 on an rms
// of 56.5 against the CPU; TF32 is ten times that), and they are what makes
// float32 fast: on an H200 airbench's train step went 0.90x -> 1.62x torch
// eager, ResNet-18's 1.00x -> 1.80x (docs/results.md, "CUDA (H200)").
bool float32_winograd() {
  static const bool on = [] {
    const char* v = std::getenv("KILN_CUDNN_WINOGRAD");
    return v == nullptr || std::string(v) != "0";
  }();
  return on;
}

bool find_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("KILN_CUDNN_FIND");
    return v == nullptr || std::string(v) != "0";
  }();
  return on;
}

// Chooses p's algorithm by timing; false when Find gave nothing usable (the
// caller falls back to the heuristics). float32/float64 keep FMA math.
bool choose_by_find(cudnnHandle_t h, Kind kind, Plan& p, const Operands& o, bool exact, bool winograd) {
  const char* op = kind_name(kind);
  // The workspace Find may use: the largest any ranked algorithm asks for,
  // within kMaxWorkspace (a kiln tensor: the caching allocator keeps it).
  size_t ws_bytes = 0;
  for (auto [algo, math] : ranked_algos(h, kind, p)) {
    if (!exact) KILN_CUDNN_CHECK(cudnnSetConvolutionMathType(p.conv, math), op);
    size_t bytes = 0;
    if (workspace_size(h, kind, p, algo, &bytes) == CUDNN_STATUS_SUCCESS && bytes <= kMaxWorkspace)
      ws_bytes = std::max(ws_bytes, bytes);
  }
  KILN_CUDNN_CHECK(cudnnSetConvolutionMathType(p.conv, exact ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH), op);
  Tensor ws;
  if (ws_bytes > 0) ws = Tensor::empty({static_cast<int64_t>(ws_bytes)}, DType::UInt8, o.device);
  for (const Timed& t : find_algos(h, kind, p, o, ws_bytes > 0 ? ws.data_ptr() : nullptr, ws_bytes)) {
    if (exact && t.math != CUDNN_FMA_MATH) continue;  // no TF32
    if (!winograd && is_winograd(kind, t.algo)) continue;
    if (t.memory > ws_bytes) continue;
    KILN_CUDNN_CHECK(cudnnSetConvolutionMathType(p.conv, t.math), op);
    size_t bytes = 0;
    if (workspace_size(h, kind, p, t.algo, &bytes) != CUDNN_STATUS_SUCCESS || bytes > kMaxWorkspace) continue;
    p.algo = t.algo;
    p.workspace = bytes;
    p.timed = true;
    return true;
  }
  KILN_CUDNN_CHECK(cudnnSetConvolutionMathType(p.conv, exact ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH), op);
  return false;
}

void log_plan(const char* op, const Geom& g, DType dt, const Plan& p) {
  if (!std::getenv("KILN_CUDNN_LOG")) return;
  std::fprintf(stderr,
               "kiln cudnn: %s %s x[%lld,%lld,%lld,%lld] w[%lld,%lld,%lld,%lld] stride %lld pad %lld: algo %d (%s), "
               "workspace %zu\n",
               op, dtype_name(dt), static_cast<long long>(g.N), static_cast<long long>(g.C),
               static_cast<long long>(g.H), static_cast<long long>(g.W), static_cast<long long>(g.O),
               static_cast<long long>(g.C / g.groups), static_cast<long long>(g.KH), static_cast<long long>(g.KW),
               static_cast<long long>(g.sh), static_cast<long long>(g.ph), p.algo, p.timed ? "timed" : "heuristics",
               p.workspace);
}

std::shared_ptr<Plan> make_plan(cudnnHandle_t h, Kind kind, const Geom& g, DType dt, const Operands& o, bool cl) {
  const char* op = kind_name(kind);
  auto p = std::make_shared<Plan>();
  const cudnnDataType_t t = data_type(dt);
  const bool exact = dt == DType::Float64 || (dt == DType::Float32 && !float32_may_round());
  // (TF32 float32 and 16-bit floats round anyway: Winograd as cuDNN likes.)
  const bool winograd = dt != DType::Float64 && (!exact || float32_winograd());
  KILN_CUDNN_CHECK(cudnnCreateTensorDescriptor(&p->x), op);
  KILN_CUDNN_CHECK(cudnnCreateTensorDescriptor(&p->y), op);
  KILN_CUDNN_CHECK(cudnnCreateFilterDescriptor(&p->w), op);
  KILN_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&p->conv), op);
  // Channels-last: input, output and filter all NHWC (KRSC), the layout
  // cuDNN's tensor-core kernels read without transposing.
  const cudnnTensorFormat_t fmt = cl ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
  KILN_CUDNN_CHECK(cudnnSetTensor4dDescriptor(p->x, fmt, t, as_int(g.N), as_int(g.C), as_int(g.H),
                                              as_int(g.W)),
                   op);
  KILN_CUDNN_CHECK(cudnnSetTensor4dDescriptor(p->y, fmt, t, as_int(g.N), as_int(g.O), as_int(g.OH),
                                              as_int(g.OW)),
                   op);
  KILN_CUDNN_CHECK(cudnnSetFilter4dDescriptor(p->w, t, fmt, as_int(g.O), as_int(g.C / g.groups),
                                              as_int(g.KH), as_int(g.KW)),
                   op);
  KILN_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(p->conv, as_int(g.ph), as_int(g.pw), as_int(g.sh), as_int(g.sw),
                                                   as_int(g.dh), as_int(g.dw), CUDNN_CROSS_CORRELATION,
                                                   dt == DType::Float64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT),
                   op);
  KILN_CUDNN_CHECK(cudnnSetConvolutionGroupCount(p->conv, as_int(g.groups)), op);
  KILN_CUDNN_CHECK(cudnnSetConvolutionMathType(p->conv, exact ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH), op);
  if (find_enabled() && choose_by_find(h, kind, *p, o, exact, winograd)) {
    log_plan(op, g, dt, *p);
    return p;
  }
  for (auto [algo, math] : ranked_algos(h, kind, *p)) {
    // float32/float64 keep FMA math whatever the heuristics rank (TF32 would
    // not match the CPU); 16-bit floats take the ranked math type. The
    // FFT-based algorithms stay: leaving them out cost the fwd+bwd cases
    // 20-50% on an H200 and did not change the one float32 mismatch seen
    // (docs/cuda.md).
    if (!exact) KILN_CUDNN_CHECK(cudnnSetConvolutionMathType(p->conv, math), op);
    if (!winograd && is_winograd(kind, algo)) continue;
    size_t bytes = 0;
    if (workspace_size(h, kind, *p, algo, &bytes) != CUDNN_STATUS_SUCCESS || bytes > kMaxWorkspace) continue;
    p->algo = algo;
    p->workspace = bytes;
    log_plan(op, g, dt, *p);
    return p;
  }
  KILN_FAIL(op, " on CUDA: cuDNN has no algorithm for input [", g.N, ", ", g.C, ", ", g.H, ", ", g.W, "], weight [",
            g.O, ", ", g.C / g.groups, ", ", g.KH, ", ", g.KW, "] in ", dtype_name(dt));
}

std::shared_ptr<Plan> plan_for(int device, Kind kind, const Geom& g, DType dt, const Operands& o, bool cl) {
  static std::map<Key, std::shared_ptr<Plan>> cache;
  static std::mutex mu;
  Key key{device, static_cast<int64_t>(kind), static_cast<int64_t>(dt), g.N, g.C, g.H, g.W, g.O, g.KH, g.KW,
          g.OH, g.OW, g.sh, g.sw, g.ph, g.pw, g.dh, g.dw, g.groups, cl ? 1 : 0};
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  cudnnHandle_t h = handle_for(device);
  KILN_CUDNN_CHECK(cudnnSetStream(h, stream_for(device)), kind_name(kind));
  auto p = make_plan(h, kind, g, dt, o, cl);
  cache.emplace(key, p);
  return p;
}

// out = kind(a, b) where (a, b) is (x, w) forward, (dy, w) for the input's
// gradient and (dy, x) for the weight's.
void run(Kind kind, const Geom& g, const Tensor& a_in, const Tensor& b_in, const Tensor& out) {
  const int device = out.device().index;
  const char* op = kind_name(kind);
  if (out.numel() == 0) return;
  if (a_in.numel() == 0 || b_in.numel() == 0) {  // an empty sum
    Tensor(out).fill_(0.0);
    return;
  }
  // Channels-last when an activation of the call is (x, y, dy; the weight
  // follows): every operand is then made NHWC, a no-op for those already so
  // (the weights of a module moved with to(MemoryFormat::ChannelsLast)).
  const Tensor& act_a = a_in;  // x or dy
  const Tensor& act_b = kind == Kind::BackwardFilter ? b_in : out;  // x (weight grad) or y / dx
  const bool cl = suggest_memory_format(act_a) == MemoryFormat::ChannelsLast ||
                  suggest_memory_format(act_b) == MemoryFormat::ChannelsLast;
  const MemoryFormat fmt = cl ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;
  Tensor a = contiguous(a_in, fmt), b = contiguous(b_in, fmt);
  Tensor o = is_contiguous(out, fmt) ? out : empty(out.shape(), out.dtype(), out.device(), fmt);
  std::shared_ptr<Plan> p =
      plan_for(device, kind, g, out.dtype(), Operands{a.data_ptr(), b.data_ptr(), o.data_ptr(), out.device()}, cl);
  cudnnHandle_t h = handle_for(device);
  KILN_CUDNN_CHECK(cudnnSetStream(h, stream_for(device)), op);
  Tensor ws;
  if (p->workspace > 0) ws = Tensor::empty({static_cast<int64_t>(p->workspace)}, DType::UInt8, out.device());
  void* wsp = p->workspace > 0 ? ws.data_ptr() : nullptr;
  // alpha/beta are double for double data, float otherwise.
  const double one_d = 1.0, zero_d = 0.0;
  const float one_f = 1.0f, zero_f = 0.0f;
  const bool dbl = out.dtype() == DType::Float64;
  const void* one = dbl ? static_cast<const void*>(&one_d) : &one_f;
  const void* zero = dbl ? static_cast<const void*>(&zero_d) : &zero_f;
  if (kind == Kind::Forward) {
    KILN_CUDNN_CHECK(cudnnConvolutionForward(h, one, p->x, a.data_ptr(), p->w, b.data_ptr(), p->conv,
                                             static_cast<cudnnConvolutionFwdAlgo_t>(p->algo), wsp, p->workspace,
                                             zero, p->y, o.data_ptr()),
                     op);
  } else if (kind == Kind::BackwardData) {
    KILN_CUDNN_CHECK(cudnnConvolutionBackwardData(h, one, p->w, b.data_ptr(), p->y, a.data_ptr(), p->conv,
                                                  static_cast<cudnnConvolutionBwdDataAlgo_t>(p->algo), wsp,
                                                  p->workspace, zero, p->x, o.data_ptr()),
                     op);
  } else {
    KILN_CUDNN_CHECK(cudnnConvolutionBackwardFilter(h, one, p->x, b.data_ptr(), p->y, a.data_ptr(), p->conv,
                                                    static_cast<cudnnConvolutionBwdFilterAlgo_t>(p->algo), wsp,
                                                    p->workspace, zero, p->w, o.data_ptr()),
                     op);
  }
  if (!o.shares_storage(out)) Tensor(out).copy_(o);
}

}  // namespace

void conv2d_kernel(TensorSpan in, std::span<Tensor> out, const Attrs& a) {
  Geom g = geometry(in[0].shape(), in[1].shape(), out[0].shape(), a);
  run(Kind::Forward, g, in[0], in[1], out[0]);
  if (in.size() > 2 && in[2].defined()) out[0].add_(in[2].view({1, g.O, 1, 1}));
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
