#!/usr/bin/python3
"""PyTorch side of bench/vs_torch.sh --suite models.

Times PyTorch eager on the same cases as `kiln bench models`: the zoo models
(tools/torch_models.py, the twins of kiln's), a train step (the model's
recipe: SGD with momentum, weight decay, Nesterov, cross entropy with label
smoothing) and an eval forward (eval mode, no grad), on one fixed batch of
random images, timed as kiln times them (src/cli/bench_models.cpp): a first
call, a warm-up call, then steps until about 2 s have passed (at least 3, at
most 200); images/s = steps * batch / wall time.

Random inputs can make PyTorch 1.13 hit denormal numbers and run ~10x slower;
flush-to-zero is on here (torch.set_flush_denormal), as kiln's oneDNN kernels
do, so the figures are PyTorch at its best.

    /usr/bin/python3 bench/torch_bench_models.py --models tutorial,airbench --phases train,eval
        [--batch 128] [--width 1] [--threads 2] [--label LABEL]

Prints one JSON object per case: {"model", "mode", "phase", "img_per_s", "steps", "batch"}
with mode "torch-eager" (or --label).
"""
import argparse
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The recipes of docs/training.md, as bench/torch_train.py has them.
RECIPES = {
    "tutorial": dict(lr=0.02, momentum=0.9, nesterov=False, weight_decay=0.0, label_smoothing=0.0),
    "resnet18": dict(lr=0.1, momentum=0.9, nesterov=False, weight_decay=5e-4, label_smoothing=0.0),
    "airbench": dict(lr=0.2, momentum=0.9, nesterov=True, weight_decay=5e-4, label_smoothing=0.2),
}
TARGET_S, MIN_STEPS, MAX_STEPS = 2.0, 3, 200


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="tutorial,resnet18,airbench")
    p.add_argument("--phases", default="train,eval")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--width", type=float, default=1.0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--label", default="torch-eager")
    a = p.parse_args()
    import torch

    torch.set_num_threads(a.threads)
    torch.set_flush_denormal(True)
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    import torch_models as tm

    for name in a.models.split(","):
        if name not in RECIPES:
            sys.exit("torch_bench_models.py: unknown model '%s' (tutorial, resnet18, airbench)" % name)
        for phase in a.phases.split(","):
            torch.manual_seed(0)
            model = tm.create(name, width=a.width if name == "airbench" else 1.0)
            x = torch.randn(a.batch, 3, 32, 32)
            y = torch.randint(0, 10, (a.batch,))
            if phase == "train":
                r = RECIPES[name]
                model.train()
                opt = torch.optim.SGD(model.parameters(), lr=r["lr"], momentum=r["momentum"],
                                      weight_decay=r["weight_decay"], nesterov=r["nesterov"])
                loss_fn = torch.nn.CrossEntropyLoss(label_smoothing=r["label_smoothing"])

                def step():
                    loss = loss_fn(model(x), y)
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                    opt.step()
            elif phase == "eval":
                model.eval()

                def step():
                    with torch.no_grad():
                        model(x)
            else:
                sys.exit("torch_bench_models.py: unknown phase '%s' (train, eval)" % phase)
            step()
            step()
            steps, t0 = 0, time.perf_counter()
            while steps < MAX_STEPS and (steps < MIN_STEPS or time.perf_counter() - t0 < TARGET_S):
                step()
                steps += 1
            wall = time.perf_counter() - t0
            print(json.dumps({"model": name, "mode": a.label, "phase": phase,
                              "img_per_s": round(steps * a.batch / wall, 1), "steps": steps, "batch": a.batch}),
                  flush=True)


if __name__ == "__main__":
    main()
