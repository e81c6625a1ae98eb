// The op registry and the one dispatch point every op call goes through.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <sstream>

#include "autograd/node.h"
#include "cuda/backend.h"
#include "kiln/cuda.h"
#include "ops/dispatch_mode.h"
#include "ops/families.h"
#include "ops/layout.h"
#include "ops/op_def.h"

namespace kiln {
namespace {

struct OpInfo {
  const char* name;
  OpKind kind;
};
constexpr OpInfo kOpInfo[] = {
#define KILN_OP(name, kind) {#name, OpKind::kind},
#include "ops/ops.def"
#undef KILN_OP
};

struct Registry {
  OpDef defs[kNumOps];
  bool defined[kNumOps] = {};
};

Registry& registry_storage() {
  static Registry r;
  return r;
}

// Fills the registry once, before the first op runs.
Registry& registry() {
  static Registry& r = []() -> Registry& {
    register_view_ops();
    register_pointwise_ops();
    register_reduce_ops();
    register_matmul_ops();
    register_conv_ops();
    register_pool_ops();
    register_norm_ops();
    register_loss_ops();
    register_index_ops();
    register_factory_ops();
    register_inplace_ops();
    register_device_ops();
    register_decompositions();
    cuda::register_cuda_kernels();  // a no-op in a build without CUDA
    return registry_storage();
  }();
  return r;
}

}  // namespace

const char* op_name(OpId id) { return kOpInfo[static_cast<int>(id)].name; }
OpKind op_kind(OpId id) { return kOpInfo[static_cast<int>(id)].kind; }

void define_op(const OpDef& def) {
  Registry& r = registry_storage();
  int i = static_cast<int>(def.id);
  KILN_ASSERT(!r.defined[i], "op '", op_name(def.id), "' is defined twice");
  r.defs[i] = def;
  r.defined[i] = true;
  OpKind kind = op_kind(def.id);
  if (kind == OpKind::Inplace) {
    r.defs[i].mutated_inputs |= 1u;
    r.defs[i].output0_aliases = 0;
  } else if (kind == OpKind::View) {
    r.defs[i].output0_aliases = 0;
  }
}

void register_kernel(OpId id, DeviceType device, KernelFn kernel) {
  Registry& r = registry_storage();
  int i = static_cast<int>(id);
  KILN_ASSERT(r.defined[i], "register_kernel: op '", op_name(id), "' must be defined before a backend adds kernels");
  r.defs[i].kernels[static_cast<int>(device)] = kernel;
}

void register_decomposition(OpId id, DecomposeFn decompose) {
  Registry& r = registry_storage();
  int i = static_cast<int>(id);
  KILN_ASSERT(r.defined[i], "register_decomposition: op '", op_name(id), "' must be defined first");
  r.defs[i].decompose = decompose;
}

const OpDef& op_def(OpId id) {
  Registry& r = registry();
  int i = static_cast<int>(id);
  KILN_ASSERT(r.defined[i], "op '", op_name(id), "' is listed in ops.def but has no definition");
  return r.defs[i];
}

std::vector<std::string> verify_op_table() {
  Registry& reg = registry();
  std::vector<std::string> problems;
  for (int i = 0; i < kNumOps; ++i) {
    const OpInfo& info = kOpInfo[i];
    const OpDef& d = reg.defs[i];
    std::string name = info.name;
    if (!reg.defined[i]) {
      problems.push_back(name + ": listed in ops.def but never defined");
      continue;
    }
    switch (info.kind) {
      case OpKind::View:
        if (!d.view) problems.push_back(name + ": view op without a view function");
        break;
      case OpKind::Composite:
        if (!d.decompose) problems.push_back(name + ": composite op without a decomposition");
        break;
      default:
        if (!d.infer || !d.kernels[static_cast<int>(DeviceType::CPU)])
          problems.push_back(name + ": needs a shape rule and a CPU kernel");
    }
    if (info.kind == OpKind::Random) {
      bool seeded = std::find(d.step_attrs.begin(), d.step_attrs.end(), "seed") != d.step_attrs.end() &&
                    std::find(d.step_attrs.begin(), d.step_attrs.end(), "offset") != d.step_attrs.end();
      if (!seeded) problems.push_back(name + ": a random op must list seed and offset in step_attrs");
    }
    if (info.kind != OpKind::Inplace && info.kind != OpKind::Other && d.mutated_inputs != 0)
      problems.push_back(name + ": only in-place and hand-written ops may mutate inputs");
  }
  return problems;
}

// A host scalar (a 0-dim CPU tensor) may join tensors of any device, as in
// PyTorch: kernels read it by value.
bool is_host_scalar(const Tensor& t) { return t.impl()->wrapped_number || (t.dim() == 0 && t.device().is_cpu()); }

Device common_device(TensorSpan inputs, const char* op) {
  Device dev = Device::cpu();
  bool found = false;
  for (const Tensor& t : inputs) {
    if (!t.defined() || is_host_scalar(t)) continue;
    if (!found) {
      dev = t.device();
      found = true;
    } else {
      KILN_CHECK(t.device() == dev, op, ": inputs are on different devices (", dev, " and ", t.device(),
                 "); move them to one device with .to(device)");
    }
  }
  return dev;
}

DType result_type(TensorSpan inputs) {
  // PyTorch: dimensioned tensors, then 0-dim tensors, then wrapped numbers;
  // a lower priority class only matters when it is of a higher category.
  auto category = [](DType t) { return t == DType::Bool ? 0 : is_floating(t) ? 2 : 1; };
  bool have[3] = {false, false, false};
  DType st[3] = {DType::Bool, DType::Bool, DType::Bool};
  for (const Tensor& t : inputs) {
    if (!t.defined()) continue;
    int cls = t.impl()->wrapped_number ? 2 : t.dim() == 0 ? 1 : 0;
    DType d = t.dtype();
    if (t.impl()->wrapped_number && is_floating(d)) d = DType::Float32;  // Python floats use the default dtype
    st[cls] = have[cls] ? promote_types(st[cls], d) : d;
    have[cls] = true;
  }
  DType out = DType::Bool;
  bool any = false;
  for (int cls = 0; cls < 3; ++cls) {
    if (!have[cls]) continue;
    if (!any) {
      out = st[cls];
      any = true;
    } else if (category(st[cls]) > category(out)) {
      out = promote_types(out, st[cls]);
      if (is_floating(st[cls]) && !is_floating(out)) out = st[cls];
    }
  }
  return out;
}

std::string describe(TensorSpan inputs) {
  std::ostringstream os;
  bool first = true;
  for (const Tensor& t : inputs) {
    os << (first ? "" : ", ");
    first = false;
    if (!t.defined()) os << "None";
    else os << dtype_name(t.dtype()) << shape_str(t.shape());
  }
  return os.str();
}

// ---------------------------------------------------------------------------
// Mode stack (ops/dispatch_mode.h)
// ---------------------------------------------------------------------------

namespace {
struct ModeState {
  std::vector<DispatchMode*> stack;
  int visible = 0;        // modes a new dispatch() call starts below (stack[visible-1] first)
  bool excluded = false;  // inside a kernel, view function or shape rule
  // HideModeGuard: modes from this level up stay hidden for the scope, also
  // from the constituents of a composite op (which otherwise every mode sees).
  int hidden_from = std::numeric_limits<int>::max();
};
thread_local ModeState t_modes;

// Sets what a nested dispatch() sees for a scope.
class VisibleModes {
 public:
  VisibleModes(int visible, bool excluded) : prev_visible_(t_modes.visible), prev_excluded_(t_modes.excluded) {
    t_modes.visible = visible;
    t_modes.excluded = excluded;
  }
  ~VisibleModes() {
    t_modes.visible = prev_visible_;
    t_modes.excluded = prev_excluded_;
  }
  VisibleModes(const VisibleModes&) = delete;
  VisibleModes& operator=(const VisibleModes&) = delete;

 private:
  int prev_visible_;
  bool prev_excluded_;
};
}  // namespace

class ModeStackAccess {
 public:
  // Hands the call to stack[level]; calls it makes itself skip that mode.
  static Tensors call_mode(int level, OpId id, Tensors& inputs, const Attrs& attrs) {
    VisibleModes scope(level, false);
    return t_modes.stack[level]->handle(id, inputs, attrs, NextMode(level));
  }
};

Tensors NextMode::operator()(OpId id, Tensors& inputs, const Attrs& attrs) const {
  if (level_ > 0) return ModeStackAccess::call_mode(level_ - 1, id, inputs, attrs);
  VisibleModes scope(0, false);
  return dispatch_below_modes(id, inputs, attrs);
}

ModeGuard::ModeGuard(DispatchMode& mode) : mode_(&mode) {
  KILN_ASSERT(!t_modes.excluded && t_modes.visible == static_cast<int>(t_modes.stack.size()),
              "ModeGuard: push '", mode.mode_name(), "' outside kernels and mode handlers");
  t_modes.stack.push_back(&mode);
  t_modes.visible = static_cast<int>(t_modes.stack.size());
}
ModeGuard::~ModeGuard() {
  if (t_modes.stack.empty() || t_modes.stack.back() != mode_) {
    // Scopes nest by construction; a destructor cannot throw.
    std::fprintf(stderr, "kiln: internal error: ModeGuard for '%s' popped out of order\n", mode_->mode_name());
    std::abort();
  }
  t_modes.stack.pop_back();
  t_modes.visible = static_cast<int>(t_modes.stack.size());
}

ExcludeModesGuard::ExcludeModesGuard() : prev_visible_(t_modes.visible), prev_excluded_(t_modes.excluded) {
  t_modes.visible = 0;
  t_modes.excluded = true;
}
ExcludeModesGuard::~ExcludeModesGuard() {
  t_modes.visible = prev_visible_;
  t_modes.excluded = prev_excluded_;
}

FreshModeStack::FreshModeStack()
    : prev_stack_(std::move(t_modes.stack)),
      prev_visible_(t_modes.visible),
      prev_excluded_(t_modes.excluded),
      prev_hidden_from_(t_modes.hidden_from) {
  t_modes.stack.clear();
  t_modes.visible = 0;
  t_modes.excluded = false;
  t_modes.hidden_from = std::numeric_limits<int>::max();
}
FreshModeStack::~FreshModeStack() {
  t_modes.stack = std::move(prev_stack_);
  t_modes.visible = prev_visible_;
  t_modes.excluded = prev_excluded_;
  t_modes.hidden_from = prev_hidden_from_;
}

HideModeGuard::HideModeGuard(const DispatchMode& mode)
    : prev_visible_(t_modes.visible), prev_hidden_from_(t_modes.hidden_from) {
  int level = 0;
  while (level < static_cast<int>(t_modes.stack.size()) && t_modes.stack[level] != &mode) ++level;
  KILN_ASSERT(level < static_cast<int>(t_modes.stack.size()), "HideModeGuard: mode '", mode.mode_name(),
              "' is not on the stack");
  t_modes.visible = std::min(t_modes.visible, level);
  t_modes.hidden_from = std::min(t_modes.hidden_from, level);
}
HideModeGuard::~HideModeGuard() {
  t_modes.visible = prev_visible_;
  t_modes.hidden_from = prev_hidden_from_;
}

bool any_meta(TensorSpan inputs) {
  for (const Tensor& t : inputs)
    if (t.defined() && t.impl()->storage->is_meta()) return true;
  return false;
}

std::vector<const DispatchMode*> active_modes() {
  return std::vector<const DispatchMode*>(t_modes.stack.begin(), t_modes.stack.end());
}
bool modes_excluded() { return t_modes.excluded; }

Tensors dispatch(OpId id, Tensors inputs, const Attrs& attrs) {
  if (t_modes.visible > 0) [[unlikely]]
    return ModeStackAccess::call_mode(t_modes.visible - 1, id, inputs, attrs);
  return dispatch_below_modes(id, inputs, attrs);
}

Tensors dispatch_below_modes(OpId id, Tensors& inputs, const Attrs& attrs) {
  const OpDef& def = op_def(id);
  OpKind kind = op_kind(id);
  if (kind == OpKind::Composite) {
    if (t_modes.excluded) return def.decompose(inputs, attrs);
    // Every mode sees the constituents, but a mode hidden for the scope
    // (HideModeGuard: a capture running its graph) stays hidden.
    VisibleModes scope(std::min(static_cast<int>(t_modes.stack.size()), t_modes.hidden_from), false);
    return def.decompose(inputs, attrs);
  }
  // Autograd recording: the bottom mode, on while grad mode is on.
  const bool record = !t_modes.excluded && grad_mode_enabled();

  Tensors outputs;
  if (kind == OpKind::View) {
    ExcludeModesGuard kernel_scope;
    outputs.push_back(def.view(inputs, attrs));
  } else {
    ExcludeModesGuard kernel_scope;
    std::vector<TensorMeta> metas = def.infer(inputs, attrs);
    Device dev = metas.empty() ? common_device(inputs, op_name(id)) : metas[0].device;
    const bool meta = any_meta(inputs);
    KernelFn kernel = def.kernels[static_cast<int>(dev.type)];
    if (!meta) {
      if (kernel == nullptr && dev.is_cuda()) cuda::check_device(dev, op_name(id));  // no GPU or no CUDA: say so
      KILN_CHECK(kernel != nullptr, op_name(id), ": no kernel for device ", dev,
                 " in this build; move the inputs to a device that has one (e.g. .to(Device::cpu()))");
    }
    if (!def.inputs_on_any_device) {
      // A kernel reads its inputs' memory directly: one on another device
      // would be a wild read. Host scalars are passed by value.
      for (const Tensor& t : inputs)
        KILN_CHECK(!t.defined() || t.device() == dev || is_host_scalar(t), op_name(id), ": an input is on ",
                   t.device(), " but the op runs on ", dev, " (", describe(inputs),
                   "); move it with .to(", dev, ")");
    }
    if (kind == OpKind::Inplace) {
      const Tensor& self = inputs[0];
      KILN_CHECK(!(record && self.requires_grad()), op_name(id), ": in-place update of a ",
                 dtype_name(self.dtype()), shape_str(self.shape()),
                 " tensor that requires grad would corrupt autograd; wrap it in NoGradGuard or use the "
                 "out-of-place op");
      KILN_CHECK(!meta || self.is_meta(), op_name(id), ": in-place update of a real ", dtype_name(self.dtype()),
                 shape_str(self.shape()), " tensor from a meta tensor (", describe(inputs),
                 "), which has no values to write; pass real tensors");
      outputs.push_back(self);
      self.bump_version();
    } else {
      // Meta inputs: shapes only, meta outputs and no kernel. The strides
      // (channels-last on CUDA, ...) come from ops/layout.h.
      outputs = allocate_outputs(id, inputs, attrs, metas, meta);
    }
    if (!meta) kernel(inputs, outputs, attrs);
  }

  if (record && def.backward != nullptr) {
    for (const Tensor& t : inputs) {
      if (t.defined() && t.requires_grad()) {
        autograd::record(id, attrs, inputs, outputs);
        break;
      }
    }
  }
  return outputs;
}

}  // namespace kiln
