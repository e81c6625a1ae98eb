// FusedActivationMode: skips the activation op a fused convolution already applied.
#include "nn/fused_activation.h"

#include "kiln/error.h"

namespace kiln::nn::detail {
namespace {
thread_local FusedActivationMode* current = nullptr;

// The activation an op applies to its input 0, or "" when it is no fusable one.
std::string activation_of(OpId id, const Attrs& attrs) {
  if (id == OpId::relu) return "relu";
  if (id == OpId::gelu && attrs.has("approximate") && attrs.s("approximate") == "none") return "gelu";
  return "";
}
}  // namespace

FusedActivationMode::FusedActivationMode() : prev_(current) { current = this; }
FusedActivationMode::~FusedActivationMode() { current = prev_; }

FusedActivationMode* active_fused_activation_mode() { return current; }

void FusedActivationMode::expect_activation(const Tensor& y, const std::string& activation) {
  pending_[y.impl()] = {y, activation};
}

Tensors FusedActivationMode::handle(OpId id, Tensors& inputs, const Attrs& attrs, const NextMode& next) {
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) continue;
    auto it = pending_.find(inputs[i].impl());
    if (it == pending_.end()) continue;
    if (i == 0 && activation_of(id, attrs) == it->second.second) {
      Tensor y = it->second.first;
      pending_.erase(it);
      return {y};
    }
    KILN_FAIL("fuse_modules: a convolution fused with ", it->second.second, " has its output read by ", op_name(id),
              " before the ", it->second.second, " its model applies (the model's forward changed since the first ",
              "call planned the fusion); fuse the model anew with nn::fuse_modules");
  }
  return next(id, inputs, attrs);
}

void FusedActivationMode::finish() {
  if (pending_.empty()) return;
  std::string act = pending_.begin()->second.second;
  pending_.clear();
  KILN_FAIL("fuse_modules: a convolution fused with ", act, " was not followed by its ", act,
            " in this forward (the model's forward changed since the first call planned the fusion); fuse the model ",
            "anew with nn::fuse_modules");
}

}  // namespace kiln::nn::detail
