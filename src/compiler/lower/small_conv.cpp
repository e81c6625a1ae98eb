// Which convolutions lower to loops (small_conv.h).
#include "compiler/lower/small_conv.h"

#include "ops/conv_fused.h"

namespace kiln::compiler::lower {

bool lowers_as_small_conv(const Graph& g, const Node& n) {
  if (n.kind != NodeKind::Op || n.op != OpId::conv2d || !n.attr_inputs.empty() || n.outputs.size() != 1) return false;
  if (n.inputs.size() < 2 || n.inputs.size() > 3) return false;  // no residual input
  for (const char* a : {"in_layout", "out_layout"})
    if (n.attrs.has(a)) return false;
  if (n.attrs.has("algorithm") && n.attrs.s("algorithm") != "auto") return false;
  if (n.attrs.has("activation") && n.attrs.s("activation") != "relu") return false;
  const Conv2dParams p = conv2d_params(n.attrs);
  if (p.stride != std::vector<int64_t>{1, 1} || p.padding != std::vector<int64_t>{0, 0} ||
      p.dilation != std::vector<int64_t>{1, 1} || p.groups != 1)
    return false;
  for (ValueId v : n.inputs) {
    if (v == kNoValue) continue;
    const ValueType& t = g.type(v);
    if (t.dtype != DType::Float32 || t.device.type != DeviceType::CPU || (t.symbolic_dims & ~uint64_t{1}) != 0)
      return false;
  }
  const ValueType& x = g.type(n.inputs[0]);
  const ValueType& w = g.type(n.inputs[1]);
  const ValueType& out = g.type(n.outputs[0]);
  if (x.shape.size() != 4 || w.shape.size() != 4 || out.dtype != DType::Float32) return false;
  if (x.strides != contiguous_strides(x.shape) || w.strides != contiguous_strides(w.shape)) return false;
  const int64_t products = w.shape[1] * w.shape[2] * w.shape[3];
  return w.shape[0] <= kSmallConvMaxChannels && products <= 128 && out.shape[3] >= 16 && w.shape[3] < 16;
}

}  // namespace kiln::compiler::lower
