// Meta execution as a dispatch mode: inside its scope every op runs its
// shape rule only and gives meta tensors, factories and ops on real tensors
// included, so a model's shapes can be worked out without memory or time.
// (Ops with a meta input are shape-only anyway; this mode also covers the
// ones that have none.)
#pragma once
#include "ops/dispatch_mode.h"

namespace kiln {

class MetaMode final : public DispatchMode {
 public:
  const char* mode_name() const override { return "meta"; }
  Tensors handle(OpId id, Tensors& inputs, const Attrs& attrs, const NextMode& next) override;
};

// The outputs an op would give, as meta tensors, from its shape rule (or its
// view function); no kernel runs. Composite ops are not handled here.
Tensors meta_outputs(OpId id, TensorSpan inputs, const Attrs& attrs);

}  // namespace kiln
