// Convolution plans through cuDNN's legacy convolution API
// (cudnnConvolutionForward / BackwardData / BackwardFilter): the fallback for
// shapes no engine of the backend API takes (conv_graph.cpp), and the whole
// path under KILN_CUDNN_GRAPH=0.
//
// A plan is the descriptors and the fastest algorithm on this GPU, timed by
// cuDNN's Find on the first call's own buffers (KILN_CUDNN_FIND=0 takes the
// heuristics' first algorithm that runs instead), with its workspace size.
// The heuristics' first pick was up to 2x slower on some of ResNet-18's and
// airbench's shapes at batch 512. In cuDNN 9 each of these calls costs about
// 100-130 us of host time (ResNet-18, bf16, H100), more than many of the
// kernels they start: the reason the graph API is the default.
#include <algorithm>
#include <string>
#include <vector>

#include "cuda/conv_cudnn.h"
#include "cuda/cudnn_util.h"
#include "kiln/ops.h"

namespace kiln::cuda {

namespace {

int as_int(int64_t v) {
  KILN_CHECK(v <= INT32_MAX, "conv2d on CUDA: size ", v, " exceeds cuDNN's 32-bit sizes");
  return static_cast<int>(v);
}

struct Algo {
  int algo;
  cudnnMathType_t math;
  size_t memory;  // Find's answer; 0 from the heuristics
};

class LegacyPlan final : public ConvPlan {
 public:
  LegacyPlan(Kind kind, DType dt) : kind_(kind), dbl_(dt == DType::Float64) {}
  ~LegacyPlan() override {
    if (x_) cudnnDestroyTensorDescriptor(x_);
    if (y_) cudnnDestroyTensorDescriptor(y_);
    if (w_) cudnnDestroyFilterDescriptor(w_);
    if (conv_) cudnnDestroyConvolutionDescriptor(conv_);
  }

  void describe(const Geom& g, DType dt, bool cl, bool exact);
  std::vector<Algo> ranked(cudnnHandle_t h) const;
  std::vector<Algo> find(cudnnHandle_t h, const Operands& o, void* ws, size_t ws_bytes) const;
  cudnnStatus_t workspace_size(cudnnHandle_t h, int algo, size_t* bytes) const;
  bool is_winograd(int algo) const;
  void set_math(cudnnMathType_t m) { KILN_CUDNN_CHECK(cudnnSetConvolutionMathType(conv_, m), kind_name(kind_)); }
  void choose(int algo, size_t ws, bool timed) {
    algo_ = algo;
    workspace_ = ws;
    timed_ = timed;
  }
  bool timed() const { return timed_; }
  int algo() const { return algo_; }

  size_t workspace() const override { return workspace_; }
  void run(cudnnHandle_t h, const Operands& o, void* ws) const override;

 private:
  Kind kind_;
  bool dbl_;
  cudnnTensorDescriptor_t x_ = nullptr, y_ = nullptr;
  cudnnFilterDescriptor_t w_ = nullptr;
  cudnnConvolutionDescriptor_t conv_ = nullptr;
  int algo_ = 0;
  size_t workspace_ = 0;
  bool timed_ = false;
};

void LegacyPlan::describe(const Geom& g, DType dt, bool cl, bool exact) {
  const char* op = kind_name(kind_);
  const cudnnDataType_t t = cudnn_data_type(dt);
  KILN_CUDNN_CHECK(cudnnCreateTensorDescriptor(&x_), op);
  KILN_CUDNN_CHECK(cudnnCreateTensorDescriptor(&y_), op);
  KILN_CUDNN_CHECK(cudnnCreateFilterDescriptor(&w_), op);
  KILN_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&conv_), op);
  // Channels-last: input, output and filter all NHWC (KRSC), the layout
  // cuDNN's tensor-core kernels read without transposing.
  const cudnnTensorFormat_t fmt = cl ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
  KILN_CUDNN_CHECK(
      cudnnSetTensor4dDescriptor(x_, fmt, t, as_int(g.N), as_int(g.C), as_int(g.H), as_int(g.W)), op);
  KILN_CUDNN_CHECK(
      cudnnSetTensor4dDescriptor(y_, fmt, t, as_int(g.N), as_int(g.O), as_int(g.OH), as_int(g.OW)), op);
  KILN_CUDNN_CHECK(cudnnSetFilter4dDescriptor(w_, t, fmt, as_int(g.O), as_int(g.C / g.groups), as_int(g.KH),
                                              as_int(g.KW)),
                   op);
  KILN_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(conv_, as_int(g.ph), as_int(g.pw), as_int(g.sh), as_int(g.sw),
                                                   as_int(g.dh), as_int(g.dw), CUDNN_CROSS_CORRELATION,
                                                   dbl_ ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT),
                   op);
  KILN_CUDNN_CHECK(cudnnSetConvolutionGroupCount(conv_, as_int(g.groups)), op);
  set_math(exact ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH);
}

template <typename Perf>
void keep_successes(const Perf* perf, int n, std::vector<Algo>& r) {
  for (int i = 0; i < n; ++i)
    if (perf[i].status == CUDNN_STATUS_SUCCESS)
      r.push_back({static_cast<int>(perf[i].algo), perf[i].mathType, perf[i].memory});
}

// The heuristics' ranking, best first.
std::vector<Algo> LegacyPlan::ranked(cudnnHandle_t h) const {
  std::vector<Algo> r;
  int n = 0;
  const char* op = kind_name(kind_);
  if (kind_ == Kind::Forward) {
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    KILN_CUDNN_CHECK(
        cudnnGetConvolutionForwardAlgorithm_v7(h, x_, w_, conv_, y_, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, perf), op);
    keep_successes(perf, n, r);
  } else if (kind_ == Kind::BackwardData) {
    cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    KILN_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, w_, y_, conv_, x_,
                                                                 CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n, perf),
                     op);
    keep_successes(perf, n, r);
  } else {
    cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    KILN_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, x_, y_, conv_, w_,
                                                                   CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n, perf),
                     op);
    keep_successes(perf, n, r);
  }
  for (Algo& a : r) a.memory = 0;
  return r;
}

// cuDNN's Find over every algorithm that fits in `ws_bytes`, fastest first.
std::vector<Algo> LegacyPlan::find(cudnnHandle_t h, const Operands& o, void* ws, size_t ws_bytes) const {
  std::vector<Algo> r;
  int n = 0;
  const char* op = kind_name(kind_);
  if (kind_ == Kind::Forward) {
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    KILN_CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(h, x_, o.a, w_, o.b, conv_, y_, o.out,
                                                            CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, perf, ws, ws_bytes),
                     op);
    keep_successes(perf, n, r);
  } else if (kind_ == Kind::BackwardData) {
    cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    KILN_CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(h, w_, o.b, y_, o.a, conv_, x_, o.out,
                                                                 CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n, perf, ws,
                                                                 ws_bytes),
                     op);
    keep_successes(perf, n, r);
  } else {
    cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    KILN_CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(h, x_, o.b, y_, o.a, conv_, w_, o.out,
                                                                   CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n, perf,
                                                                   ws, ws_bytes),
                     op);
    keep_successes(perf, n, r);
  }
  return r;
}

cudnnStatus_t LegacyPlan::workspace_size(cudnnHandle_t h, int algo, size_t* bytes) const {
  if (kind_ == Kind::Forward)
    return cudnnGetConvolutionForwardWorkspaceSize(h, x_, w_, conv_, y_, static_cast<cudnnConvolutionFwdAlgo_t>(algo),
                                                   bytes);
  if (kind_ == Kind::BackwardData)
    return cudnnGetConvolutionBackwardDataWorkspaceSize(h, w_, y_, conv_, x_,
                                                        static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), bytes);
  return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, x_, y_, conv_, w_,
                                                        static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo), bytes);
}

bool LegacyPlan::is_winograd(int algo) const {
  if (kind_ == Kind::Forward)
    return algo == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD || algo == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED;
  if (kind_ == Kind::BackwardData)
    return algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD || algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED;
  return algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD || algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED;
}

void LegacyPlan::run(cudnnHandle_t h, const Operands& o, void* ws) const {
  const char* op = kind_name(kind_);
  // alpha/beta are double for double data, float otherwise.
  const double one_d = 1.0, zero_d = 0.0;
  const float one_f = 1.0f, zero_f = 0.0f;
  const void* one = dbl_ ? static_cast<const void*>(&one_d) : &one_f;
  const void* zero = dbl_ ? static_cast<const void*>(&zero_d) : &zero_f;
  if (kind_ == Kind::Forward) {
    KILN_CUDNN_CHECK(cudnnConvolutionForward(h, one, x_, o.a, w_, o.b, conv_,
                                             static_cast<cudnnConvolutionFwdAlgo_t>(algo_), ws, workspace_, zero, y_,
                                             o.out),
                     op);
  } else if (kind_ == Kind::BackwardData) {
    KILN_CUDNN_CHECK(cudnnConvolutionBackwardData(h, one, w_, o.b, y_, o.a, conv_,
                                                  static_cast<cudnnConvolutionBwdDataAlgo_t>(algo_), ws, workspace_,
                                                  zero, x_, o.out),
                     op);
  } else {
    KILN_CUDNN_CHECK(cudnnConvolutionBackwardFilter(h, one, x_, o.b, y_, o.a, conv_,
                                                    static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo_), ws,
                                                    workspace_, zero, w_, o.out),
                     op);
  }
}

// Chooses p's algorithm by timing; false when Find gave nothing usable (the
// caller falls back to the heuristics). float32/float64 keep FMA math.
bool choose_by_find(cudnnHandle_t h, LegacyPlan& p, const Operands& o, Numerics num) {
  // The workspace Find may use: the largest any ranked algorithm asks for,
  // within kMaxConvWorkspace (a kiln tensor: the caching allocator keeps it).
  size_t ws_bytes = 0;
  for (const Algo& a : p.ranked(h)) {
    if (!num.exact) p.set_math(a.math);
    size_t bytes = 0;
    if (p.workspace_size(h, a.algo, &bytes) == CUDNN_STATUS_SUCCESS && bytes <= kMaxConvWorkspace)
      ws_bytes = std::max(ws_bytes, bytes);
  }
  p.set_math(num.exact ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH);
  Tensor ws;
  if (ws_bytes > 0) ws = Tensor::empty({static_cast<int64_t>(ws_bytes)}, DType::UInt8, o.device);
  for (const Algo& t : p.find(h, o, ws_bytes > 0 ? ws.data_ptr() : nullptr, ws_bytes)) {
    if (num.exact && t.math != CUDNN_FMA_MATH) continue;  // no TF32
    if (!num.winograd && p.is_winograd(t.algo)) continue;
    if (t.memory > ws_bytes) continue;
    p.set_math(t.math);
    size_t bytes = 0;
    if (p.workspace_size(h, t.algo, &bytes) != CUDNN_STATUS_SUCCESS || bytes > kMaxConvWorkspace) continue;
    p.choose(t.algo, bytes, true);
    return true;
  }
  p.set_math(num.exact ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH);
  return false;
}

}  // namespace

std::unique_ptr<ConvPlan> make_legacy_plan(cudnnHandle_t h, Kind kind, const Geom& g, DType dt, const Operands& o,
                                           bool cl) {
  const Numerics num = numerics_for(dt);
  auto p = std::make_unique<LegacyPlan>(kind, dt);
  p->describe(g, dt, cl, num.exact);
  bool chosen = find_enabled() && choose_by_find(h, *p, o, num);
  if (!chosen) {
    for (const Algo& a : p->ranked(h)) {
      // float32/float64 keep FMA math whatever the heuristics rank (TF32
      // would not match the CPU); 16-bit floats take the ranked math type.
      // The FFT-based algorithms stay: leaving them out cost the fwd+bwd
      // cases 20-50% on an H200 (docs/cuda.md).
      if (!num.exact) p->set_math(a.math);
      if (!num.winograd && p->is_winograd(a.algo)) continue;
      size_t bytes = 0;
      if (p->workspace_size(h, a.algo, &bytes) != CUDNN_STATUS_SUCCESS || bytes > kMaxConvWorkspace) continue;
      p->choose(a.algo, bytes, false);
      chosen = true;
      break;
    }
  }
  if (!chosen)
    KILN_FAIL(kind_name(kind), " on CUDA: cuDNN has no algorithm for input [", g.N, ", ", g.C, ", ", g.H, ", ", g.W,
              "], weight [", g.O, ", ", g.C / g.groups, ", ", g.KH, ", ", g.KW, "] in ", dtype_name(dt));
  const std::string choice = "algo " + std::to_string(p->algo()) + (p->timed() ? " (timed)" : " (heuristics)");
  log_plan("legacy", kind, g, dt, choice.c_str(), p->workspace());
  return p;
}

}  // namespace kiln::cuda
