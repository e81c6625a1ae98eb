"""Goldens for kiln::optim (tests/nn/test_optim.cpp): three steps of torch.optim.SGD / AdamW on two
parameters with fixed gradients, and learning-rate schedules. Writes tests/goldens/optim.bin.

Per case: "<case>.p<i>.init", "<case>.g<i>.step<s>" (absent: no grad that step), "<case>.p<i>.step<s>"
(the parameter after step s), and the optimizer state after the last step "<case>.state.<name>.<i>"."""
import numpy as np
import torch

from common import Goldens

g = Goldens("optim", seed=0)

CASES = [
    # name, optimizer, kwargs, dtype, steps at which p1 has no grad
    ("sgd", "sgd", dict(lr=0.1), torch.float32, ()),
    ("sgd_wd", "sgd", dict(lr=0.1, weight_decay=0.01), torch.float32, ()),
    ("sgd_momentum", "sgd", dict(lr=0.1, momentum=0.9), torch.float32, ()),
    ("sgd_damp_wd", "sgd", dict(lr=0.05, momentum=0.9, dampening=0.2, weight_decay=0.01), torch.float32, ()),
    ("sgd_nesterov", "sgd", dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=5e-4), torch.float32, ()),
    ("sgd_skip", "sgd", dict(lr=0.1, momentum=0.9, weight_decay=0.01), torch.float32, (1,)),
    ("sgd_nesterov_f64", "sgd", dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=5e-4), torch.float64, ()),
    ("adamw", "adamw", dict(lr=0.01), torch.float32, ()),
    ("adamw_custom", "adamw", dict(lr=0.02, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.1), torch.float32, ()),
    ("adamw_skip", "adamw", dict(lr=0.01), torch.float32, (0, 2)),
    ("adamw_f64", "adamw", dict(lr=0.01, weight_decay=0.05), torch.float64, ()),
]
STATE = {"sgd": ["momentum_buffer"], "adamw": ["exp_avg", "exp_avg_sq"]}

for name, kind, kw, dt, skip in CASES:
    ps = [torch.randn(4, 3, dtype=dt).requires_grad_(), torch.randn(5, dtype=dt).requires_grad_()]
    for i, p in enumerate(ps):
        g.add(f"{name}.p{i}.init", p)
    opt = torch.optim.SGD(ps, **kw) if kind == "sgd" else torch.optim.AdamW(ps, **kw)
    for s in range(3):
        for i, p in enumerate(ps):
            if i == 1 and s in skip:
                p.grad = None
            else:
                p.grad = g.add(f"{name}.g{i}.step{s}", torch.randn_like(p) * 0.5)
        opt.step()
        for i, p in enumerate(ps):
            g.add(f"{name}.p{i}.step{s}", p)
    for i, p in enumerate(ps):
        st = opt.state.get(p, {})
        for key in STATE[kind]:
            if st.get(key) is not None:
                g.add(f"{name}.state.{key}.{i}", st[key])
        if "step" in st:
            g.add(f"{name}.state.step.{i}", torch.tensor(int(st["step"]), dtype=torch.int64))


def lrs(make_sched, steps, base=0.1):
    p = torch.zeros(1, requires_grad=True)
    opt = torch.optim.SGD([p], lr=base)
    sched = make_sched(opt)
    out = []
    for _ in range(steps):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return torch.tensor(out, dtype=torch.float64)


g.add("sched.step_lr", lrs(lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=3, gamma=0.5), 12))
g.add("sched.cosine", lrs(lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=10, eta_min=0.001), 11))
g.add("sched.interp", torch.tensor(np.interp(np.arange(25), [0, 5, 20], [0.0, 0.4, 0.0]), dtype=torch.float64))
g.write()
