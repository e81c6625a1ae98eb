// Reading the fused-activation attribute (fused_activation.h).
#include "ops/fused_activation.h"

#include <string>

#include "kiln/error.h"

namespace kiln {

FusedActivation fused_activation(const Attrs& a, const char* op) {
  if (!a.has("activation")) return FusedActivation::None;
  const std::string& s = a.s("activation");
  if (s == "relu") return FusedActivation::Relu;
  if (s == "gelu") return FusedActivation::Gelu;
  KILN_FAIL(op, ": activation=\"", s, "\" is not an activation kiln fuses; use \"relu\" or \"gelu\" (erf), or leave ",
            "the attribute out and apply the activation after");
}

}  // namespace kiln
