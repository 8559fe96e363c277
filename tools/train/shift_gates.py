#!/usr/bin/env python3
"""The causal check of issue 17: cyclically shift a model's per-offset gate parameters by k
window offsets (gate bias b_i and gate map Z_i become those of offset i - k mod W, for both
branches of every compressed layer) and write a new gates file. If the weak residues come from
where the learned gates look, the self-test's weak residue of the shifted model moves by +k.

Usage: shift_gates.py IN.safetensors K OUT.safetensors
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from safetensors_io import read_safetensors, write_safetensors  # noqa: E402


def main():
    if len(sys.argv) != 4:
        raise SystemExit(__doc__)
    src, k, dst = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    t = read_safetensors(src)
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
    write_safetensors(dst, t)
    print(f"shift_gates: {shifted} tensors shifted by {k} offsets -> {dst}")


if __name__ == "__main__":
    main()
