// to_device: a tensor copied to another device (Tensor::to(Device)). Its
// derivative moves the gradient back to the input's device. The kernel is
// the same for every device pair: CPU to CPU never reaches it (to() returns
// the tensor itself), and the CUDA backend does the rest.
#include "cuda/backend.h"
#include "kiln/cuda.h"
#include "kiln/ops.h"
#include "ops/families.h"
#include "ops/op_def.h"

namespace kiln {
namespace {

std::vector<TensorMeta> to_device_infer(TensorSpan in, const Attrs& a) {
  KILN_CHECK(in.size() == 1 && in[0].defined(), "to_device: needs one defined tensor");
  const Device to = Device::parse(a.s("device"));
  const Tensor& x = in[0];
  const std::string what = "to(" + to.str() + ") of a " + describe(in) + " tensor";
  if (to.is_cuda()) cuda::check_device(to, what.c_str());
  return {{x.shape(), x.dtype(), to}};
}

void to_device_kernel(TensorSpan in, std::span<Tensor> out, const Attrs&) {
  cuda::copy_across_devices(in[0], out[0]);
}

Tensors to_device_back(const BackwardCtx& c, TensorSpan g) { return {g[0].to(c.input_metas[0].device)}; }

}  // namespace

void register_device_ops() {
  OpDef d = kernel_op(OpId::to_device, to_device_infer, to_device_kernel, to_device_back, kSaveNone);
  d.kernels[static_cast<int>(DeviceType::CUDA)] = to_device_kernel;
  d.inputs_on_any_device = true;
  define_op(d);
}

Tensor to_device(const Tensor& x, Device device) {
  return dispatch1(OpId::to_device, {x}, Attrs().set("device", device.str()));
}

}  // namespace kiln
