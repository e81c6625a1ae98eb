// The shared vocabulary of kiln's cuDNN convolutions: what is computed (Kind,
// Geom), on which buffers (Operands), with which numerics (Numerics), and the
// plan a shape gets once and then runs each call. Two kinds of plan:
// conv_graph.cpp's through cuDNN 9's backend (graph) API, the default, and
// conv_legacy.cpp's through cudnnConvolutionForward and its backward twins,
// the fallback for a shape no graph engine takes.
#pragma once
#include <cudnn.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "kiln/tensor.h"
#include "ops/fused_activation.h"

namespace kiln::cuda {

enum class Kind { Forward, BackwardData, BackwardFilter };

const char* kind_name(Kind k);

struct Geom {
  int64_t N, C, H, W, O, KH, KW, OH, OW;
  int64_t sh, sw, ph, pw, dh, dw, groups;
};

// The buffers of one call: out = kind(a, b) where (a, b) is (x, w) forward,
// (dy, w) for the input's gradient and (dy, x) for the weight's. Plans are
// tuned on the first call's own buffers (out is overwritten; the real call
// writes it again).
struct Operands {
  const void* a;
  const void* b;
  void* out;
  Device device;
  const void* bias = nullptr;  // [O], out's dtype: a forward plan with Epilogue::bias only
};

// What a forward graph plan computes after the convolution, in the same
// cuDNN graph (the convolution's result stays in float32, in registers):
// out = act(conv + bias). Where no engine takes the graph the caller runs
// the plain convolution and applies the bias and activation itself.
struct Epilogue {
  bool bias = false;
  FusedActivation act = FusedActivation::None;
  bool any() const { return bias || act != FusedActivation::None; }
};

// Which roundings a plan may bring in. exact: float64, and float32 unless
// KILN_CUDNN_TF32=1: no TF32 tensor cores, so results match the CPU's.
// winograd: Winograd's transforms (about 1e-4 of the output's scale in
// float32): never for float64, for float32 unless KILN_CUDNN_WINOGRAD=0.
struct Numerics {
  bool exact;
  bool winograd;
};
Numerics numerics_for(DType dt);

// KILN_CUDNN_FIND=0: the heuristics' first choice instead of timing the
// candidates on the first call's buffers (as torch.backends.cudnn.benchmark).
bool find_enabled();

// KILN_CUDNN_RUNTIME_FUSION=1: epilogue graphs may take engines compiled at
// run time (a compile per shape on its first call).
bool runtime_fusion_enabled();

cudnnDataType_t cudnn_data_type(DType t);

// Workspaces above this are skipped for a lesser algorithm.
constexpr size_t kMaxConvWorkspace = size_t{1} << 30;

class ConvPlan {
 public:
  virtual ~ConvPlan() = default;
  // Bytes of device workspace run() needs.
  virtual size_t workspace() const = 0;
  // Queues the convolution on h's stream.
  virtual void run(cudnnHandle_t h, const Operands& o, void* workspace) const = 0;
};

// cl: every operand NHWC (filters KRSC), else NCHW / OIHW.
std::unique_ptr<ConvPlan> make_legacy_plan(cudnnHandle_t h, Kind kind, const Geom& g, DType dt, const Operands& o,
                                           bool cl);
// nullptr when no engine of the backend API takes the shape (and the
// epilogue: forward only, not float64). Its operands must be 16-byte aligned.
std::unique_ptr<ConvPlan> make_graph_plan(cudnnHandle_t h, Kind kind, const Geom& g, DType dt, const Operands& o,
                                          bool cl, Epilogue e = {});

void log_plan(const char* api, Kind kind, const Geom& g, DType dt, const char* choice, size_t workspace);

}  // namespace kiln::cuda
