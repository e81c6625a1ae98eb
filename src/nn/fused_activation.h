// The dispatch mode a FusedModel's forward runs under (kiln/fusion.h): a
// Conv2d with a fused activation computes act(conv(x)) in one call and
// registers its output here; the activation op the model's code calls next
// on that output returns it unchanged instead of running again.
#pragma once
#include <string>
#include <unordered_map>

#include "ops/dispatch_mode.h"

namespace kiln::nn::detail {

class FusedActivationMode : public DispatchMode {
 public:
  FusedActivationMode();
  ~FusedActivationMode() override;
  const char* mode_name() const override { return "fused_activation"; }
  Tensors handle(OpId id, Tensors& inputs, const Attrs& attrs, const NextMode& next) override;
  // `y` already holds activation(...): the next relu/gelu on it is skipped.
  void expect_activation(const Tensor& y, const std::string& activation);
  // kiln::Error when a fused output never met its activation.
  void finish();

 private:
  // The pending outputs, held so that their addresses are not reused.
  std::unordered_map<const TensorImpl*, std::pair<Tensor, std::string>> pending_;
  FusedActivationMode* prev_;
};

// The innermost FusedActivationMode of this thread, or nullptr.
FusedActivationMode* active_fused_activation_mode();

}  // namespace kiln::nn::detail
