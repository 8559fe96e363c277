"""Reading and writing the F32 safetensors files of tools/train (gates): u64 little-endian
header length, the JSON header, the data block (row-major little-endian)."""
import json

import numpy as np


def write_safetensors(path, tensors):
    """{name: array} -> F32 safetensors."""
    header, blobs, off = {}, [], 0
    for n, a in tensors.items():
        raw = np.ascontiguousarray(a, "<f4").tobytes()
        header[n] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little") + h + b"".join(blobs))


def read_safetensors(path):
    """F32 safetensors -> {name: array}; SystemExit naming the tensor for another dtype."""
    with open(path, "rb") as f:
        blob = f.read()
    n = int.from_bytes(blob[:8], "little")
    header = json.loads(blob[8:8 + n])
    base = 8 + n
    out = {}
    for name, h in header.items():
        if name == "__metadata__":
            continue
        if h["dtype"] != "F32":
            raise SystemExit(f"{path}: {name}: dtype {h['dtype']} (F32 expected)")
        a, b = h["data_offsets"]
        out[name] = np.frombuffer(blob[base + a:base + b], "<f4").reshape(h["shape"]).copy()
    return out
