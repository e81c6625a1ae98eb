"""Goldens for the conv, matmul, pool and batch-norm op families (tests/ops/test_conv.cpp,
test_matmul.cpp, test_pool.cpp, test_norm.cpp). Writes tests/goldens/nn.bin.

Each case stores its inputs, the output, an upstream gradient gy and the input gradients
torch computes for it, under "<case>.<tensor>"."""
import torch
import torch.nn.functional as F

from common import Goldens

g = Goldens("nn", seed=0)


def add_grads(name, out, inputs, gy=None):
    """Stores gy and d(sum(out * gy))/d(input) for each named input that requires grad."""
    if gy is None:
        gy = torch.randn_like(out)
    g.add(f"{name}.gy", gy)
    names = [k for k, t in inputs.items() if t is not None and t.requires_grad]
    grads = torch.autograd.grad(out, [inputs[k] for k in names], gy)
    for k, gr in zip(names, grads):
        g.add(f"{name}.g{k}", gr)


def leaf(name, t):
    g.add(name, t)
    return t.clone().requires_grad_()


# ---- conv2d ----
CONV = [
    # name, N, C, H, W, O, (kh, kw), stride, padding, dilation, groups, bias
    ("conv_basic", 2, 3, 8, 8, 4, (3, 3), (1, 1), (1, 1), (1, 1), 1, True),
    ("conv_stride2", 2, 4, 9, 9, 6, (3, 3), (2, 2), (1, 1), (1, 1), 1, False),
    ("conv_dil2", 1, 3, 10, 10, 5, (3, 3), (1, 1), (2, 2), (2, 2), 1, True),
    ("conv_groups2", 2, 4, 7, 7, 6, (3, 3), (1, 1), (1, 1), (1, 1), 2, True),
    ("conv_rect", 2, 3, 7, 9, 4, (2, 3), (2, 1), (1, 0), (1, 1), 1, False),
    ("conv_1x1", 2, 8, 5, 5, 16, (1, 1), (1, 1), (0, 0), (1, 1), 1, True),
    ("conv_wide", 4, 64, 12, 12, 64, (3, 3), (1, 1), (1, 1), (1, 1), 1, False),  # Winograd-sized
    ("conv_deep", 2, 32, 6, 6, 48, (3, 3), (1, 1), (1, 1), (1, 1), 1, True),
]
for name, N, C, H, W, O, k, s, p, d, groups, bias in CONV:
    x = leaf(f"{name}.x", torch.randn(N, C, H, W))
    w = leaf(f"{name}.w", torch.randn(O, C // groups, *k) / (C // groups * k[0] * k[1]) ** 0.5)
    b = leaf(f"{name}.b", torch.randn(O)) if bias else None
    y = F.conv2d(x, w, b, stride=s, padding=p, dilation=d, groups=groups)
    g.add(f"{name}.y", y)
    add_grads(name, y, {"x": x, "w": w, "b": b})

# ---- matmul, linear, addmm ----
MM = [
    ("mm_2d", (5, 7), (7, 3)),
    ("mm_batched", (3, 4, 5), (3, 5, 2)),
    ("mm_bcast_b2d", (2, 3, 4, 5), (5, 6)),
    ("mm_bcast_a2d", (4, 5), (3, 5, 2)),
    ("mm_bcast_batch", (1, 4, 5), (3, 5, 2)),
    ("mm_bcast_4d", (2, 1, 4, 5), (3, 5, 2)),
    ("mm_vec_mat", (5,), (5, 3)),
    ("mm_mat_vec", (4, 5), (5,)),
    ("mm_dot", (5,), (5,)),
    ("mm_batched_vec", (2, 4, 5), (5,)),
    ("mm_vec_batched", (5,), (2, 5, 3)),
    ("mm_large", (64, 128), (128, 96)),
]
for name, sa, sb in MM:
    a = leaf(f"{name}.a", torch.randn(*sa))
    b = leaf(f"{name}.b", torch.randn(*sb))
    y = torch.matmul(a, b)
    g.add(f"{name}.y", y)
    add_grads(name, y, {"a": a, "b": b})

for name, sx in (("linear_2d", (4, 6)), ("linear_3d", (2, 4, 6))):
    x = leaf(f"{name}.x", torch.randn(*sx))
    w = leaf(f"{name}.w", torch.randn(3, 6))
    b = leaf(f"{name}.b", torch.randn(3))
    y = F.linear(x, w, b)
    g.add(f"{name}.y", y)
    add_grads(name, y, {"x": x, "w": w, "b": b})

s = leaf("addmm.self", torch.randn(3, 5))
m1 = leaf("addmm.m1", torch.randn(3, 4))
m2 = leaf("addmm.m2", torch.randn(4, 5))
y = torch.addmm(s, m1, m2, beta=0.5, alpha=2.0)
g.add("addmm.y", y)
add_grads("addmm", y, {"self": s, "m1": m1, "m2": m2})

# ---- pooling ----
MAXPOOL = [
    # name, shape, kernel, stride, padding, dilation, ceil_mode
    ("maxpool_k2", (2, 3, 8, 8), (2, 2), (2, 2), (0, 0), (1, 1), False),
    ("maxpool_k2_odd", (2, 3, 9, 7), (2, 2), (2, 2), (0, 0), (1, 1), False),
    ("maxpool_k3s2p1", (2, 3, 9, 9), (3, 3), (2, 2), (1, 1), (1, 1), False),
    ("maxpool_dil2", (1, 2, 10, 10), (3, 3), (1, 1), (1, 1), (2, 2), False),
    ("maxpool_ceil", (2, 3, 7, 7), (2, 2), (2, 2), (0, 0), (1, 1), True),
    ("maxpool_ceil_k3s2p1", (1, 2, 8, 8), (3, 3), (2, 2), (1, 1), (1, 1), True),
    ("maxpool_rect", (2, 2, 8, 6), (3, 2), (2, 1), (1, 0), (1, 1), False),
    ("maxpool_overlap", (1, 2, 6, 6), (3, 3), (1, 1), (0, 0), (1, 1), False),
]
for name, shape, k, st, p, d, ceil in MAXPOOL:
    x = leaf(f"{name}.x", torch.randn(*shape))
    y, idx = F.max_pool2d(x, k, st, p, d, ceil_mode=ceil, return_indices=True)
    g.add(f"{name}.y", y)
    g.add(f"{name}.idx", idx)
    add_grads(name, y, {"x": x})

AVGPOOL = [
    # name, shape, kernel, stride, padding, ceil_mode, count_include_pad
    ("avgpool_k2", (2, 3, 8, 8), (2, 2), (2, 2), (0, 0), False, True),
    ("avgpool_k3s2p1", (2, 3, 9, 9), (3, 3), (2, 2), (1, 1), False, True),
    ("avgpool_k3s2p1_nopad", (2, 3, 9, 9), (3, 3), (2, 2), (1, 1), False, False),
    ("avgpool_ceil", (2, 3, 7, 7), (3, 3), (2, 2), (1, 1), True, True),
    ("avgpool_ceil_nopad", (2, 3, 7, 7), (3, 3), (2, 2), (1, 1), True, False),
    ("avgpool_rect", (2, 2, 8, 6), (3, 2), (2, 1), (1, 0), False, True),
]
for name, shape, k, st, p, ceil, cip in AVGPOOL:
    x = leaf(f"{name}.x", torch.randn(*shape))
    y = F.avg_pool2d(x, k, st, p, ceil_mode=ceil, count_include_pad=cip)
    g.add(f"{name}.y", y)
    add_grads(name, y, {"x": x})

for name, shape, os in (("adaptive_avg_4", (2, 3, 8, 8), (4, 4)), ("adaptive_avg_1", (2, 3, 5, 7), (1, 1)),
                        ("adaptive_avg_rect", (2, 3, 8, 6), (2, 3))):
    x = leaf(f"{name}.x", torch.randn(*shape))
    y = F.adaptive_avg_pool2d(x, os)
    g.add(f"{name}.y", y)
    add_grads(name, y, {"x": x})
for name, shape, os in (("adaptive_max_2", (2, 3, 8, 8), (2, 2)), ("adaptive_max_1", (2, 3, 5, 7), (1, 1))):
    x = leaf(f"{name}.x", torch.randn(*shape))
    y = F.adaptive_max_pool2d(x, os)
    g.add(f"{name}.y", y)
    add_grads(name, y, {"x": x})

# ---- batch norm ----
BN = [
    # name, shape, training, affine, running stats
    ("bn_train", (4, 3, 5, 5), True, True, True),
    ("bn_eval", (4, 3, 5, 5), False, True, True),
    ("bn_train_2d", (8, 5), True, True, True),
    ("bn_eval_2d", (8, 5), False, True, True),
    ("bn_train_plain", (3, 4, 3, 3), True, False, False),
    ("bn_train_big", (16, 8, 16, 16), True, True, True),
]
for name, shape, training, affine, stats in BN:
    C = shape[1]
    x = leaf(f"{name}.x", torch.randn(*shape) * 2 + 0.5)
    w = leaf(f"{name}.w", torch.rand(C) + 0.5) if affine else None
    b = leaf(f"{name}.b", torch.randn(C)) if affine else None
    rm = g.add(f"{name}.rm", torch.randn(C) * 0.1) .clone() if stats else None
    rv = g.add(f"{name}.rv", torch.rand(C) + 0.5).clone() if stats else None
    y, save_mean, save_invstd = torch.ops.aten.native_batch_norm(x, w, b, rm, rv, training, 0.1, 1e-5)
    g.add(f"{name}.y", y)
    if training:
        g.add(f"{name}.save_mean", save_mean)
        g.add(f"{name}.save_invstd", save_invstd)
    if stats:
        g.add(f"{name}.rm_after", rm)
        g.add(f"{name}.rv_after", rv)
    add_grads(name, y, {"x": x, "w": w, "b": b})

g.write()
