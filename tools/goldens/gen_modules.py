"""Goldens for kiln::nn modules (tests/nn/test_layers.cpp): each case builds a torch.nn module with fixed
random weights and stores its state dict under "<case>.sd.<key>", an input x, the output y, an upstream
gradient gy, the input gradient gx and each parameter's gradient "<case>.grad.<name>"; for modules with
buffers, the buffers after the forward pass under "<case>.after.<key>".

Also writes tests/goldens/modules_py.safetensors with this file's own safetensors writer (struct + json),
for the kiln reader, with its expected contents in the goldens under "st.<name>".
Writes tests/goldens/modules.bin."""
import os

import torch
import torch.nn as nn

import safetensors_py
from common import GOLDEN_DIR, Goldens

g = Goldens("modules", seed=0)


def randomize(m):
    """Non-trivial BN affine parameters and running statistics, so loading them matters."""
    for mod in m.modules():
        if isinstance(mod, nn.BatchNorm2d):
            with torch.no_grad():
                if mod.weight is not None:
                    mod.weight.copy_(torch.rand_like(mod.weight) + 0.5)
                    mod.bias.copy_(torch.randn_like(mod.bias) * 0.2)
                if mod.running_mean is not None:
                    mod.running_mean.copy_(torch.randn_like(mod.running_mean) * 0.1)
                    mod.running_var.copy_(torch.rand_like(mod.running_var) + 0.5)
                    mod.num_batches_tracked.fill_(3)
    return m


def case(name, m, x_shape, train=True):
    m = randomize(m)
    m.train(train)
    for k, v in m.state_dict().items():
        g.add(f"{name}.sd.{k}", v)
    x = torch.randn(*x_shape)
    g.add(f"{name}.x", x)
    x = x.clone().requires_grad_()
    y = m(x)
    g.add(f"{name}.y", y)
    gy = torch.randn_like(y)
    g.add(f"{name}.gy", gy)
    params = dict(m.named_parameters())
    grads = torch.autograd.grad(y, [x] + list(params.values()), gy)
    g.add(f"{name}.gx", grads[0])
    for (k, _), gr in zip(params.items(), grads[1:]):
        g.add(f"{name}.grad.{k}", gr)
    for k, v in m.named_buffers():
        g.add(f"{name}.after.{k}", v)


case("conv", nn.Conv2d(3, 4, 3, padding=1), (2, 3, 6, 6))
case("conv_nobias_s2", nn.Conv2d(4, 6, 3, stride=2, padding=1, bias=False), (2, 4, 7, 7))
case("conv_groups", nn.Conv2d(4, 6, (2, 3), stride=(2, 1), padding=(1, 0), dilation=(1, 2), groups=2), (2, 4, 7, 8))
case("linear", nn.Linear(7, 5), (3, 7))
case("linear_nobias", nn.Linear(7, 5, bias=False), (2, 3, 7))
case("bn_train", nn.BatchNorm2d(4), (3, 4, 5, 5))
case("bn_eval", nn.BatchNorm2d(4), (3, 4, 5, 5), train=False)
case("bn_momentum", nn.BatchNorm2d(4, momentum=0.3, eps=1e-3), (3, 4, 5, 5))
case("bn_noaffine", nn.BatchNorm2d(4, affine=False), (3, 4, 5, 5))
case("bn_nostats_eval", nn.BatchNorm2d(4, track_running_stats=False), (3, 4, 5, 5), train=False)
case("maxpool", nn.MaxPool2d(2), (2, 3, 6, 7))
case("maxpool_pad", nn.MaxPool2d(3, stride=2, padding=1, ceil_mode=True), (2, 3, 8, 8))
case("avgpool", nn.AvgPool2d(2), (2, 3, 6, 7))
case("avgpool_pad", nn.AvgPool2d(3, stride=2, padding=1), (2, 3, 8, 8))
case("adaptive_avg", nn.AdaptiveAvgPool2d((1, 1)), (2, 3, 5, 5))
case("adaptive_max", nn.AdaptiveMaxPool2d((2, 2)), (2, 3, 6, 6))  # kiln: output sizes dividing the input
case("relu", nn.ReLU(), (2, 3, 4))
case("gelu", nn.GELU(), (2, 3, 4))
case("gelu_tanh", nn.GELU("tanh"), (2, 3, 4))
case("flatten", nn.Flatten(), (2, 3, 4, 5))
case("dropout_eval", nn.Dropout(0.5), (2, 3, 4), train=False)

tutorial = nn.Sequential(
    nn.Conv2d(3, 6, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2),
    nn.Flatten(), nn.Linear(400, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, 10))
case("seq_tutorial", tutorial, (2, 3, 32, 32))

bnnet = nn.Sequential(
    nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.GELU(), nn.MaxPool2d(2),
    nn.Sequential(nn.Conv2d(8, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU()),
    nn.AdaptiveMaxPool2d((1, 1)), nn.Flatten(), nn.Linear(8, 10, bias=False))
case("seq_bn", bnnet, (4, 3, 8, 8))

# ---- a safetensors file written by Python ----
st = {
    "model.0.weight": tutorial[0].weight.detach().clone(),
    "f64": torch.randn(3, 2, dtype=torch.float64),
    "bf16": torch.randn(5).to(torch.bfloat16),
    "f16": torch.randn(2, 3).to(torch.float16),
    "i64": torch.tensor([-3, 0, 1 << 40], dtype=torch.int64),
    "i32": torch.tensor([[7, -8]], dtype=torch.int32),
    "u8": torch.arange(250, 256, dtype=torch.uint8),
    "bool": torch.tensor([True, False, True]),
    "scalar": torch.tensor(2.5),
    "empty": torch.zeros(0, 4),
}
for k, v in st.items():
    g.add(f"st.{k}", v)
safetensors_py.save(os.path.join(GOLDEN_DIR, "modules_py.safetensors"), st,
                    metadata={"format": "pt", "note": "written by tools/goldens/gen_modules.py \u00e9"},
                    header_order=sorted(st))
g.write()
