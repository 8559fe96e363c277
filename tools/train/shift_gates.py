#!/usr/bin/env python3
"""The causal check of issue 17: cyclically shift a model's per-offset gate parameters by k
window offsets (gate bias b_i and gate map Z_i become those of offset i - k mod W, for both
branches of every compressed layer) and write a new gates file. If the weak residues come from
where the learned gates look, the self-test's weak residue of the shifted model moves by +k.

Usage: shift_gates.py IN.safetensors K OUT.safetensors
"""
import json
import sys

import numpy as np


def read(path):
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
            raise SystemExit(f"shift_gates: {name}: dtype {h['dtype']} (F32 expected)")
        a, b = h["data_offsets"]
        out[name] = np.frombuffer(blob[base + a:base + b], "<f4").reshape(h["shape"]).copy()
    return out


def write(path, tensors):
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


def main():
    if len(sys.argv) != 4:
        raise SystemExit(__doc__)
    src, k, dst = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    t = read(src)
    shifted = 0
    for name in t:
        # bias [W, G] and per-offset map [W, G, d]: axis 0 is the window offset
        if ".cmp_k_gate." in name or ".cmp_v_gate." in name:
            if name.endswith(".weight") and t[name].ndim != 3:
                raise SystemExit(f"shift_gates: {name} is a shared gate map (no per-offset parameters to shift)")
            t[name] = np.roll(t[name], k, axis=0)
            shifted += 1
    if not shifted:
        raise SystemExit(f"shift_gates: {src} has no gate tensors")
    write(dst, t)
    print(f"shift_gates: {shifted} tensors shifted by {k} offsets -> {dst}")


if __name__ == "__main__":
    main()
