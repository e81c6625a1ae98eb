"""Goldens for the pointwise and in-place op families (tests/ops/test_pointwise.cpp, test_inplace.cpp).

Writes tests/goldens/pointwise.bin and tests/goldens/inplace.bin. Inputs are stored contiguous; a name
ending in "_T" is stored as the base of a transposed view (the test calls .t() on it). Shapes are chosen
to leave tails for 8- and 16-float vectors (37 columns) and to broadcast ([37], [4, 1], 0-dim numbers).
Large tensors (the OpenMP split) are tested in C++ against kiln's own float64 scalar loops instead.
"""
import math

import torch

from common import Goldens

g = Goldens("pointwise")

x = g.add("x", torch.randn(4, 37))
y = g.add("y", torch.randn(4, 37))
row = g.add("row", torch.randn(37))
col = g.add("col", torch.randn(4, 1))
xT = g.add("x_T", torch.randn(37, 4)).t()  # non-contiguous [4, 37]
pos = g.add("pos", torch.rand(4, 37) * 3 + 0.05)
special = g.add("special", torch.tensor([-2.0, -1.0, -0.0, 0.0, 1e-30, 0.5, 1.0, 3.0, 20.0, 88.0, 89.0, -88.0,
                                         -104.0, float("inf"), float("-inf"), float("nan")]))
# Rounded values so that comparisons and maximum/minimum meet ties.
xr = g.add("xr", torch.round(torch.randn(4, 37) * 2) / 2)
yr = g.add("yr", torch.round(torch.randn(4, 37) * 2) / 2)
row_r = g.add("row_r", torch.round(torch.randn(37) * 2) / 2)

unary = {
    "neg": torch.neg, "exp": torch.exp, "log": torch.log, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt,
    "abs": torch.abs, "sign": torch.sign, "relu": torch.relu,
    "gelu": lambda t: torch.nn.functional.gelu(t),
    "gelu_tanh": lambda t: torch.nn.functional.gelu(t, approximate="tanh"),
    "sigmoid": torch.sigmoid, "tanh": torch.tanh,
    "clamp": lambda t: torch.clamp(t, -0.5, 0.7),
    "clamp_min": lambda t: torch.clamp(t, min=-0.25),
    "clamp_max": lambda t: torch.clamp(t, max=0.3),
    "logical_not": torch.logical_not,
}
for name, f in unary.items():
    g.add(f"{name}(x)", f(x))
    g.add(f"{name}(x_T)", f(xT))
    g.add(f"{name}(special)", f(special))
    g.add(f"{name}(pos)", f(pos))

def bcast(a, b):
    # aten's gelu_backward wants equal shapes (broadcasting trips a oneDNN reorder in 1.13)
    return [t.contiguous() for t in torch.broadcast_tensors(a, b)]


binary = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
    "maximum": torch.maximum, "minimum": torch.minimum,
    "gelu_backward": lambda a, b: torch.ops.aten.gelu_backward(*bcast(a, b)),
    "gelu_backward_tanh": lambda a, b: torch.ops.aten.gelu_backward(*bcast(a, b), approximate="tanh"),
    # relu's derivative from its result: what torch's relu backward runs
    "relu_backward": lambda a, b: torch.ops.aten.threshold_backward(*bcast(a, b), 0),
}
for name, f in binary.items():
    g.add(f"{name}(x,y)", f(x, y))
    g.add(f"{name}(x,row)", f(x, row))
    g.add(f"{name}(col,row)", f(col, row))
    g.add(f"{name}(x_T,y)", f(xT, y))
    g.add(f"{name}(row,x_T)", f(row, xT))
for name in ["add", "sub", "mul", "div"]:
    f = binary[name]
    g.add(f"{name}(x,2.5)", f(x, 2.5))
    g.add(f"{name}(2.5,x)", f(torch.tensor(2.5), x))
g.add("maximum(xr,yr)", torch.maximum(xr, yr))
g.add("minimum(xr,yr)", torch.minimum(xr, yr))
g.add("maximum(special,0.5)", torch.maximum(special, torch.tensor(0.5)))
g.add("minimum(special,0.5)", torch.minimum(special, torch.tensor(0.5)))
g.add("div(special,special)", special / special.flip(0))

g.add("pow(pos,y)", torch.pow(pos, y))
g.add("pow(pos,row)", torch.pow(pos, row))
g.add("pow(x_T,2)", torch.pow(xT, 2))
for e in [2.0, 3.0, 0.5, -0.5, -1.0, -2.0, 1.7, 0.0]:
    g.add(f"pow(pos,{e})", torch.pow(pos, e))
    g.add(f"pow(x,{e})", torch.pow(x, e))

for name in ["eq", "ne", "lt", "le", "gt", "ge"]:
    f = getattr(torch, name)
    g.add(f"{name}(xr,yr)", f(xr, yr))
    g.add(f"{name}(xr,0.5)", f(xr, 0.5))
    g.add(f"{name}(xr,row_r)", f(xr, row_r))
    g.add(f"{name}(special,special)", f(special, special.flip(0)))

cond = g.add("cond", xr > 0)
cond_col = g.add("cond_col", col > 0)
g.add("where(cond,x,y)", torch.where(cond, x, y))
g.add("where(cond_col,x,row)", torch.where(cond_col, x, row))
g.add("where(cond,x_T,0)", torch.where(cond, xT, torch.tensor(0.0)))

# dtype promotion
i = g.add("i", torch.randint(-5, 6, (4, 37)))
i2 = g.add("i2", torch.randint(1, 6, (4, 37)))
i32 = g.add("i32", torch.randint(-5, 6, (4, 37), dtype=torch.int32))
b = g.add("b", torch.rand(4, 37) > 0.5)
x64 = g.add("x64", torch.randn(4, 37, dtype=torch.float64))
g.add("add(i,x)", i + x)
g.add("add(b,i)", b + i)
g.add("add(b,b)", b + b)
g.add("mul(b,b)", b * b)
g.add("div(i,i2)", i / i2)
g.add("add(i,2)", i + 2)
g.add("add(i,2.5)", i + 2.5)
g.add("mul(i32,3)", i32 * 3)
g.add("add(i32,i)", i32 + i)
g.add("add(x,x64)", x + x64)
g.add("sub(i,i2)", i - i2)
g.add("pow(i,i2)", torch.pow(i, i2))
g.add("pow(i,2)", torch.pow(i, 2))
g.add("maximum(i,i2)", torch.maximum(i, i2))
g.add("neg(i)", -i)
g.add("abs(i32)", torch.abs(i32))
g.add("sign(i)", torch.sign(i))
g.add("relu(i)", torch.relu(i))
g.add("clamp(i,-2,3)", torch.clamp(i, -2, 3))
g.add("clamp(i,0.5)", torch.clamp(i, min=0.5))
g.add("exp(i)", torch.exp(i))
g.add("sqrt(b)", torch.sqrt(b))
g.add("lt(i,x)", i < x)
g.add("eq(i,2)", i == 2)
g.add("where(cond,i,x)", torch.where(cond, i, x))
g.add("where(cond,i,i2)", torch.where(cond, i, i2))
g.add("logical_not(i)", torch.logical_not(i))
g.add("cast(x,int64)", x.mul(3).to(torch.int64))
g.add("cast(i,float32)", i.to(torch.float32))
g.add("cast(xr,bool)", xr.to(torch.bool))
# 16-bit floats compute in float32
g.add("add(x16,y16)", x.half() + y.half())
g.add("exp(xbf)", torch.exp(x.bfloat16()))
g.add("mul(xbf,2.5)", x.bfloat16() * 2.5)
g.add("gelu(xbf)", torch.nn.functional.gelu(x.bfloat16()))
# float64 versions of the math (scalar loop)
for name in ["exp", "log", "sqrt", "gelu", "gelu_tanh", "sigmoid", "tanh", "relu", "clamp"]:
    g.add(f"{name}(x64)", unary[name](x64))
g.add("pow(x64,3)", torch.pow(x64, 3))
g.add("div(x64,x)", x64 / x)

# relu_backward(grad, result) at zeros, -0.0, NaN and infinities of both. The reference is the where(result > 0,
# grad, 0) kiln's relu derivative always was: aten's threshold_backward (result <= 0 ? 0 : grad) would let a NaN
# result's gradient through.
def relu_grad(grad, result):
    return torch.where(result > 0, grad, torch.zeros((), dtype=grad.dtype))


g.add("relu_backward(special,special)", relu_grad(special.flip(0), special))
for name, dt in [("f64", torch.float64), ("f16", torch.float16), ("bf16", torch.bfloat16)]:
    g.add(f"relu_backward(special_{name},special_{name})", relu_grad(special.flip(0).to(dt), special.to(dt)))
g.write()

# ---- in-place ----
h = Goldens("inplace", seed=1)
s = h.add("self", torch.randn(4, 37))
o = h.add("other", torch.randn(4, 37))
t1 = h.add("t1", torch.randn(4, 37))
t2 = h.add("t2", torch.rand(4, 37) + 0.5)
r = h.add("row", torch.randn(37))
sT = h.add("self_T", torch.randn(37, 4)).t()
h.add("add_(self,other,0.3)", s.clone().add_(o, alpha=0.3))
h.add("add_(self,other)", s.clone().add_(o))
h.add("add_(self,row,-2)", s.clone().add_(r, alpha=-2))
h.add("add_(self_T,other,0.3)", sT.clone().add_(o, alpha=0.3))
h.add("mul_(self,other)", s.clone().mul_(o))
h.add("mul_(self,row)", s.clone().mul_(r))
h.add("mul_(self,0.9)", s.clone().mul_(0.9))
h.add("addcmul_(self,t1,t2,0.5)", s.clone().addcmul_(t1, t2, value=0.5))
h.add("addcmul_(self,t1,row,1)", s.clone().addcmul_(t1, r))
h.add("addcdiv_(self,t1,t2,-0.2)", s.clone().addcdiv_(t1, t2, value=-0.2))
h.add("addcdiv_(self_T,t1,t2,-0.2)", sT.clone().addcdiv_(t1, t2, value=-0.2))
h.add("lerp_(self,other,0.3)", s.clone().lerp_(o, 0.3))
h.add("lerp_(self,other,0.8)", s.clone().lerp_(o, 0.8))
h.add("lerp_(self,row,1)", s.clone().lerp_(r, 1.0))
h.add("copy_(self,row)", s.clone().copy_(r))
ii = h.add("i", torch.randint(-5, 6, (4, 37)))
ij = h.add("j", torch.randint(-5, 6, (4, 37)))
h.add("add_(i,j,3)", ii.clone().add_(ij, alpha=3))
h.add("mul_(i,j)", ii.clone().mul_(ij))
h.add("add_(self,i)", s.clone().add_(ij))
h.add("add_(self64,self)", s.double().add_(o, alpha=0.5))
h.add("add_(self16,other)", s.half().add_(o.half(), alpha=0.5))
h.write()
