#!/usr/bin/python3
"""PyTorch side of bench/vs_torch.sh --suite train.

Trains and evaluates the same models as `kiln train` (tutorial, resnet18,
airbench) with the same recipes (docs/training.md): optimizer, per-step lr
schedule, label smoothing, per-channel normalization and augmentation, batch
size and thread count. The models come from tools/torch_models.py (same
structure and state_dict keys as kiln's model zoo).

    /usr/bin/python3 bench/torch_train.py --model tutorial|resnet18|airbench [--width W]
        [--data cifar10|fashion-mnist] [--epochs N] [--batch B] [--lr X] [--opt sgd|adamw]
        [--seed S] [--steps N] [--threads N] [--init FILE.safetensors] [--json]

Data: CIFAR-10 from the official binary layout in $KILN_DATA/cifar-10-batches-bin
(KILN_DATA defaults to ./data; `kiln data import cifar10 ARCHIVE` writes it),
Fashion-MNIST from the gzip IDX files in /usr/share/datasets/fashion-mnist (or
$KILN_FASHION_MNIST). Batches are assembled and augmented in the training loop
with whole-batch torch ops (the way a fast PyTorch user does it on a CPU), and
that time counts in the training images/s, as the data loader's does on the
kiln side.

--json prints one object per epoch
    {"epoch", "train_loss", "test_acc", "train_img_per_s"}
and a final one
    {"model", "epochs", "train_img_per_s", "eval_img_per_s", "test_acc", "wall_s"}
test_acc is the top-1 accuracy as a fraction in [0, 1] (as kiln prints it).
train_img_per_s = training images / training wall time (evaluation
excluded); eval_img_per_s = test images / wall time of the last epoch's
evaluation (as kiln); wall_s = wall time of training + evaluation (after the
data is loaded and the model built). Training drops the last partial batch
(kiln's DataLoader with drop_last); evaluation uses batches of 500.

Run with Debian's interpreter, which has python3-torch: /usr/bin/python3.
"""
import argparse
import gzip
import json
import math
import os
import struct
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)
FASHION_MEAN = (0.2860,)
FASHION_STD = (0.3530,)
EVAL_BATCH = 500

# Per-model recipe (docs/training.md). Flags override parts of it.
RECIPES = {
    "tutorial": dict(batch=32, lr=0.02, momentum=0.9, nesterov=False, weight_decay=0.0,
                     schedule="linear", label_smoothing=0.0, augment="flip"),
    "resnet18": dict(batch=128, lr=0.1, momentum=0.9, nesterov=False, weight_decay=5e-4,
                     schedule="cosine", label_smoothing=0.0, augment="crop_flip"),
    "airbench": dict(batch=128, lr=0.2, momentum=0.9, nesterov=True, weight_decay=5e-4,
                     schedule="warmup_linear", label_smoothing=0.2, augment="altflip_translate"),
}
ADAMW_LR = 1e-3
ADAMW_WEIGHT_DECAY = 0.01


def fail(msg, code=1):
    sys.stderr.write("torch_train.py: %s\n" % msg)
    sys.exit(code)


def _import_torch():
    try:
        import torch  # noqa: F401
    except ImportError:
        fail("PyTorch is not importable from %s; install Debian's python3-torch "
             "(apt-get install -y python3-torch) and run with /usr/bin/python3" % sys.executable)
    import torch
    return torch


# ----------------------------------------------------------------------------- data

def load_cifar10(np, data_dir, train):
    """Official binary layout: records of 1 label byte + 3072 bytes (R, G, B planes of 32x32)."""
    d = os.path.join(data_dir, "cifar-10-batches-bin")
    if not os.path.isdir(d) and os.path.isfile(os.path.join(data_dir, "test_batch.bin")):
        d = data_dir
    names = ["data_batch_%d.bin" % i for i in range(1, 6)] if train else ["test_batch.bin"]
    parts = []
    for n in names:
        path = os.path.join(d, n)
        if not os.path.isfile(path):
            fail("CIFAR-10 file %s is missing; import the data set with "
                 "`build/kiln data import cifar10 ARCHIVE` (KILN_DATA=%s)" % (path, data_dir))
        raw = np.fromfile(path, dtype=np.uint8)
        if raw.size == 0 or raw.size % 3073 != 0:
            fail("%s: size %d is not a whole number of 3073-byte CIFAR-10 records" % (path, raw.size))
        parts.append(raw.reshape(-1, 3073))
    rec = np.concatenate(parts)
    labels = rec[:, 0].astype(np.int64)
    if labels.max() > 9:
        fail("%s: label %d out of range 0..9" % (d, labels.max()))
    images = np.ascontiguousarray(rec[:, 1:]).reshape(-1, 3, 32, 32)
    return images, labels


def _read_idx(np, path, want_magic):
    with gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        fail("%s: truncated IDX header" % path)
    magic = struct.unpack(">I", data[:4])[0]
    if magic != want_magic:
        fail("%s: bad IDX magic 0x%08x (want 0x%08x)" % (path, magic, want_magic))
    ndim = magic & 0xFF
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    body = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim)
    if body.size != int(np.prod(dims)):
        fail("%s: %d data bytes, the header says %d" % (path, body.size, int(np.prod(dims))))
    return body.reshape(dims).copy()  # frombuffer is read-only


def load_fashion_mnist(np, data_dir, train):
    prefix = "train" if train else "t10k"
    files = []
    for kind in ("images-idx3-ubyte", "labels-idx1-ubyte"):
        base = os.path.join(data_dir, "%s-%s" % (prefix, kind))
        path = base + ".gz" if os.path.isfile(base + ".gz") else base
        if not os.path.isfile(path):
            fail("Fashion-MNIST file %s(.gz) is missing (install Debian's dataset-fashion-mnist, "
                 "or set KILN_FASHION_MNIST)" % base)
        files.append(path)
    images = _read_idx(np, files[0], 0x00000803)
    labels = _read_idx(np, files[1], 0x00000801).astype(np.int64)
    if images.shape[0] != labels.shape[0]:
        fail("%s and %s disagree on the number of items" % (files[0], files[1]))
    return np.ascontiguousarray(images[:, None, :, :]), labels


def load_split(np, dataset, train):
    if dataset == "cifar10":
        return load_cifar10(np, os.environ.get("KILN_DATA", "./data"), train)
    return load_fashion_mnist(np, os.environ.get("KILN_FASHION_MNIST", "/usr/share/datasets/fashion-mnist"), train)


class Batches:
    """Seeded shuffling and whole-batch augmentation on uint8 images, then normalization.

    Order and augmentation are a function of (seed, epoch). Augmentations (docs/training.md):
      flip               random horizontal flip, p = 0.5 per image
      crop_flip          random crop after zero padding by 4 (black pixels), then flip
      altflip_translate  airbench: alternating flip (epoch 0: a random half of the images, fixed per
                         image; epoch e > 0: flipped iff flipped at epoch 0 XOR e is odd), then
                         translate by up to 2 pixels (reflect padding by 2, random 32x32 crop)
    """

    def __init__(self, torch, images, labels, mean, std, seed):
        self.torch = torch
        self.images = torch.from_numpy(images)  # uint8 [N, C, H, W]
        self.labels = torch.from_numpy(labels)
        self.n = self.labels.shape[0]
        c = self.images.shape[1]
        # (x/255 - mean)/std == x * scale + shift
        self.scale = torch.tensor([1.0 / (255.0 * s) for s in std]).view(1, c, 1, 1)
        self.shift = torch.tensor([-m / s for m, s in zip(mean, std)]).view(1, c, 1, 1)
        self.seed = seed
        g = torch.Generator().manual_seed(seed * 1000003 + 17)
        self.flip0 = torch.rand(self.n, generator=g) < 0.5  # airbench's epoch-0 flips, per image

    def _gen(self, epoch):
        return self.torch.Generator().manual_seed((self.seed * 1000003 + epoch * 7919 + 1) % (2 ** 63))

    def _normalize(self, x_u8):
        return x_u8.float().mul_(self.scale).add_(self.shift)

    def _augment(self, x, flip, crop_pad, translate, g):
        """Per image: horizontal flip (where `flip`), then a random crop after zero padding by
        crop_pad, or a random translate by up to `translate` pixels with reflect padding (kiln's
        DataLoader order). x: a fresh uint8 batch [B,C,H,W], modified in place. The random crop is
        one advanced-indexing copy from the unfolded (windowed) view of the padded batch."""
        torch = self.torch
        b, c, h, w = x.shape
        if flip is not None:
            f = flip.nonzero().squeeze(1)
            if f.numel():
                x[f] = x[f].flip(3)
        p = crop_pad or translate
        if not p:
            return x
        xp = x.new_zeros((b, c, h + 2 * p, w + 2 * p))  # crop: zero padding, i.e. black pixels
        xp[:, :, p:p + h, p:p + w] = x
        if translate:  # reflect padding (F.pad's "reflect", edge not repeated), columns then rows
            for k in range(1, p + 1):
                xp[:, :, p:p + h, p - k] = x[:, :, :, k]
                xp[:, :, p:p + h, p + w - 1 + k] = x[:, :, :, w - 1 - k]
            for k in range(1, p + 1):
                xp[:, :, p - k, :] = xp[:, :, p + k, :]
                xp[:, :, p + h - 1 + k, :] = xp[:, :, p + h - 1 - k, :]
        dy = torch.randint(0, 2 * p + 1, (b,), generator=g)
        dx = torch.randint(0, 2 * p + 1, (b,), generator=g)
        windows = xp.unfold(2, h, 1).unfold(3, w, 1)  # [B, C, 2p+1, 2p+1, H, W], a view
        return windows[torch.arange(b), :, dy, dx]

    def batches(self, batch, drop_last):
        return self.n // batch if drop_last else (self.n + batch - 1) // batch

    def epoch(self, epoch, batch, augment, shuffle=True, drop_last=False, max_batches=None):
        torch = self.torch
        g = self._gen(epoch)
        order = torch.randperm(self.n, generator=g) if shuffle else torch.arange(self.n)
        nb = self.batches(batch, drop_last)
        if max_batches is not None:
            nb = min(nb, max_batches)
        for i in range(nb):
            idx = order[i * batch:(i + 1) * batch]
            x = self.images.index_select(0, idx)
            y = self.labels.index_select(0, idx)
            if augment == "flip":
                x = self._augment(x, torch.rand(idx.shape[0], generator=g) < 0.5, 0, 0, g)
            elif augment == "crop_flip":
                x = self._augment(x, torch.rand(idx.shape[0], generator=g) < 0.5, 4, 0, g)
            elif augment == "altflip_translate":
                flip = self.flip0.index_select(0, idx)
                if epoch % 2 == 1:
                    flip = ~flip
                x = self._augment(x, flip, 0, 2, g)
            x = self._normalize(x)
            yield x.contiguous(), y


# ----------------------------------------------------------------------------- model, recipe

def build_model(torch, name, width, in_channels, num_classes, image_size):
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    try:
        import torch_models as tm
    except ImportError as e:
        fail("cannot import tools/torch_models.py (the PyTorch twins of kiln's models): %s" % e)
    try:
        return tm.create(name, width=width, in_channels=in_channels, num_classes=num_classes, image_size=image_size)
    except ValueError as e:
        fail(str(e), 2)


def load_safetensors(torch, np, path):
    """Reads a safetensors file (8-byte little-endian header size, JSON header, raw data)."""
    dtypes = {"F32": np.float32, "F64": np.float64, "F16": np.float16, "I64": np.int64,
              "I32": np.int32, "U8": np.uint8, "I8": np.int8, "BOOL": np.bool_}
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        fail("%s: too short for a safetensors file" % path)
    n = struct.unpack("<Q", blob[:8])[0]
    if 8 + n > len(blob):
        fail("%s: header size %d runs past the end of the file" % (path, n))
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    base = 8 + n
    out = {}
    for key, meta in header.items():
        if key == "__metadata__":
            continue
        if meta["dtype"] not in dtypes:
            fail("%s: tensor %s has dtype %s, which this reader does not know" % (path, key, meta["dtype"]))
        start, end = meta["data_offsets"]
        arr = np.frombuffer(blob, dtype=dtypes[meta["dtype"]], count=(end - start) // np.dtype(dtypes[meta["dtype"]]).itemsize,
                            offset=base + start)
        out[key] = torch.from_numpy(arr.reshape(meta["shape"]).copy())
    return out


def load_init(torch, np, model, path):
    sd = load_safetensors(torch, np, path)
    own = model.state_dict()
    unexpected = sorted(k for k in sd if k not in own)
    missing = sorted(k for k in own if k not in sd and not k.endswith("num_batches_tracked"))
    if unexpected or missing:
        fail("%s does not match the model: missing %s, unexpected %s" % (path, missing, unexpected))
    for k, v in sd.items():
        if tuple(v.shape) != tuple(own[k].shape):
            fail("%s: %s has shape %s, the model wants %s" % (path, k, list(v.shape), list(own[k].shape)))
    model.load_state_dict({k: v.to(own[k].dtype) for k, v in sd.items()}, strict=False)


def lr_at(schedule, peak, step, total):
    """Learning rate of training step `step` (0-based) of `total` (docs/training.md)."""
    if schedule == "linear":  # np.interp(step, [0, total], [peak, 0])
        return peak * max(0.0, (total - step) / total)
    if schedule == "cosine":
        return peak * 0.5 * (1.0 + math.cos(math.pi * step / total))
    # warmup_linear: np.interp(step, [0, warm, total], [0.2*peak, peak, 0]) with warm = total // 4
    # (at least 1), as kiln's PiecewiseLinearLR in src/cli/train.cpp
    if total < 2:  # too short for a warm-up: constant, as kiln
        return peak
    warm = min(max(1, total // 4), total - 1)
    if step <= 0:
        return 0.2 * peak
    if step < warm:
        return peak * (0.2 + 0.8 * step / warm)
    if step >= total:
        return 0.0
    return peak * (total - step) / (total - warm)


# ----------------------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, choices=sorted(RECIPES))
    ap.add_argument("--width", type=float, default=1.0, help="airbench width multiplier")
    ap.add_argument("--data", default="cifar10", choices=["cifar10", "fashion-mnist"])
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch", type=int, default=None, help="default: the model's recipe")
    ap.add_argument("--lr", type=float, default=None, help="peak lr; default: the recipe's")
    ap.add_argument("--opt", default="sgd", choices=["sgd", "adamw"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=None,
                    help="at most N training steps per epoch and N test batches (speed runs)")
    ap.add_argument("--threads", type=int, default=None, help="default: $OMP_NUM_THREADS, else 2")
    ap.add_argument("--workers", type=int, default=None, help="accepted for kiln's flag set; unused")
    ap.add_argument("--init", default=None, help="initial weights: a safetensors file with the model's keys")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    for name in ("epochs", "batch", "steps", "threads"):
        v = getattr(a, name)
        if v is not None and v <= 0:
            fail("--%s must be positive, got %s" % (name, v), 2)
    if a.width <= 0:
        fail("--width must be positive, got %s" % a.width, 2)

    threads = a.threads or int(os.environ.get("OMP_NUM_THREADS", "2") or 2)
    os.environ["OMP_NUM_THREADS"] = str(threads)  # before torch starts its pools
    torch = _import_torch()
    import numpy as np
    torch.set_num_threads(threads)

    r = dict(RECIPES[a.model])
    batch = a.batch or r["batch"]
    if a.opt == "adamw":
        peak = a.lr if a.lr is not None else ADAMW_LR
    else:
        peak = a.lr if a.lr is not None else r["lr"]

    t_load = time.perf_counter()
    train_x, train_y = load_split(np, a.data, True)
    test_x, test_y = load_split(np, a.data, False)
    if a.data == "cifar10":
        mean, std = CIFAR10_MEAN, CIFAR10_STD
    else:
        mean, std = FASHION_MEAN, FASHION_STD
    train = Batches(torch, train_x, train_y, mean, std, a.seed)
    test = Batches(torch, test_x, test_y, mean, std, a.seed)
    load_s = time.perf_counter() - t_load

    torch.manual_seed(a.seed)
    model = build_model(torch, a.model, a.width, train_x.shape[1], 10, train_x.shape[2])
    if a.init:
        load_init(torch, np, model, a.init)
    params = list(model.parameters())
    if a.opt == "adamw":
        opt = torch.optim.AdamW(params, lr=peak, weight_decay=ADAMW_WEIGHT_DECAY)
    else:
        opt = torch.optim.SGD(params, lr=peak, momentum=r["momentum"], nesterov=r["nesterov"],
                              weight_decay=r["weight_decay"])
    F = torch.nn.functional

    steps_per_epoch = train.batches(batch, drop_last=True)  # training drops the last partial batch
    if steps_per_epoch == 0:
        fail("--batch %d is larger than the %d training images" % (batch, train.n), 2)
    if a.steps:
        steps_per_epoch = min(steps_per_epoch, a.steps)
    total_steps = steps_per_epoch * a.epochs
    if not a.json:
        print("torch_train.py: %s%s on %s (%d train, %d test images), %d epoch(s) x %d steps, batch %d, "
              "%s lr %g (%s), torch %s, %d thread(s); data loaded in %.1f s"
              % (a.model, " width %g" % a.width if a.model == "airbench" else "", a.data, train.n, test.n,
                 a.epochs, steps_per_epoch, batch, a.opt, peak, r["schedule"], torch.__version__, threads,
                 load_s), flush=True)

    def evaluate():
        model.eval()
        correct = seen = 0
        t0 = time.perf_counter()
        with torch.no_grad():
            for x, y in test.epoch(0, EVAL_BATCH, None, shuffle=False, max_batches=a.steps):
                correct += int((model(x).argmax(1) == y).sum())
                seen += y.shape[0]
        return correct, seen, time.perf_counter() - t0

    t_run = time.perf_counter()
    train_imgs = train_s = 0.0
    eval_ips = 0.0
    step = 0
    acc = 0.0
    for epoch in range(a.epochs):
        model.train()
        loss_sum = 0.0
        n_loss = 0
        imgs = 0
        t0 = time.perf_counter()
        losses = []
        for x, y in train.epoch(epoch, batch, r["augment"], drop_last=True, max_batches=steps_per_epoch):
            lr = lr_at(r["schedule"], peak, step, total_steps)
            for group in opt.param_groups:
                group["lr"] = lr
            out = model(x)
            loss = F.cross_entropy(out, y, label_smoothing=r["label_smoothing"])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses.append(loss.detach())
            imgs += y.shape[0]
            step += 1
        if losses:
            loss_sum = float(torch.stack(losses).sum())
            n_loss = len(losses)
        ep_s = time.perf_counter() - t0
        train_imgs += imgs
        train_s += ep_s
        correct, seen, es = evaluate()
        eval_ips = seen / es  # the final line reports the last evaluation's speed, as kiln does
        acc = correct / max(seen, 1)
        rec = {"epoch": epoch + 1, "train_loss": round(loss_sum / max(n_loss, 1), 6), "test_acc": round(acc, 6),
               "train_img_per_s": round(imgs / ep_s, 2)}
        if a.json:
            print(json.dumps(rec), flush=True)
        else:
            print("epoch %d/%d: train loss %.4f, test acc %.2f%%, train %.1f img/s, eval %.1f img/s"
                  % (epoch + 1, a.epochs, rec["train_loss"], 100 * acc, imgs / ep_s, seen / es), flush=True)
    wall = time.perf_counter() - t_run
    final = {"model": a.model, "epochs": a.epochs, "train_img_per_s": round(train_imgs / train_s, 2),
             "eval_img_per_s": round(eval_ips, 2), "test_acc": round(acc, 6), "wall_s": round(wall, 3)}
    if a.json:
        print(json.dumps(final), flush=True)
    else:
        print("final: test acc %.2f%%, train %.1f img/s, eval %.1f img/s, wall %.1f s"
              % (100 * acc, final["train_img_per_s"], final["eval_img_per_s"], wall), flush=True)


if __name__ == "__main__":
    main()
