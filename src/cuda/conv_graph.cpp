// Convolution plans through cuDNN 9's backend (graph) API: one operation
// graph per shape (a single convolution node), the engine configs cuDNN's
// heuristics rank for it, each finalized into an execution plan, and the
// fastest of them timed on the first call's own buffers (as
// torch.backends.cudnn.benchmark; KILN_CUDNN_FIND=0 keeps the first that
// finalizes). A call then only builds a variant pack (its three pointers and
// the workspace) and runs cudnnBackendExecute.
//
// A forward convolution may carry an epilogue (conv_cudnn.h's Epilogue: bias,
// then ReLU or GELU): the graph is then conv -> add -> activation with the
// intermediate results virtual (float32, never written to memory), as
// nn::fuse_modules' eval layers want. Engines compiled at run time are the
// usual ones to take such graphs; KILN_CUDNN_RUNTIME_FUSION=1 allows them
// (each shape then costs a compile on its first call), else a graph no
// precompiled engine takes runs unfused.
//
// Why not the legacy calls: in cuDNN 9 cudnnConvolutionForward and its
// backward twins cost about 100-130 us of host time each (ResNet-18, bf16,
// channels-last, H100: more than many of the kernels they start), which left
// bf16 training host-bound. Torch takes this path too (cudnn_frontend).
//
// Numerics (conv_cudnn.h's Numerics) become engine filters: no engine that
// down-converts inputs; exact float32/float64 take no tensor-core engine
// (TF32); Winograd's engines only where numerics allow. Engines compiled at
// run time (NVRTC, seconds each) are left out.
#include <algorithm>
#include <string>
#include <vector>

#include "cuda/check.h"
#include "cuda/conv_cudnn.h"
#include "cuda/cudnn_util.h"
#include "kiln/ops.h"

namespace kiln::cuda {

namespace {

// The call's operands, then the epilogue's: the bias and the virtual
// (never materialized) results of the convolution and of the bias add.
enum Uid : int64_t { kUidA = 1, kUidB = 2, kUidOut = 3, kUidBias = 4, kUidConvOut = 5, kUidBiased = 6 };

// How many ranked engine configs are tried: enough for the fastest to be
// among them on ResNet-18's and airbench's shapes, few enough that planning
// a shape stays within tens of milliseconds.
constexpr size_t kMaxCandidates = 12;

// dims and strides of a 4-d NCHW (or NHWC when cl) tensor; a virtual one
// lives inside a fused graph only.
BackendDesc tensor_desc(int64_t uid, cudnnDataType_t t, int64_t n, int64_t c, int64_t h, int64_t w, bool cl,
                        const char* op, bool is_virtual = false) {
  const int64_t dims[4] = {n, c, h, w};
  int64_t strides[4];
  if (cl) {
    strides[0] = h * w * c, strides[1] = 1, strides[2] = w * c, strides[3] = c;
  } else {
    strides[0] = c * h * w, strides[1] = h * w, strides[2] = w, strides[3] = 1;
  }
  BackendDesc d(CUDNN_BACKEND_TENSOR_DESCRIPTOR, op);
  d.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &t)
      .set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims)
      .set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides)
      .set_i64(CUDNN_ATTR_TENSOR_UNIQUE_ID, uid)
      .set_i64(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, 16);
  if (is_virtual) d.set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual);
  d.finalize();
  return d;
}

BackendDesc conv_desc(const Geom& g, DType dt, const char* op) {
  const cudnnDataType_t compute = dt == DType::Float64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  const int64_t dil[2] = {g.dh, g.dw}, stride[2] = {g.sh, g.sw}, pad[2] = {g.ph, g.pw};
  BackendDesc d(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, op);
  d.set(CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute)
      .set(CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode)
      .set_i64(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, 2)
      .set(CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dil)
      .set(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, stride)
      .set(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pad)
      .set(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pad);
  d.finalize();
  return d;
}

// The attribute names of one kind's operation node: its three tensors (the
// roles of conv_op's x, w, y), the convolution and the two scales.
struct NodeAttributes {
  cudnnBackendDescriptorType_t type;
  cudnnBackendAttributeName_t x, w, y, conv, alpha, beta;
};

NodeAttributes node_attributes(Kind kind) {
  switch (kind) {
    case Kind::Forward:
      return {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA};
    case Kind::BackwardData:
      return {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA};
    case Kind::BackwardFilter:
      break;
  }
  return {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA};
}

// The operation node: x, w, y are the activation, filter and output
// descriptors whatever the kind (their uids say which pointer is which).
BackendDesc conv_op(Kind kind, const BackendDesc& x, const BackendDesc& w, const BackendDesc& y,
                    const BackendDesc& conv, DType dt, const char* op) {
  const double one_d = 1.0, zero_d = 0.0;
  const float one_f = 1.0f, zero_f = 0.0f;
  const bool dbl = dt == DType::Float64;
  const cudnnBackendAttributeType_t scalar = dbl ? CUDNN_TYPE_DOUBLE : CUDNN_TYPE_FLOAT;
  const void* one = dbl ? static_cast<const void*>(&one_d) : &one_f;
  const void* zero = dbl ? static_cast<const void*>(&zero_d) : &zero_f;
  const NodeAttributes a = node_attributes(kind);
  BackendDesc d(a.type, op);
  d.set_desc(a.x, x)
      .set_desc(a.w, w)
      .set_desc(a.y, y)
      .set_desc(a.conv, conv)
      .set(a.alpha, scalar, 1, one)
      .set(a.beta, scalar, 1, zero);
  d.finalize();
  return d;
}

// A pointwise node y = mode(x[, b]) computed in float32.
BackendDesc pointwise_op(cudnnPointwiseMode_t mode, const BackendDesc& x, const BackendDesc* b, const BackendDesc& y,
                         const char* op) {
  const cudnnDataType_t prec = CUDNN_DATA_FLOAT;
  BackendDesc pw(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, op);
  pw.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode)
      .set(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec);
  pw.finalize();
  BackendDesc d(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, op);
  d.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw).set_desc(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x);
  if (b != nullptr) d.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, *b);
  d.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y);
  d.finalize();
  return d;
}

// The ranked engine configs of `graph` under heuristics `mode`.
std::vector<BackendDesc> ranked_configs(const BackendDesc& graph, cudnnBackendHeurMode_t mode, const char* op) {
  BackendDesc heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, op);
  heur.set_desc(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph).set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1,
                                                                  &mode);
  if (heur.try_finalize() != CUDNN_STATUS_SUCCESS) return {};
  int64_t count = 0;
  KILN_CUDNN_CHECK(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                            0, &count, nullptr),
                   op);
  std::vector<BackendDesc> cfgs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int64_t i = 0; i < count; ++i) {
    cfgs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, op);
    raw.push_back(cfgs.back().get());
  }
  int64_t got = 0;
  KILN_CUDNN_CHECK(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                            count, &got, raw.data()),
                   op);
  cfgs.resize(static_cast<size_t>(std::min(got, count)));
  return cfgs;
}

template <typename Note>
std::vector<Note> notes_of(const BackendDesc& engine, cudnnBackendAttributeName_t name,
                           cudnnBackendAttributeType_t type, int64_t max, const char* op) {
  std::vector<Note> notes(static_cast<size_t>(max));
  int64_t n = 0;
  KILN_CUDNN_CHECK(cudnnBackendGetAttribute(engine.get(), name, type, max, &n, notes.data()), op);
  notes.resize(static_cast<size_t>(n));
  return notes;
}

// Whether a config's engine keeps within `num`, and is not compiled at run
// time unless `runtime_compiled` allows.
bool allowed(const BackendDesc& cfg, Numerics num, bool runtime_compiled, std::string* engine_name, const char* op) {
  BackendDesc engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR, op);
  cudnnBackendDescriptor_t raw = engine.get();
  int64_t n = 0;
  KILN_CUDNN_CHECK(
      cudnnBackendGetAttribute(cfg.get(), CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &raw),
      op);
  *engine_name = "engine " + std::to_string(engine.get_i64(CUDNN_ATTR_ENGINE_GLOBAL_INDEX));
  for (auto note : notes_of<cudnnBackendNumericalNote_t>(engine, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE,
                                                         CUDNN_TYPE_NUMERICAL_NOTE, CUDNN_NUMERICAL_NOTE_TYPE_COUNT,
                                                         op)) {
    if (note == CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS) return false;
    if (num.exact && note == CUDNN_NUMERICAL_NOTE_TENSOR_CORE) return false;
    const bool winograd = note == CUDNN_NUMERICAL_NOTE_WINOGRAD || note == CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_4x4 ||
                          note == CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_6x6 ||
                          note == CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_13x13;
    if (!num.winograd && winograd) return false;
  }
  for (auto note : notes_of<cudnnBackendBehaviorNote_t>(engine, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE,
                                                        CUDNN_TYPE_BEHAVIOR_NOTE, CUDNN_BEHAVIOR_NOTE_TYPE_COUNT, op))
    if (note == CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION && !runtime_compiled) return false;
  return true;
}

// Runs `plan` on o's buffers: a variant pack of the three pointers (four
// with a bias) and the workspace (made per call: pointers change from call
// to call).
void execute(cudnnHandle_t h, const BackendDesc& plan, const Operands& o, bool bias, void* ws, const char* op) {
  void* ptrs[4] = {const_cast<void*>(o.a), const_cast<void*>(o.b), o.out, const_cast<void*>(o.bias)};
  const int64_t uids[4] = {kUidA, kUidB, kUidOut, kUidBias};
  const int64_t n = bias ? 4 : 3;
  BackendDesc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, op);
  pack.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs)
      .set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids)
      .set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
  pack.finalize();
  KILN_CUDNN_CHECK(cudnnBackendExecute(h, plan.get(), pack.get()), op);
}

class GraphPlan final : public ConvPlan {
 public:
  GraphPlan(BackendDesc plan, size_t workspace, bool bias, const char* op)
      : plan_(std::move(plan)), workspace_(workspace), bias_(bias), op_(op) {}
  size_t workspace() const override { return workspace_; }
  void run(cudnnHandle_t h, const Operands& o, void* ws) const override { execute(h, plan_, o, bias_, ws, op_); }

 private:
  BackendDesc plan_;
  size_t workspace_;
  bool bias_;
  const char* op_;
};

// Milliseconds of one run of `p` (the best of three after a warm-up), or a
// negative number when it fails to run.
float time_plan(cudnnHandle_t h, const BackendDesc& plan, const Operands& o, bool bias, void* ws, const char* op) {
  cudaStream_t s = stream_for(o.device.index);
  cudaEvent_t start, stop;
  KILN_CUDA_CHECK(cudaEventCreate(&start), op);
  KILN_CUDA_CHECK(cudaEventCreate(&stop), op);
  float best = -1.0f;
  try {
    execute(h, plan, o, bias, ws, op);
    for (int i = 0; i < 3; ++i) {
      KILN_CUDA_CHECK(cudaEventRecord(start, s), op);
      execute(h, plan, o, bias, ws, op);
      KILN_CUDA_CHECK(cudaEventRecord(stop, s), op);
      KILN_CUDA_CHECK(cudaEventSynchronize(stop), op);
      float ms = 0.0f;
      KILN_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop), op);
      if (best < 0.0f || ms < best) best = ms;
    }
  } catch (const Error&) {
    best = -1.0f;
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return best;
}

}  // namespace

std::unique_ptr<ConvPlan> make_graph_plan(cudnnHandle_t h, Kind kind, const Geom& g, DType dt, const Operands& o,
                                          bool cl, Epilogue e) {
  const char* op = kind_name(kind);
  if (e.any() && (kind != Kind::Forward || dt == DType::Float64)) return nullptr;
  const Numerics num = numerics_for(dt);
  const cudnnDataType_t t = cudnn_data_type(dt), f32 = CUDNN_DATA_FLOAT;
  // x, w, y whatever the kind; the uids map them to the call's a, b, out.
  const int64_t x_uid = kind == Kind::Forward ? kUidA : kind == Kind::BackwardData ? kUidOut : kUidB;
  const int64_t w_uid = kind == Kind::Forward ? kUidB : kind == Kind::BackwardData ? kUidB : kUidOut;
  const int64_t y_uid = kind == Kind::Forward ? kUidOut : kUidA;
  BackendDesc x = tensor_desc(x_uid, t, g.N, g.C, g.H, g.W, cl, op);
  BackendDesc w = tensor_desc(w_uid, t, g.O, g.C / g.groups, g.KH, g.KW, cl, op);
  BackendDesc y = tensor_desc(y_uid, t, g.N, g.O, g.OH, g.OW, cl, op);
  BackendDesc conv = conv_desc(g, dt, op);
  // The nodes: the convolution into y, or with an epilogue into a virtual
  // float32 tensor, then the bias add and the activation, the last into y.
  std::vector<BackendDesc> nodes, inner;
  if (!e.any()) {
    nodes.push_back(conv_op(kind, x, w, y, conv, dt, op));
  } else {
    inner.push_back(tensor_desc(kUidConvOut, f32, g.N, g.O, g.OH, g.OW, cl, op, true));
    nodes.push_back(conv_op(kind, x, w, inner.back(), conv, dt, op));
    if (e.bias) {
      BackendDesc bias = tensor_desc(kUidBias, t, 1, g.O, 1, 1, cl, op);
      const bool last = e.act == FusedActivation::None;
      if (!last) inner.push_back(tensor_desc(kUidBiased, f32, g.N, g.O, g.OH, g.OW, cl, op, true));
      nodes.push_back(pointwise_op(CUDNN_POINTWISE_ADD, inner.front(), &bias, last ? y : inner.back(), op));
      inner.push_back(std::move(bias));
    }
    if (e.act != FusedActivation::None) {
      const cudnnPointwiseMode_t mode =
          e.act == FusedActivation::Relu ? CUDNN_POINTWISE_RELU_FWD : CUDNN_POINTWISE_GELU_FWD;
      nodes.push_back(pointwise_op(mode, e.bias ? inner[1] : inner[0], nullptr, y, op));
    }
  }
  std::vector<cudnnBackendDescriptor_t> nodes_raw;
  for (const BackendDesc& n : nodes) nodes_raw.push_back(n.get());
  BackendDesc graph(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, op);
  graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, static_cast<int64_t>(nodes_raw.size()),
            nodes_raw.data())
      .set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
  if (graph.try_finalize() != CUDNN_STATUS_SUCCESS) return nullptr;
  const bool runtime_compiled = e.any() && runtime_fusion_enabled();

  // Candidates: heuristics mode A's ranking, then the fallback list.
  struct Candidate {
    BackendDesc plan;
    size_t workspace;
    std::string engine;
  };
  std::vector<Candidate> candidates;
  for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    for (BackendDesc& cfg : ranked_configs(graph, mode, op)) {
      if (candidates.size() >= kMaxCandidates) break;
      std::string engine;
      if (!allowed(cfg, num, runtime_compiled, &engine, op)) continue;
      BackendDesc plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, op);
      cudnnBackendDescriptor_t cfg_raw = cfg.get();
      plan.set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h)
          .set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg_raw);
      if (plan.try_finalize() != CUDNN_STATUS_SUCCESS) continue;
      const int64_t ws = plan.get_i64(CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE);
      if (ws < 0 || static_cast<size_t>(ws) > kMaxConvWorkspace) continue;
      candidates.push_back({std::move(plan), static_cast<size_t>(ws), std::move(engine)});
      if (!find_enabled()) break;  // the first that finalizes
    }
    if (!candidates.empty()) break;
  }
  if (candidates.empty()) return nullptr;

  size_t best = 0;
  std::string choice = candidates[0].engine + " (heuristics)";
  if (candidates.size() > 1) {
    size_t ws_bytes = 0;
    for (const Candidate& c : candidates) ws_bytes = std::max(ws_bytes, c.workspace);
    Tensor ws;
    if (ws_bytes > 0) ws = Tensor::empty({static_cast<int64_t>(ws_bytes)}, DType::UInt8, o.device);
    float best_ms = -1.0f;
    for (size_t i = 0; i < candidates.size(); ++i) {
      const float ms = time_plan(h, candidates[i].plan, o, e.bias, ws_bytes > 0 ? ws.data_ptr() : nullptr, op);
      if (ms >= 0.0f && (best_ms < 0.0f || ms < best_ms)) best_ms = ms, best = i;
    }
    if (best_ms < 0.0f) return nullptr;
    choice = candidates[best].engine + " (timed " + std::to_string(best_ms * 1000.0f) + " us of " +
             std::to_string(candidates.size()) + ")";
  }
  log_plan(e.any() ? "graph with epilogue" : "graph", kind, g, dt, choice.c_str(), candidates[best].workspace);
  return std::make_unique<GraphPlan>(std::move(candidates[best].plan), candidates[best].workspace, e.bias, op);
}

}  // namespace kiln::cuda
