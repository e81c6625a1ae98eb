// An eval batch norm's scale and shift as graph ops (eval_norm.h).
#include "compiler/passes/eval_norm.h"

namespace kiln::compiler {

ValueId eval_norm_scale(Rebuilder& rb, const Graph& g, const Node& bn) {
  // eps as a full() node, not a tensor constant: a pass may run while a
  // capture records, where any tensor made here would be a placeholder.
  const ValueId eps = rb.op(OpId::full, {},
                            Attrs()
                                .set("shape", Shape{})
                                .set("dtype", DType::Float32)
                                .set("device", g.type(bn.inputs[4]).device.str())
                                .set("value", bn.attrs.f("eps")));
  ValueId s = rb.op(OpId::rsqrt, {rb.op(OpId::add, {rb.mapped(bn.inputs[4]), eps})});
  const ValueId gamma = rb.mapped(bn.inputs[1]);
  return gamma != kNoValue ? rb.op(OpId::mul, {gamma, s}) : s;
}

ValueId eval_norm_shift(Rebuilder& rb, const Node& bn, ValueId scale, ValueId bias_before) {
  const ValueId mean = rb.mapped(bn.inputs[3]), beta = rb.mapped(bn.inputs[2]);
  ValueId centered = bias_before != kNoValue ? rb.op(OpId::sub, {bias_before, mean}) : rb.op(OpId::neg, {mean});
  ValueId shift = rb.op(OpId::mul, {centered, scale});
  return beta != kNoValue ? rb.op(OpId::add, {shift, beta}) : shift;
}

}  // namespace kiln::compiler
