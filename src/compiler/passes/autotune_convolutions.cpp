// Marking convolutions for per-layer algorithm tuning (autotune_convolutions.h).
#include "compiler/passes/autotune_convolutions.h"

namespace kiln::compiler {

int autotune_convolutions(Graph& g) {
  int marked = 0;
  for (Node& n : g.nodes) {
    if (n.kind != NodeKind::Op || n.attrs.has("algorithm")) continue;
    if (n.op != OpId::conv2d && n.op != OpId::conv2d_backward_input && n.op != OpId::conv2d_backward_weight) continue;
    const ValueType& t = g.type(n.outputs[0]);
    if (t.dtype != DType::Float32 || t.device != Device::cpu()) continue;
    n.attrs.set("algorithm", std::string("tuned"));
    ++marked;
  }
  return marked;
}

}  // namespace kiln::compiler
