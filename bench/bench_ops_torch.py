"""PyTorch 1.13 side of bench_ops.cpp: the same shapes, medians in ms.

  OMP_NUM_THREADS=2 /usr/bin/python3 bench/bench_ops_torch.py
Run it right after ./bench_ops in the same conditions and compare ratios.
"""
import time

import torch
import torch.nn.functional as F

torch.set_num_threads(int(__import__("os").environ.get("OMP_NUM_THREADS", "2")))


def bench(name, fn, reps=7):
    fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t0) * 1e3)
    ts.sort()
    print(f"{name:40s} {ts[len(ts) // 2]:9.2f} ms")


def conv(n, c, o, hw):
    x = torch.randn(n, c, hw, hw)
    w = torch.randn(o, c, 3, 3)
    gy = torch.randn(n, o, hw, hw)
    xg = x.clone().requires_grad_()
    wg = w.clone().requires_grad_()

    def fwd():
        with torch.no_grad():
            F.conv2d(x, w, padding=1)

    def fwd_bwd():
        y = F.conv2d(xg, wg, padding=1)
        torch.autograd.grad(y, (xg, wg), gy)

    bench(f"conv {c}->{o} {hw}x{hw} forward", fwd)
    bench(f"conv {c}->{o} {hw}x{hw} forward+backward", fwd_bwd)


conv(128, 64, 64, 32)
conv(128, 256, 256, 15)
a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
bench("matmul 1024^3", lambda: a @ b, reps=21)
a2, b2 = torch.randn(128, 512), torch.randn(512, 10)
bench("matmul 128x512x10", lambda: a2 @ b2, reps=201)
x, y, z = (torch.randn(128, 64, 32, 32) for _ in range(3))
bench("pointwise relu(x*y+z)", lambda: torch.relu(x * y + z))

x = torch.randn(128, 64, 32, 32, requires_grad=True)
gy = torch.randn(128, 64, 16, 16)


def maxpool():
    y = F.max_pool2d(x, 2)
    torch.autograd.grad(y, x, gy)


bench("max_pool2d 2x2 forward+backward", maxpool)
xb = torch.randn(128, 64, 32, 32, requires_grad=True)
wb = torch.randn(64, requires_grad=True)
bb = torch.randn(64, requires_grad=True)
rm, rv = torch.zeros(64), torch.ones(64)
gyb = torch.randn(128, 64, 32, 32)


def bn():
    y = F.batch_norm(xb, rm, rv, wb, bb, training=True)
    torch.autograd.grad(y, (xb, wb, bb), gyb)


bench("batch_norm train forward+backward", bn)
