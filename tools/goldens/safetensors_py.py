"""A tiny safetensors reader/writer with struct + json + torch (Debian has no `safetensors` module),
used to check that kiln's checkpoints open in Python and that kiln reads files written by Python.

  /usr/bin/python3 safetensors_py.py summary FILE   prints {"metadata": {...}, "tensors": {name:
      {"dtype": "float32", "shape": [..], "sum": float, "first": float}}} as one JSON line
"""
import json
import struct
import sys

import torch

DTYPES = {"F32": torch.float32, "F64": torch.float64, "BF16": torch.bfloat16, "F16": torch.float16,
          "I64": torch.int64, "I32": torch.int32, "U8": torch.uint8, "BOOL": torch.bool}
NAMES = {v: k for k, v in DTYPES.items()}
VIEW_AS = {torch.bfloat16: torch.int16, torch.float16: torch.int16}


def tensor_bytes(t):
    t = t.detach().contiguous()
    if t.dtype in VIEW_AS:
        t = t.view(VIEW_AS[t.dtype])
    return t.numpy().tobytes()


def save(path, tensors, metadata=None, header_order=None):
    """tensors: dict name -> tensor, data laid out in dict order; header_order: key order in the JSON."""
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        b = tensor_bytes(t)
        header[name] = {"dtype": NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    if header_order:
        header = {k: header[k] for k in header_order}
    if metadata:
        header = {"__metadata__": metadata, **header}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def load(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    metadata = header.pop("__metadata__", {})
    body = data[8 + n:]
    out = {}
    for name, info in header.items():
        b, e = info["data_offsets"]
        dt = DTYPES[info["dtype"]]
        raw = bytearray(body[b:e])
        if dt in VIEW_AS:
            t = torch.frombuffer(raw, dtype=VIEW_AS[dt]).view(dt) if raw else torch.empty(0, dtype=dt)
        else:
            t = torch.frombuffer(raw, dtype=dt) if raw else torch.empty(0, dtype=dt)
        out[name] = t.reshape(info["shape"])
    return out, metadata


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "summary":
        sys.exit(__doc__)
    tensors, metadata = load(sys.argv[2])
    summary = {}
    for name, t in tensors.items():
        summary[name] = {"dtype": str(t.dtype).replace("torch.", ""), "shape": list(t.shape),
                         "sum": float(t.double().sum()), "first": float(t.flatten()[0].double()) if t.numel() else 0.0}
    print(json.dumps({"metadata": metadata, "tensors": summary}))
