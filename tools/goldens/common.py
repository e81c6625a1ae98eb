"""Writes golden files for kiln's tests with PyTorch (Debian's python3-torch 1.13).

Format (little-endian), read by tests/testing/golden.cpp:
  b"KGLD", u32 count, then per tensor:
  u16 name length, name (utf-8), u8 dtype code, u8 ndim, i64 dims[ndim], raw data (row-major)
dtype codes follow kiln::DType: 0 bool, 1 uint8, 2 int32, 3 int64, 4 float16, 5 bfloat16, 6 float32, 7 float64.
"""
import os
import struct

import torch

CODES = {torch.bool: 0, torch.uint8: 1, torch.int32: 2, torch.int64: 3, torch.float16: 4,
         torch.bfloat16: 5, torch.float32: 6, torch.float64: 7}
GOLDEN_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "goldens")


class Goldens:
    """Collects named tensors and writes them to tests/goldens/<family>.bin."""

    def __init__(self, family, seed=0):
        self.family = family
        self.tensors = {}
        torch.manual_seed(seed)

    def add(self, name, t):
        assert name not in self.tensors, name
        self.tensors[name] = t.detach().contiguous().clone()
        return t

    def write(self):
        os.makedirs(GOLDEN_DIR, exist_ok=True)
        path = os.path.join(GOLDEN_DIR, self.family + ".bin")
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(b"KGLD")
            f.write(struct.pack("<I", len(self.tensors)))
            for name, t in self.tensors.items():
                nb = name.encode()
                f.write(struct.pack("<H", len(nb)))
                f.write(nb)
                f.write(struct.pack("<BB", CODES[t.dtype], t.dim()))
                for s in t.shape:
                    f.write(struct.pack("<q", s))
                if t.dtype in (torch.float16, torch.bfloat16):
                    f.write(t.view(torch.int16).numpy().tobytes())
                else:
                    f.write(t.numpy().tobytes())
        os.replace(tmp, path)
        print(f"wrote {path}: {len(self.tensors)} tensors, {os.path.getsize(path)} bytes")
