#!/usr/bin/env python3
"""The causal check of issue 17: cyclically shift a model's per-offset gate parameters by k
window offsets (gate bias b_i and gate map Z_i become those of offset i - k mod W, for both
branches of every compressed layer) and write a new gates file. If the weak residues come from
where the learned gates look, the self-test's weak residue of the shifted model moves by +k.

Usage: shift_gates.py IN.safetensors K OUT.safetensors [--part both|bias|map] [--branch both|k|v]
                      [--layers 0,1,...]
  --part    which parameters move: the biases b_i and the maps Z_i (both, the default), or one of
            them (the other stays where it was): which of the two carries the slot preference
  --branch  the key and the value gates (both, the default), or one branch
  --layers  the compressed layers to shift (default: every one)
"""
import argparse
import os
import re
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from safetensors_io import read_safetensors, write_safetensors  # noqa: E402

GATE = re.compile(r"blk\.(\d+)\.cmp_([kv])_gate\.(bias|weight)$")  # layer, branch, kind


def shift(tensors, k, part="both", branch="both", layers=None):
    """The tensors with the selected gate parameters rolled by k along the offset axis (axis 0:
    bias [W, G], per-offset map [W, G, d]); returns (new dict, names shifted)."""
    out = dict(tensors)
    moved = []
    for name, t in tensors.items():
        m = GATE.match(name)
        if not m:
            continue
        layer, br, kind = int(m.group(1)), m.group(2), m.group(3)
        if kind == "weight" and t.ndim != 3:
            raise SystemExit(f"shift_gates: {name} is a shared gate map (no per-offset parameters to shift)")
        if layers is not None and layer not in layers:
            continue
        if branch != "both" and br != branch:
            continue
        if part != "both" and (part == "bias") != (kind == "bias"):
            continue
        out[name] = np.roll(t, k, axis=0)
        moved.append(name)
    return out, moved


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("src")
    p.add_argument("k", type=int)
    p.add_argument("dst")
    p.add_argument("--part", choices=("both", "bias", "map"), default="both")
    p.add_argument("--branch", choices=("both", "k", "v"), default="both")
    p.add_argument("--layers", default=None, help="comma-separated layer indices (default: all)")
    a = p.parse_args()
    layers = None if a.layers is None else {int(x) for x in a.layers.split(",") if x != ""}
    t = read_safetensors(a.src)
    if not any(GATE.match(n) for n in t):
        raise SystemExit(f"shift_gates: {a.src} has no gate tensors")
    t, moved = shift(t, a.k, a.part, a.branch, layers)
    if not moved:
        raise SystemExit(f"shift_gates: no gate tensor of {a.src} matches --part {a.part} --branch {a.branch}"
                         f" --layers {a.layers}")
    write_safetensors(a.dst, t)
    print(f"shift_gates: {len(moved)} tensors shifted by {a.k} offsets -> {a.dst}")


if __name__ == "__main__":
    main()
