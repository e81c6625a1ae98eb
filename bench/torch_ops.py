#!/usr/bin/python3
"""PyTorch side of bench/vs_torch.sh --suite ops.

Times the same cases as `kiln bench ops` (src/cli/bench_ops.cpp): same shapes,
float32, NCHW, eager, inputs drawn from a standard normal. Timing rule, kept in
step with the kiln side: two warm-up iterations, the second one timed to pick
the repetition count (about TARGET_MS of timed work, at least MIN_REPS, at most
MAX_REPS) unless --reps is given, then the median of the repetitions. One
iteration of a forward+backward case is forward + loss + backward; gradients
are reset to None before each iteration, outside the timed region.

Run with Debian's interpreter, which has python3-torch: /usr/bin/python3.
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

TARGET_MS = 1500.0
MIN_REPS = 3
MAX_REPS = 1000


def _import_torch():
    try:
        import torch  # noqa: F401
    except ImportError:
        sys.exit("torch_ops.py: PyTorch is not importable from %s; install Debian's python3-torch "
                 "(apt-get install -y python3-torch) and run with /usr/bin/python3" % sys.executable)
    import torch
    return torch


def make_cases(torch):
    F = torch.nn.functional

    def leaf(t):
        return t.requires_grad_(True)

    def clear(*leaves):
        def reset():
            for t in leaves:
                t.grad = None
        return reset

    def nothing():
        pass

    def conv(xs, ws, backward):
        x, w = torch.randn(xs), torch.randn(ws)
        if not backward:
            return nothing, lambda: F.conv2d(x, w, None, padding=1)
        leaf(x), leaf(w)
        return clear(x, w), lambda: F.conv2d(x, w, None, padding=1).sum().backward()

    def matmul_1024():
        a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
        return nothing, lambda: torch.matmul(a, b)

    def linear_fc():
        x, w, b = leaf(torch.randn(128, 4096)), leaf(torch.randn(1024, 4096)), leaf(torch.randn(1024))
        return clear(x, w, b), lambda: F.linear(x, w, b).sum().backward()

    def pointwise_chain():
        x = torch.randn(128, 64, 32, 32)
        a, b, c = torch.randn(64, 1, 1), torch.randn(64, 1, 1), torch.randn(64, 1, 1)
        return nothing, lambda: torch.sum(F.gelu(torch.mul(torch.relu(torch.add(torch.mul(x, a), b)), c)))

    def maxpool_bn_relu():
        x, gamma, beta = leaf(torch.randn(128, 64, 32, 32)), leaf(torch.ones(64)), leaf(torch.zeros(64))
        running_mean, running_var = torch.zeros(64), torch.ones(64)

        def step():
            p = F.max_pool2d(x, 2)
            F.relu(F.batch_norm(p, running_mean, running_var, gamma, beta, training=True)).sum().backward()
        return clear(x, gamma, beta), step

    def softmax_xent():
        logits = leaf(torch.randn(4096, 1000))
        target = torch.randint(0, 1000, (4096,), dtype=torch.int64)
        return clear(logits), lambda: F.cross_entropy(logits, target).backward()

    return {
        "conv_resnet_block": lambda: conv((128, 64, 32, 32), (64, 64, 3, 3), True),
        "conv_airbench_256": lambda: conv((128, 256, 15, 15), (256, 256, 3, 3), True),
        "conv_airbench_64_256": lambda: conv((128, 64, 15, 15), (256, 64, 3, 3), True),
        "conv_resnet_block_fwd": lambda: conv((128, 64, 32, 32), (64, 64, 3, 3), False),
        "conv_airbench_256_fwd": lambda: conv((128, 256, 15, 15), (256, 256, 3, 3), False),
        "matmul_1024": matmul_1024,
        "linear_fc": linear_fc,
        "pointwise_chain": pointwise_chain,
        "maxpool_bn_relu": maxpool_bn_relu,
        "softmax_xent": softmax_xent,
    }


CASE_NAMES = ["conv_resnet_block", "conv_airbench_256", "conv_airbench_64_256", "conv_resnet_block_fwd", "conv_airbench_256_fwd",
              "matmul_1024", "linear_fc", "pointwise_chain", "maxpool_bn_relu", "softmax_xent"]


def time_iteration(reset, step, reps):
    def once():
        reset()
        t0 = time.perf_counter()
        step()
        return (time.perf_counter() - t0) * 1e3

    once()
    probe = once()
    if reps <= 0:
        reps = int(min(max(math.ceil(TARGET_MS / max(probe, 1e-3)), MIN_REPS), MAX_REPS))
    return statistics.median(once() for _ in range(reps)), reps


def main():
    ap = argparse.ArgumentParser(description="PyTorch side of bench/vs_torch.sh --suite ops")
    ap.add_argument("--json", action="store_true", help='one JSON object per case: {"case": ..., "torch_ms": ...}')
    ap.add_argument("--cases", default="", help="comma-separated case names (default: all)")
    ap.add_argument("--reps", type=int, default=0, help="timed repetitions per case (default: adapts)")
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (default: OMP_NUM_THREADS or 2)")
    ap.add_argument("--list", action="store_true", help="print the case names")
    args = ap.parse_args()

    if args.list:
        print("\n".join(CASE_NAMES))
        return 0
    names = [n for n in args.cases.split(",") if n] or CASE_NAMES
    unknown = [n for n in names if n not in CASE_NAMES]
    if unknown:
        print("torch_ops.py: unknown case '%s'; available: %s" % (unknown[0], " ".join(CASE_NAMES)), file=sys.stderr)
        return 2
    if args.reps < 0 or args.threads < 0:
        print("torch_ops.py: --reps and --threads must be positive", file=sys.stderr)
        return 2

    torch = _import_torch()
    threads = args.threads or int(os.environ.get("OMP_NUM_THREADS", "2") or 2)
    torch.set_num_threads(threads)
    cases = make_cases(torch)
    if not args.json:
        print("torch %s bench ops: %d thread(s), float32, eager; median of timed repetitions"
              % (torch.__version__, torch.get_num_threads()))
    for name in names:
        torch.manual_seed(0)
        reset, step = cases[name]()
        ms, reps = time_iteration(reset, step, args.reps)
        if args.json:
            print(json.dumps({"case": name, "torch_ms": round(ms, 4)}), flush=True)
        else:
            print("%-24s %10.3f ms  (median of %d)" % (name, ms, reps), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
