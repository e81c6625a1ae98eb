// sgd_step (cuda/backend.h): packs the parameters into SgdCalls of up to
// kSgdMaxTensors and launches sgd.cu's kernel on the device's stream.
#include <algorithm>

#include "cuda/backend.h"
#include "cuda/check.h"
#include "cuda/kernels.h"
#include "kiln/error.h"

namespace kiln::cuda {

void sgd_step(const std::vector<Tensor>& params, const std::vector<Tensor>& grads, const std::vector<Tensor>& buffers,
              const SgdHyper& h) {
  KILN_CHECK(params.size() == grads.size() && params.size() == buffers.size(),
             "SGD step on CUDA: ", params.size(), " parameters but ", grads.size(), " grads and ", buffers.size(),
             " momentum buffers");
  if (params.empty()) return;
  const Device dev = params[0].device();
  SgdCall c;
  // The per-op path's scalars: each a double rounded to float once, as the
  // pointwise kernels convert their number operands and alphas.
  c.m = static_cast<float>(h.momentum);
  c.a_g = static_cast<float>(1.0 - h.dampening);
  c.a_wp = static_cast<float>(h.weight_decay * (1.0 - h.dampening));
  c.decay = static_cast<float>(1.0 - h.lr * h.weight_decay);
  c.a_pg = static_cast<float>(-h.lr);
  c.a_pb = static_cast<float>(h.nesterov ? -h.lr * h.momentum : -h.lr);
  c.weight_decay = h.weight_decay != 0;
  c.nesterov = h.nesterov;
  DeviceGuard guard(dev.index);
  c.stream = stream_for(dev.index);
  auto flush = [&] {
    launch_sgd(c);
    c.count = 0;
    c.max_n = 0;
  };
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor &p = params[i], &g = grads[i], &b = buffers[i];
    KILN_CHECK(p.device() == dev && g.device() == dev && b.device() == dev && p.dtype() == DType::Float32 &&
                   g.dtype() == DType::Float32 && b.dtype() == DType::Float32 && p.strides() == g.strides() &&
                   p.strides() == b.strides() && p.shape() == g.shape() && p.shape() == b.shape(),
             "SGD step on CUDA: parameter ", i, " (", dtype_name(p.dtype()), shape_str(p.shape()),
             "), its grad and its momentum buffer must be float32 on ", dev.str(), " with one layout");
    SgdTensor& t = c.t[c.count++];
    t.p = p.data<float>();
    t.g = g.data<float>();
    t.b = b.data<float>();
    t.n = p.numel();
    c.max_n = std::max(c.max_n, t.n);
    if (c.count == kSgdMaxTensors) flush();
  }
  if (c.count > 0) flush();
  for (size_t i = 0; i < params.size(); ++i) {
    params[i].bump_version();
    buffers[i].bump_version();
  }
}

}  // namespace kiln::cuda
