// kiln::autocast (include/kiln/autocast.h): a dispatch mode that applies the
// policy table (ops/autocast_policy.h) to each op's inputs before passing
// the call on. The casts it makes are dispatched from inside handle(), so
// they skip this mode and reach the modes below it: autograd records them
// (gradients flow back to float32 master weights as float32) and capture
// records them as graph nodes.
#include <optional>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "autograd/node.h"
#include "kiln/autocast.h"
#include "kiln/ops.h"
#include "ops/autocast_policy.h"
#include "ops/dispatch_mode.h"

namespace kiln {
namespace detail {

class AutocastMode;
namespace {
// The innermost autocast scope of this thread: only it applies its policy
// (an outer scope passes calls on), so a disabled inner scope turns autocast
// off for its extent.
thread_local AutocastMode* t_innermost = nullptr;
}  // namespace

class AutocastMode final : public DispatchMode {
 public:
  AutocastMode(DType dtype, bool enabled, bool cache)
      : dtype_(dtype), enabled_(enabled), cache_enabled_(cache), outer_(t_innermost) {
    t_innermost = this;
    guard_.emplace(*this);
  }
  ~AutocastMode() override {
    guard_.reset();
    t_innermost = outer_;
  }
  AutocastMode(const AutocastMode&) = delete;
  AutocastMode& operator=(const AutocastMode&) = delete;

  const char* mode_name() const override { return "autocast"; }
  bool enabled() const { return enabled_; }
  DType dtype() const { return dtype_; }

  Tensors handle(OpId id, Tensors& inputs, const Attrs& attrs, const NextMode& next) override {
    if (this != t_innermost || !enabled_ || autograd::backward_running()) return next(id, inputs, attrs);
    check_no_capture_above(id);
    const AutocastPolicy policy = autocast_policy(id);
    if (policy == AutocastPolicy::AsIs) return next(id, inputs, attrs);
    // The widest floating dtype among the tensor inputs (Promote); numbers
    // take part in type promotion only through the op itself.
    DType widest = DType::Bool;
    bool any_float = false;
    for (const Tensor& t : inputs) {
      if (!eligible(t)) continue;
      widest = any_float ? promote_types(widest, t.dtype()) : t.dtype();
      any_float = true;
    }
    if (!any_float) return next(id, inputs, attrs);
    Tensors cast_inputs = inputs;
    for (Tensor& t : cast_inputs) {
      if (!eligible(t)) continue;
      std::optional<DType> target = autocast_target(policy, t.dtype(), dtype_, widest);
      if (target) t = cast_input(t, *target, policy == AutocastPolicy::LowerPrecision);
    }
    return next(id, cast_inputs, attrs);
  }

 private:
  // kiln::compile's capture pushed above this scope (a compiled function
  // called inside autocast) records each op before autocast casts it, so
  // its graph would disagree with what runs; say how to fix it instead.
  void check_no_capture_above(OpId id) const {
    const std::vector<const DispatchMode*> modes = active_modes();
    bool above = false;
    for (const DispatchMode* m : modes) {
      if (m == this) above = true;
      else if (above && std::string_view(m->mode_name()) == "capture")
        KILN_FAIL("autocast: ", op_name(id), " reached an autocast scope from a kiln::compile'd function called "
                  "inside it; capture records ops before autocast casts them. Put the scope inside the compiled "
                  "function instead: compile([&](...) { kiln::autocast ac(DType::BFloat16); ... })");
    }
  }

  static bool eligible(const Tensor& t) {
    return t.defined() && !t.impl()->wrapped_number && is_floating(t.dtype());
  }

  // t cast to `to`; a parameter's cast to the autocast dtype is made once and
  // reused while the parameter keeps its version and no backward pass has
  // consumed the cast's graph (PyTorch caches the same casts).
  Tensor cast_input(const Tensor& t, DType to, bool cacheable) {
    const bool use_cache = cacheable && cache_enabled_ && to == dtype_ && t.requires_grad() && t.is_leaf() &&
                           grad_mode_enabled() && !t.is_meta();
    if (!use_cache) return cast(t, to);
    const TensorImpl* key = t.impl();
    auto it = cache_.find(key);
    if (it != cache_.end()) {
      const CachedCast& c = it->second;
      if (c.source.lock().get() == key && c.version == t.version() && c.backward_passes == autograd::backward_passes())
        return c.cast;
    }
    Tensor r = cast(t, to);
    cache_[key] = CachedCast{t.impl_ptr(), t.version(), autograd::backward_passes(), r};
    return r;
  }

  struct CachedCast {
    std::weak_ptr<TensorImpl> source;
    uint64_t version = 0;
    uint64_t backward_passes = 0;
    Tensor cast;
  };

  DType dtype_;
  bool enabled_;
  bool cache_enabled_;
  AutocastMode* outer_;
  std::unordered_map<const TensorImpl*, CachedCast> cache_;
  std::optional<ModeGuard> guard_;
};

}  // namespace detail

autocast::autocast(DType dtype, bool enabled, bool cache) {
  KILN_CHECK(dtype == DType::BFloat16 || dtype == DType::Float16, "autocast: dtype must be bfloat16 or float16, got ",
             dtype_name(dtype), "; use kiln::autocast(DType::BFloat16) or kiln::autocast(DType::Float16)");
  mode_ = std::make_unique<detail::AutocastMode>(dtype, enabled, cache);
}
autocast::~autocast() = default;

std::optional<DType> autocast_dtype() {
  const detail::AutocastMode* m = detail::t_innermost;
  if (m == nullptr || !m->enabled()) return std::nullopt;
  return m->dtype();
}

DType parse_autocast_dtype(const std::string& name) {
  if (name == "bf16" || name == "bfloat16") return DType::BFloat16;
  if (name == "fp16" || name == "float16" || name == "half") return DType::Float16;
  KILN_FAIL("autocast: unknown dtype '", name, "'; use bf16 (bfloat16) or fp16 (float16)");
}

}  // namespace kiln
