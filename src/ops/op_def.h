// The definition behind each entry of ops.def: how to infer outputs, how to
// differentiate, how to decompose, and a kernel per device. Eager dispatch,
// autograd and the compiler read only this.
#pragma once
#include <array>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "core/attrs.h"
#include "kiln/tensor.h"

namespace kiln {

enum class OpId : uint16_t {
#define KILN_OP(name, kind) name,
#include "ops/ops.def"
#undef KILN_OP
};
constexpr int kNumOps = 0
#define KILN_OP(name, kind) +1
#include "ops/ops.def"
#undef KILN_OP
    ;
// Bump when ops.def grows, so an added op is a deliberate, reviewed change.
static_assert(kNumOps == 94, "ops.def changed: update this count and give the new op a definition");

enum class OpKind : uint8_t { Pointwise, Reduction, View, Extern, Random, Composite, Factory, Inplace, Other };

const char* op_name(OpId id);
OpKind op_kind(OpId id);

// What an output will be, before any memory exists.
struct TensorMeta {
  Shape shape;
  DType dtype = DType::Float32;
  Device device;
};

using Tensors = std::vector<Tensor>;
using TensorSpan = std::span<const Tensor>;

// Shape/dtype rule: validates inputs (kiln::Error with op, shapes, fix) and
// gives the outputs' metadata.
using InferFn = std::vector<TensorMeta> (*)(TensorSpan inputs, const Attrs& attrs);
// Writes into preallocated contiguous outputs (for Inplace ops, outputs[0]
// is inputs[0]).
using KernelFn = void (*)(TensorSpan inputs, std::span<Tensor> outputs, const Attrs& attrs);
// Makes a view of inputs[0] (View ops only).
using ViewFn = Tensor (*)(TensorSpan inputs, const Attrs& attrs);
// Expresses the op with other ops (Composite ops; optional for others).
using DecomposeFn = Tensors (*)(TensorSpan inputs, const Attrs& attrs);

struct BackwardCtx {
  TensorSpan inputs;   // detached values of the inputs (undefined if not saved)
  TensorSpan outputs;  // detached values of the outputs (undefined if not saved)
  const std::vector<TensorMeta>& input_metas;
  const Attrs& attrs;
  const std::vector<bool>& needs_grad;  // per input
};
// Derivative: gradients of the inputs (undefined Tensor = none) from the
// gradients of the outputs (undefined where an output got no gradient),
// written with ordinary ops so that tracing a backward yields a graph.
using BackwardFn = Tensors (*)(const BackwardCtx& ctx, TensorSpan grad_outputs);

enum SaveFlags : uint8_t { kSaveNone = 0, kSaveInputs = 1, kSaveOutputs = 2, kSaveBoth = 3 };

struct OpDef {
  OpId id{};
  InferFn infer = nullptr;
  std::array<KernelFn, kNumDeviceTypes> kernels{};
  ViewFn view = nullptr;
  DecomposeFn decompose = nullptr;
  BackwardFn backward = nullptr;
  uint8_t save = kSaveBoth;  // what the derivative reads
  // Bit i set: input/output i is not saved even though `save` says so (the
  // derivative does not read it). A saved tensor modified in place before
  // backward is an error, so saving only what is read avoids false alarms.
  uint32_t unsaved_inputs = 0;
  uint32_t unsaved_outputs = 0;
  int num_outputs = 1;
  // Outputs past the first that carry no gradient (indices, masks, stats).
  int num_differentiable_outputs = 1;
  // Inputs may live on another device than the kernel's (to_device); for
  // every other op dispatch requires them on the kernel's device.
  bool inputs_on_any_device = false;

  // Schema facts functionalization and capture rely on (as
  // native_functions.yaml's Tensor(a!) annotations):
  // bit i set: the op writes input i in place (in-place ops: input 0, set by
  // define_op; batch_norm: its running statistics).
  uint32_t mutated_inputs = 0;
  // The input whose storage output 0 shares (views and in-place ops: 0, set
  // by define_op), or -1 for a fresh output.
  int output0_aliases = -1;
  // Attributes that may change from call to call without changing what the
  // op computes structurally (a learning rate, a random seed and offset):
  // capture makes them scalar inputs of the graph, never constants, so a
  // new value never recompiles.
  std::vector<std::string_view> step_attrs;
};

// Builders for the common shapes of definition (family files tweak the
// result for extra outputs etc.).
// An op with its own infer function and CPU kernel.
inline OpDef kernel_op(OpId id, InferFn infer, KernelFn cpu, BackwardFn backward = nullptr,
                       uint8_t save = kSaveBoth) {
  OpDef d;
  d.id = id;
  d.infer = infer;
  d.kernels[static_cast<int>(DeviceType::CPU)] = cpu;
  d.backward = backward;
  d.save = save;
  return d;
}
// A view op (saves nothing: its derivative reads only metas and attrs).
inline OpDef view_op(OpId id, ViewFn view, BackwardFn backward) {
  OpDef d;
  d.id = id;
  d.view = view;
  d.backward = backward;
  d.save = kSaveNone;
  return d;
}
// An op expressed with other ops (differentiated through them).
inline OpDef composite_op(OpId id, DecomposeFn decompose) {
  OpDef d;
  d.id = id;
  d.decompose = decompose;
  return d;
}

// Registers the definition for def.id (each family file does this for its
// ops in its register_*_ops function).
void define_op(const OpDef& def);
// Adds (or replaces) the kernel of an already defined op for one device type:
// how a backend (src/cuda/) adds kernels without editing the family files.
void register_kernel(OpId id, DeviceType device, KernelFn kernel);
// Sets the decomposition into primitive ops of an already defined op that
// keeps its eager kernel: the compiler expands the op with it, eager dispatch
// does not (ops/decompositions.cpp).
void register_decomposition(OpId id, DecomposeFn decompose);
const OpDef& op_def(OpId id);
// Every op in ops.def defined with what its kind needs; returns the problems
// (the ops_table test requires none).
std::vector<std::string> verify_op_table();

// The single dispatch point: the mode stack (ops/dispatch_mode.h: capture,
// profiling, meta execution...), then the decomposition, a view, or the
// device kernel followed by autograd recording.
Tensors dispatch(OpId id, Tensors inputs, const Attrs& attrs = {});
inline Tensor dispatch1(OpId id, Tensors inputs, const Attrs& attrs = {}) {
  return dispatch(id, std::move(inputs), attrs)[0];
}

// Helpers for infer functions.
// The inputs' device; host scalars (numbers, 0-dim CPU tensors) join any.
Device common_device(TensorSpan inputs, const char* op);
bool is_host_scalar(const Tensor& t);
// PyTorch's result_type over tensors (wrapped numbers only win across categories).
DType result_type(TensorSpan inputs);
std::string describe(TensorSpan inputs);  // "float32[2, 3], int64[4]"

}  // namespace kiln
