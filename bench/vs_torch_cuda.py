#!/usr/bin/env python3
"""kiln eager on CUDA against torch eager on CUDA: the zoo models, the same run, one ratio table.

Runs on the GPU machine (torch 2.x there). For each precision it times
`kiln bench models --device cuda --modes eager --batch B --json` and then the same models as torch modules
(tools/torch_models.py: kiln's structure), and prints

    model | phase | precision | kiln img/s | torch img/s | kiln/torch

Precisions (--precisions, default all three):
  float32  NCHW, no TF32 on either side (torch.backends.cudnn.allow_tf32 = False; kiln's default: FMA math)
  tf32     NCHW, float32 tensors with TF32 convolutions on both sides (torch's default; kiln KILN_CUDNN_TF32=1);
           matmuls stay full float32 on both (torch's default for matmul)
  bf16     bf16 autocast, channels-last on both sides (torch: model.to(memory_format=torch.channels_last) and a
           channels-last batch; kiln: --channels-last; --no-kiln-channels-last runs kiln NCHW)

What one step is, on both sides (as kiln bench models, docs/benchmarks.md): train = forward + cross entropy with
the recipe's label smoothing under autocast, zero_grad, backward, the recipe's SGD step (momentum, nesterov,
weight decay); eval = a forward in eval mode under no_grad (torch: inference_mode). One batch of standard-normal
images and uniform labels, made before timing. The two sides alternate case by case (kiln's process for one model
and phase, then torch's), so a drift of the shared machine touches both alike. Each step ends with a device synchronize on both sides (kiln's
bench does this; a training loop that reads its loss does too). Warm-up: 5 steps (torch: cuDNN's and cuBLAS's
first-use setup, the caching allocator's fill), then steps for about --seconds (at least 5); the rate is
steps * batch / wall time. torch runs with cudnn.benchmark off (its default); kiln times cuDNN's algorithms
once per shape (docs/cuda.md).

    python3 bench/vs_torch_cuda.py --kiln /tmp/kiln-device/bin/kiln [--batch 512] [--models a,b] [--json FILE]
"""
import argparse
import json
import os
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import torch_models  # noqa: E402

RECIPES = {  # src/cli/train.cpp recipe_for: lr, momentum, weight decay, nesterov, label smoothing
    "tutorial": (0.02, 0.9, 0.0, False, 0.0),
    "resnet18": (0.1, 0.9, 5e-4, False, 0.0),
    "airbench": (0.2, 0.9, 5e-4, True, 0.2),
}
PRECISIONS = ("float32", "tf32", "bf16")


def torch_rate(name, phase, precision, batch, seconds, width):
    torch.manual_seed(0)
    dev = torch.device("cuda")
    model = torch_models.create(name, width=width if name == "airbench" else 1.0).to(dev)
    x = torch.randn(batch, 3, 32, 32, device=dev)
    y = torch.randint(0, 10, (batch,), device=dev)
    amp = precision == "bf16"
    torch.backends.cudnn.allow_tf32 = precision != "float32"
    if amp:  # bf16 runs channels-last, as a fast torch user does
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    lr, momentum, wd, nesterov, ls = RECIPES[name]
    if phase == "train":
        model.train()
        opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum, weight_decay=wd, nesterov=nesterov)

        def step():
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
                loss = F.cross_entropy(model(x), y, label_smoothing=ls)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            torch.cuda.synchronize()
    else:
        model.eval()

        def step():
            with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
                model(x)
            torch.cuda.synchronize()

    for _ in range(5):
        step()
    steps = 0
    t0 = time.perf_counter()
    while steps < 5 or time.perf_counter() - t0 < seconds:
        step()
        steps += 1
    return steps * batch / (time.perf_counter() - t0)


def kiln_rates(kiln, models, phases, batch, precision, width, channels_last):
    cmd = [kiln, "bench", "models", "--device", "cuda", "--modes", "eager", "--batch", str(batch), "--json",
           "--models", ",".join(models), "--phases", ",".join(phases), "--width", str(width)]
    if precision == "bf16":
        cmd += ["--autocast", "bf16"] + (["--channels-last"] if channels_last else [])
    env = dict(os.environ)
    if precision == "tf32":
        env["KILN_CUDNN_TF32"] = "1"
    print("+ " + ("KILN_CUDNN_TF32=1 " if precision == "tf32" else "") + " ".join(cmd), file=sys.stderr, flush=True)
    res = subprocess.run(cmd, capture_output=True, text=True, env=env)
    sys.stderr.write(res.stderr)
    rates = {}
    for line in res.stdout.splitlines():
        if line.startswith("{"):
            j = json.loads(line)
            rates[(j["model"], j["phase"])] = j
    if res.returncode != 0:
        print(f"kiln exited {res.returncode}", file=sys.stderr)
    return rates


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kiln", default="build/kiln")
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--models", default="tutorial,resnet18,airbench")
    ap.add_argument("--precisions", default=",".join(PRECISIONS))
    ap.add_argument("--width", type=float, default=1.0, help="airbench's width (default 1)")
    ap.add_argument("--seconds", type=float, default=2.0, help="timed seconds per torch case (default 2)")
    ap.add_argument("--kiln-channels-last", action=argparse.BooleanOptionalAction, default=True,
                    help="pass --channels-last to kiln's bf16 runs (default; --no-kiln-channels-last: NCHW)")
    ap.add_argument("--json", help="also write one JSON object per case to this file")
    a = ap.parse_args()
    models = a.models.split(",")
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, batch {a.batch}", file=sys.stderr)
    rows = []
    for precision in a.precisions.split(","):
        for name in models:
            for phase in ("train", "eval"):
                k = kiln_rates(a.kiln, [name], [phase], a.batch, precision, a.width, a.kiln_channels_last)
                t = torch_rate(name, phase, precision, a.batch, a.seconds, a.width)
                kj = k.get((name, phase), {})
                kr = kj.get("img_per_s")
                rows.append(dict(model=name, phase=phase, precision=precision, kiln_img_s=kr,
                                 torch_img_s=round(t, 1), ratio=round(kr / t, 3) if kr else None,
                                 cuda_mallocs=kj.get("cuda_mallocs"), cuda_frees=kj.get("cuda_frees")))
                print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    if a.json:
        with open(a.json, "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
    cl = "" if a.kiln_channels_last else ", kiln NCHW"
    print(f"\n| model | phase | precision | kiln img/s | torch img/s | kiln/torch | kiln cudaMalloc/cudaFree |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        prec = {"float32": "float32 (no TF32)", "tf32": "float32, TF32 convs"}.get(
            r["precision"], f"bf16 + channels-last{cl}")
        kr = f"{r['kiln_img_s']:,.0f}" if r["kiln_img_s"] else "error"
        ratio = f"{r['ratio']:.2f}x" if r["ratio"] else "-"
        print(f"| {r['model']} | {r['phase']} | {prec} | {kr} | {r['torch_img_s']:,.0f} | {ratio} | "
              f"{r['cuda_mallocs']}/{r['cuda_frees']} |")
    ratios = [r["ratio"] for r in rows if r["ratio"]]
    if ratios:
        g = 1.0
        for v in ratios:
            g *= v
        print(f"\ngeomean kiln/torch over {len(ratios)} cases: {g ** (1 / len(ratios)):.2f}x")


if __name__ == "__main__":
    main()
