// Folding eval batch norm into the preceding convolution (fold_batch_norm.h).
#include "compiler/passes/fold_batch_norm.h"

#include <unordered_map>

#include "compiler/graph/rebuilder.h"
#include "compiler/graph/rewrite.h"
#include "compiler/passes/eval_norm.h"

namespace kiln::compiler {
namespace {

// How many nodes read each value, and which values are graph outputs.
struct Uses {
  std::vector<int> readers;
  std::vector<bool> is_output;
  explicit Uses(const Graph& g) : readers(g.values.size(), 0), is_output(g.values.size(), false) {
    for (const Node& n : g.nodes)
      for (ValueId v : n.inputs)
        if (v != kNoValue) ++readers[static_cast<size_t>(v)];
    for (ValueId v : g.outputs) is_output[static_cast<size_t>(v)] = true;
  }
  bool unused(ValueId v) const { return readers[static_cast<size_t>(v)] == 0 && !is_output[static_cast<size_t>(v)]; }
};

bool has_attr_input(const Node& n) { return !n.attr_inputs.empty(); }

// The conv2d node that batch norm `bn` folds into, or -1.
int foldable_conv(const Graph& g, const Node& bn, const Uses& uses, const std::vector<bool>& mutated) {
  if (bn.kind != NodeKind::Op || bn.op != OpId::batch_norm || has_attr_input(bn) || bn.attrs.b("training")) return -1;
  if (bn.inputs.size() < 5 || bn.inputs[3] == kNoValue || bn.inputs[4] == kNoValue) return -1;
  if (!uses.unused(bn.outputs[1]) || !uses.unused(bn.outputs[2])) return -1;
  const ValueId x = bn.inputs[0];
  const Node& conv = g.producer(x);
  if (conv.kind != NodeKind::Op || conv.op != OpId::conv2d || has_attr_input(conv)) return -1;
  // A conv2d with a fused activation post-op (nn::fuse_modules): the norm
  // reads the activation's output, which no weight scaling reproduces.
  if (conv.attrs.has("activation")) return -1;
  if (uses.readers[static_cast<size_t>(x)] != 1 || uses.is_output[static_cast<size_t>(x)] ||
      mutated[static_cast<size_t>(x)])
    return -1;
  // float32, or bfloat16 (autocast): the folding runs in float32 and casts
  // the folded weight and bias to the convolution's dtype once, where the
  // unfolded bfloat16 norm was a pass over every activation on plain layouts.
  const DType dt = g.type(x).dtype;
  if (dt != DType::Float32 && dt != DType::BFloat16) return -1;
  if (g.type(conv.inputs[0]).dtype != dt || g.type(conv.inputs[1]).dtype != dt) return -1;
  for (size_t k = 1; k < 5; ++k)
    if (bn.inputs[k] != kNoValue && g.type(bn.inputs[k]).dtype != DType::Float32) return -1;
  return g.values[static_cast<size_t>(x)].node;
}

}  // namespace

int fold_batch_norms(Graph& g) {
  const Uses uses(g);
  const std::vector<bool> mutated = mutated_storage(g);
  std::unordered_map<int, int> conv_of_bn;  // batch norm node -> conv node
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (int c = foldable_conv(g, g.nodes[i], uses, mutated); c >= 0) conv_of_bn[static_cast<int>(i)] = c;
  return fuse_pairs(g, conv_of_bn, [&g](Rebuilder& rb, const Node& n, const Node& conv) {
    const ValueId w = rb.mapped(conv.inputs[1]);
    const ValueId cb = conv.inputs.size() > 2 ? rb.mapped(conv.inputs[2]) : kNoValue;
    // A bfloat16 convolution's weight and bias fold in float32, cast once.
    const DType dt = g.type(conv.inputs[1]).dtype;
    auto cast_to = [&rb](ValueId v, DType to) {
      return rb.type(v).dtype == to ? v : rb.op(OpId::cast, {v}, Attrs().set("dtype", to));
    };
    const ValueId s = eval_norm_scale(rb, g, n);
    const int64_t channels = g.type(conv.inputs[1]).shape[0];
    ValueId s4 = rb.op(OpId::view, {s}, Attrs().set("shape", Shape{channels, 1, 1, 1}));
    ValueId w2 = cast_to(rb.op(OpId::mul, {cast_to(w, DType::Float32), s4}), dt);
    ValueId b2 = eval_norm_shift(rb, n, s, cb != kNoValue ? cast_to(cb, DType::Float32) : kNoValue);
    return rb.op(OpId::conv2d, {rb.mapped(conv.inputs[0]), w2, cast_to(b2, dt)}, conv.attrs);
  });
}

}  // namespace kiln::compiler
