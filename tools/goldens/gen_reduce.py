"""Goldens for the reduce, loss and index op families (tests/ops/test_reduce.cpp,
test_loss.cpp, test_index.cpp). Writes tests/goldens/{reduce,loss,index}.bin."""
import torch
import torch.nn.functional as F

from common import Goldens

DIMS = {"all": [], "d0": [0], "d1": [1], "d2": [2], "dm1": [-1], "d02": [0, 2], "d12": [1, 2]}


def reduce_goldens():
    g = Goldens("reduce", seed=1)
    x = g.add("x", torch.randn(4, 5, 6))
    for base, t in (("", x), ("t_", x.transpose(0, 2))):  # t_: non-contiguous input
        for name, dims in DIMS.items():
            for keep in (False, True):
                k = "_k" if keep else ""
                dd = dims if dims else list(range(t.dim()))
                g.add(f"{base}sum_{name}{k}", t.sum(dd, keepdim=keep))
                g.add(f"{base}mean_{name}{k}", t.mean(dd, keepdim=keep))
                g.add(f"{base}amax_{name}{k}", t.amax(dd, keepdim=keep))
                g.add(f"{base}amin_{name}{k}", t.amin(dd, keepdim=keep))
                g.add(f"{base}var1_{name}{k}", t.var(dd, unbiased=True, keepdim=keep))
                g.add(f"{base}var0_{name}{k}", torch.var(t, dd, correction=0, keepdim=keep))
        for d in (0, 1, 2):
            g.add(f"{base}argmax_{d}", t.argmax(d))
            g.add(f"{base}argmax_{d}_k", t.argmax(d, keepdim=True))
        for d in (0, 1, 2):
            g.add(f"{base}softmax_{d}", torch.softmax(t, d))
            g.add(f"{base}log_softmax_{d}", torch.log_softmax(t, d))
    # ties for argmax (first index wins)
    g.add("ties", torch.tensor([[1.0, 3.0, 3.0, 0.0], [2.0, 2.0, 2.0, 2.0]]))
    # NCHW bias-grad style reductions
    x4 = g.add("x4", torch.randn(8, 16, 7, 7))
    g.add("x4_sum_023", x4.sum((0, 2, 3)))
    g.add("x4_mean_023", x4.mean((0, 2, 3)))
    g.add("x4_var_023", torch.var(x4, (0, 2, 3), correction=0))
    g.add("x4_amax_023", x4.amax((0, 2, 3)))
    g.add("x4_sum_13", x4.sum((1, 3)))
    # large: accuracy of float32 sums
    # the test builds the same values: ((i * 7919) % 1000) / 1000 + 0.5
    i = torch.arange(1000000, dtype=torch.float64)
    big = (torch.remainder(i * 7919, 1000) / 1000 + 0.5).float()
    g.add("big_sum", big.double().sum().float())
    g.add("big_sum_f32", big.sum())
    m = g.add("mat", torch.randn(300, 200))
    g.add("mat_sum_0", m.double().sum(0).float())
    g.add("mat_sum_1", m.double().sum(1).float())
    g.add("mat_amax_0", m.amax(0))
    g.add("mat_softmax_1", torch.softmax(m, 1))
    g.add("mat_log_softmax_0", torch.log_softmax(m, 0))
    # stability: large logits
    s = g.add("large_logits", torch.randn(16, 10) * 100)
    g.add("large_softmax", torch.softmax(s, 1))
    g.add("large_log_softmax", torch.log_softmax(s, 1))
    # integer/bool sums
    xi = g.add("xi", torch.randint(-50, 50, (6, 7)))
    g.add("xi_sum", xi.sum())
    g.add("xi_sum_1", xi.sum(1))
    g.add("xi_amax_0", xi.amax(0))
    xb = g.add("xb", torch.rand(6, 7) > 0.5)
    g.add("xb_sum_0", xb.sum(0))
    g.write()


def loss_goldens():
    g = Goldens("loss", seed=2)
    logits = g.add("logits", torch.randn(8, 5))
    target = torch.randint(0, 5, (8,))
    target[2] = -100
    target[5] = -100
    g.add("target", target)
    logits3 = g.add("logits3", torch.randn(4, 5, 3))
    target3 = torch.randint(0, 5, (4, 3))
    target3[1, 2] = -100
    g.add("target3", target3)
    for tag, lg, tg in (("", logits, target), ("3_", logits3, target3)):
        lp = torch.log_softmax(lg, 1)
        for red in ("mean", "sum", "none"):
            g.add(f"{tag}nll_{red}", F.nll_loss(lp, tg, reduction=red))
            for ls in (0.0, 0.2):
                name = f"{tag}ce_{red}_ls{int(ls * 10)}"
                x = lg.clone().requires_grad_(True)
                out = F.cross_entropy(x, tg, reduction=red, label_smoothing=ls)
                g.add(name, out)
                w = torch.arange(out.numel(), dtype=out.dtype).reshape(out.shape) * 0.1 + 1.0
                (out * w).sum().backward()
                g.add(name + "_grad", x.grad)
        g.add(f"{tag}nll_ignore1", F.nll_loss(lp, tg.clamp(min=0), ignore_index=1))
    g.write()


def index_goldens():
    g = Goldens("index", seed=3)
    a = g.add("a", torch.randn(2, 3))
    b = g.add("b", torch.randn(4, 3))
    c = g.add("c", torch.randn(2, 5))
    g.add("cat0", torch.cat([a, b], 0))
    g.add("cat1", torch.cat([a, c], 1))
    ai = g.add("ai", torch.randint(0, 9, (2, 3)))
    ad = g.add("ad", torch.randn(2, 3, dtype=torch.float64))
    g.add("cat_f_i", torch.cat([a, ai], 0))
    g.add("cat_f_d", torch.cat([a, ad], 0))
    g.add("stack0", torch.stack([a, ad.float()], 0))
    g.add("stack2", torch.stack([a, ad.float()], 2))
    x = g.add("x", torch.randn(5, 4, 3))
    idx = g.add("idx", torch.tensor([3, 0, 3, 4]))
    for d in (0, 2):
        i = idx if d == 0 else idx.clamp(max=2)
        g.add(f"isel_idx{d}", i)
        g.add(f"isel{d}", x.index_select(d, i))
    xt = x.transpose(0, 1)
    g.add("isel_t", xt.index_select(1, idx))
    gi = g.add("gidx", torch.randint(0, 4, (5, 3, 3)))
    g.add("gather1", x.gather(1, gi))
    gi0 = g.add("gidx0", torch.randint(0, 5, (2, 4, 3)))
    g.add("gather0", x.gather(0, gi0))
    src = g.add("src", torch.randn(5, 3, 3))
    g.add("scatter_add1", x.scatter_add(1, gi, src))
    g.add("index_add0", x.index_add(0, idx, torch.ones(4, 4, 3)))
    lab = g.add("labels", torch.tensor([0, 3, 1, 3]))
    g.add("one_hot", F.one_hot(lab))
    g.add("one_hot6", F.one_hot(lab, 6))
    g.write()


if __name__ == "__main__":
    reduce_goldens()
    loss_goldens()
    index_goldens()
