#include "ops/layout.h"

#include "kiln/memory_format.h"

namespace kiln {

namespace {

bool channels_last_4d(const Tensor& t) {
  return t.defined() && t.dim() == 4 && suggest_memory_format(t) == MemoryFormat::ChannelsLast;
}

// The input whose layout output `k` of op `id` follows on CUDA (-1: none;
// -2: a pointwise op's first input of the output's shape).
int layout_source(OpId id, int k) {
  switch (id) {
    case OpId::conv2d:
    case OpId::conv2d_backward_input:
    case OpId::max_pool2d:
    case OpId::max_pool2d_backward:
    case OpId::avg_pool2d:
    case OpId::avg_pool2d_backward:
      return 0;
    case OpId::conv2d_backward_weight:
      return 1;
    case OpId::batch_norm:
      return k == 0 ? 0 : -1;
    case OpId::batch_norm_backward:
      return k == 0 ? 1 : -1;
    default:
      return op_kind(id) == OpKind::Pointwise ? -2 : -1;
  }
}

}  // namespace

std::vector<Shape> output_strides(OpId id, TensorSpan inputs, const Attrs& attrs,
                                  const std::vector<TensorMeta>& metas) {
  std::vector<Shape> r(metas.size());
  if (id == OpId::copy) {
    if (attrs.has("memory_format") && attrs.s("memory_format") == "channels_last")
      r[0] = channels_last_strides(metas[0].shape);
    return r;
  }
  for (size_t k = 0; k < metas.size(); ++k) {
    const TensorMeta& m = metas[k];
    if (!m.device.is_cuda() || m.shape.size() != 4) continue;
    const int src = layout_source(id, static_cast<int>(k));
    bool cl = false;
    if (src >= 0) {
      cl = static_cast<size_t>(src) < inputs.size() && channels_last_4d(inputs[static_cast<size_t>(src)]);
    } else if (src == -2) {
      for (const Tensor& t : inputs) {
        if (!t.defined() || t.shape() != m.shape) continue;
        cl = channels_last_4d(t);
        break;
      }
    }
    if (cl) r[k] = channels_last_strides(m.shape);
  }
  return r;
}

Tensors allocate_outputs(OpId id, TensorSpan inputs, const Attrs& attrs, const std::vector<TensorMeta>& metas,
                         bool meta) {
  const std::vector<Shape> strides = output_strides(id, inputs, attrs, metas);
  Tensors out;
  out.reserve(metas.size());
  for (size_t k = 0; k < metas.size(); ++k) {
    const TensorMeta& m = metas[k];
    if (meta) out.push_back(Tensor::meta(m.shape, m.dtype, m.device, strides[k]));
    else if (strides[k].empty()) out.push_back(Tensor::empty(m.shape, m.dtype, m.device));
    else out.push_back(empty_strided(m.shape, strides[k], m.dtype, m.device));
  }
  return out;
}

}  // namespace kiln
