// Fusing ReLU/GELU into the convolution before it (fuse_conv_activation.h).
#include "compiler/passes/fuse_conv_activation.h"

#include <unordered_map>

#include "compiler/graph/rebuilder.h"
#include "compiler/graph/rewrite.h"
#include "ops/conv_fused.h"

namespace kiln::compiler {
namespace {

// The post-op name for activation node `n` ("relu" | "gelu"), or nullptr.
const char* post_op_name(const Node& n) {
  if (n.kind != NodeKind::Op || !n.attr_inputs.empty()) return nullptr;
  if (n.op == OpId::relu) return "relu";
  if (n.op == OpId::gelu && n.attrs.s("approximate") == "none") return "gelu";
  return nullptr;
}

// The conv2d node that activation `act` fuses into, or -1.
int fusable_conv(const Graph& g, const Node& act, const std::vector<int>& uses, const std::vector<bool>& mutated) {
  if (post_op_name(act) == nullptr) return -1;
  const ValueId x = act.inputs[0];
  const Node& conv = g.producer(x);
  if (conv.kind != NodeKind::Op || conv.op != OpId::conv2d || !conv.attr_inputs.empty()) return -1;
  if (conv.attrs.has("activation")) return -1;
  const size_t xi = static_cast<size_t>(x);
  if (uses[xi] != 1 || mutated[xi] || mutated[static_cast<size_t>(act.outputs[0])]) return -1;
  // oneDNN's post-ops run in float32 and bfloat16 (float64 and float16
  // would apply it after the convolution anyway: nothing to gain).
  const DType dt = g.type(x).dtype;
  if ((dt != DType::Float32 && dt != DType::BFloat16) || g.type(x).device != Device::cpu()) return -1;
  // Where the post-op would cost oneDNN its float32 Winograd kernel (GELU),
  // the activation stays a kernel of its own: fusion must never be slower.
  // (bfloat16 kernels are direct, and a bfloat16 layer that runs in float32
  // makes the same check itself: ops/conv.cpp.)
  const Conv2dParams p = conv2d_params(conv.attrs);
  const bool bias = conv.inputs.size() > 2 && conv.inputs[2] != kNoValue;
  if (dt == DType::Float32 &&
      !conv2d_post_op_pays(g.type(conv.inputs[0]).shape, g.type(conv.inputs[1]).shape, bias, p, post_op_name(act)))
    return -1;
  return g.values[xi].node;
}

}  // namespace

int fuse_conv_activations(Graph& g) {
  const std::vector<int> uses = use_counts(g);
  const std::vector<bool> mutated = mutated_storage(g);
  std::unordered_map<int, int> conv_of_act;  // activation node -> conv node
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (int c = fusable_conv(g, g.nodes[i], uses, mutated); c >= 0) conv_of_act[static_cast<int>(i)] = c;
  return fuse_pairs(g, conv_of_act, [](Rebuilder& rb, const Node& act, const Node& conv) {
    std::vector<ValueId> ins;
    for (ValueId v : conv.inputs) ins.push_back(rb.mapped(v));
    Attrs attrs = conv.attrs;
    attrs.set("activation", std::string(post_op_name(act)));
    return rb.op(OpId::conv2d, std::move(ins), std::move(attrs));
  });
}

}  // namespace kiln::compiler
