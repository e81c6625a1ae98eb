#include "ops/meta_mode.h"

#include "ops/layout.h"

namespace kiln {

Tensors meta_outputs(OpId id, TensorSpan inputs, const Attrs& attrs) {
  const OpDef& def = op_def(id);
  OpKind kind = op_kind(id);
  KILN_ASSERT(kind != OpKind::Composite, "meta_outputs: composite op '", op_name(id), "' decomposes instead");
  ExcludeModesGuard shape_rule_scope;
  if (kind == OpKind::View) return {def.view(inputs, attrs)};
  if (kind == OpKind::Inplace) {
    def.infer(inputs, attrs);  // validates
    return {inputs[0]};
  }
  return allocate_outputs(id, inputs, attrs, def.infer(inputs, attrs), true);
}

Tensors MetaMode::handle(OpId id, Tensors& inputs, const Attrs& attrs, const NextMode& next) {
  OpKind kind = op_kind(id);
  if (kind == OpKind::Composite) return next(id, inputs, attrs);
  if (kind == OpKind::Inplace) {
    KILN_CHECK(inputs[0].is_meta(), op_name(id), ": in-place update of a real tensor inside a MetaMode scope, which "
               "runs no kernels; update it outside the scope");
  }
  return meta_outputs(id, inputs, attrs);
}

}  // namespace kiln
