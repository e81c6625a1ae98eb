"""Goldens for the model zoo (tests/models/test_models.cpp). Writes tests/goldens/models.bin and
tests/goldens/models_keys.txt.

The weights are not stored: ResNet-18 alone would be 45 MB. Both sides fill every state_dict entry
from a counter-based hash (splitmix64 of (entry index << 40) + element index), so the weights are
bit-identical without shipping them; the test fills a TensorDict the same way (checked against a
sample stored here) and loads it with load_state_dict. Rules by key:
  *.num_batches_tracked 0 | *.running_mean 0.1u | *.running_var 1 + 0.5u | 1-D weight 1 + 0.25u
  | bias 0.1u | other weights u * sqrt(3 / fan_in), with u uniform in [-1, 1) on a 2^-23 grid,
computed in float64 and rounded to float32.
The reference runs in float64 (weights and inputs are float32 values), so a float32 kiln result is
compared against the exact answer, not against torch's own float32 rounding.

Per case <c>: <c>.x (float32 input), <c>.r (float32), <c>.logits_eval and <c>.logits_train
(eval first, then one train-mode forward), <c>.grad.<key> = a sample of d sum(logits_train * r) /
d param (every step-th element, step = ceil(numel / 1024)), <c>.after_train.<buffer> (running stats
after the train forward), <c>.init.<key> (the same sample of the filled weights), <c>.num_params.
models_keys.txt: one line per state_dict entry, "<case> <key> <param|buffer> <dtype> <d0,d1,...>" ("-" for a scalar).
"""
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import torch_models  # noqa: E402
from common import GOLDEN_DIR, Goldens  # noqa: E402

SAMPLE = 1024
M64 = np.uint64(0xFFFFFFFFFFFFFFFF)

# name, model name, kwargs, input (C, H, W), batch
CASES = [
    ("tutorial", "tutorial", {}, (3, 32, 32), 4),
    ("tutorial_fmnist", "tutorial", {"in_channels": 1, "image_size": 28}, (1, 28, 28), 4),
    ("airbench_w025", "airbench", {"width": 0.25}, (3, 32, 32), 4),
    ("airbench_w1", "airbench", {"width": 1.0}, (3, 32, 32), 4),
    ("resnet18", "resnet18", {}, (3, 32, 32), 4),
]


def hash_uniform(entry, n):
    """u in [-1, 1) on a 2^-23 grid; must match fill_uniform in tests/models/test_models.cpp."""
    with np.errstate(over="ignore"):
        x = (np.uint64(entry) << np.uint64(40)) + np.arange(n, dtype=np.uint64)
        z = x + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    k = (z >> np.uint64(40)).astype(np.float64)
    return k / float(1 << 23) - 1.0


def fill_value(entry, key, t):
    n = t.numel()
    if key.endswith("num_batches_tracked"):
        return torch.zeros_like(t)
    u = hash_uniform(entry, n)
    if key.endswith("running_mean"):
        v = 0.1 * u
    elif key.endswith("running_var"):
        v = 1.0 + 0.5 * u
    elif key.endswith("weight") and t.dim() == 1:
        v = 1.0 + 0.25 * u
    elif key.endswith("bias"):
        v = 0.1 * u
    else:
        fan_in = n // t.shape[0]
        v = u * math.sqrt(3.0 / fan_in)
    return torch.from_numpy(v.astype(np.float32)).reshape(t.shape)


def sample(t):
    flat = t.detach().reshape(-1)
    step = (flat.numel() + SAMPLE - 1) // SAMPLE
    return flat[::step]


DTYPE_NAMES = {torch.float32: "float32", torch.int64: "int64"}


def main():
    g = Goldens("models", seed=0)
    key_lines = []
    for case, model_name, kwargs, chw, batch in CASES:
        torch.manual_seed(0)
        net = torch_models.create(model_name, **kwargs)
        param_names = {k for k, _ in net.named_parameters()}
        sd = net.state_dict()
        for key, t in sd.items():
            kind = "param" if key in param_names else "buffer"
            key_lines.append(f"{case} {key} {kind} {DTYPE_NAMES[t.dtype]} {','.join(str(s) for s in t.shape) or '-'}")
        filled = {key: fill_value(i, key, t) for i, (key, t) in enumerate(sd.items())}
        for key, t in filled.items():
            if key in param_names:
                g.add(f"{case}.init.{key}", sample(t))
        net.load_state_dict(filled)
        net.double()
        g.add(f"{case}.num_params", torch.tensor(sum(p.numel() for p in net.parameters()), dtype=torch.int64))

        x = g.add(f"{case}.x", torch.randn(batch, *chw))
        net.eval()
        with torch.no_grad():
            g.add(f"{case}.logits_eval", net(x.double()))
        net.train()
        logits = net(x.double())
        g.add(f"{case}.logits_train", logits)
        r = g.add(f"{case}.r", torch.randn(logits.shape))
        (logits * r.double()).sum().backward()
        for key, p in net.named_parameters():
            g.add(f"{case}.grad.{key}", sample(p.grad))
        for key, b in net.named_buffers():
            g.add(f"{case}.after_train.{key}", b)
        print(f"{case}: {sum(p.numel() for p in net.parameters())} parameters, logits {tuple(logits.shape)}")
    g.write()
    path = os.path.join(GOLDEN_DIR, "models_keys.txt")
    with open(path, "w") as f:
        f.write("\n".join(key_lines) + "\n")
    print(f"wrote {path}: {len(key_lines)} keys")


if __name__ == "__main__":
    main()
