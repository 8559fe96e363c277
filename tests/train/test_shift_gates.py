#!/usr/bin/env python3
"""Checks of tools/train/shift_gates.py (the causal check's gate shift and its parts), on a
hand-made gates file whose every entry names its own layer, branch, kind, offset and position,
so the expected result of each option is written out here entry by entry:

1. K=3, defaults: every gate tensor's offset axis rolled by 3 (offset i holds what offset
   i - 3 mod W held), every other tensor (an entry norm) untouched.
2. --part bias / --part map: only the biases / only the maps move.
3. --branch k, --layers 1: only layer 1's key-branch tensors move.
4. K=W is the identity; a shared (2-D) gate map and a selection that matches nothing are refused
   (exit status != 0).
Exit 0 when all hold; prints what failed otherwise.
"""
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
TOOLS = os.path.join(HERE, "..", "..", "tools", "train")
sys.path.insert(0, TOOLS)
from safetensors_io import read_safetensors, write_safetensors  # noqa: E402

W, G, D = 8, 2, 3
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def code(layer, br, kind, off):
    # a distinct number per (layer, branch, kind, offset); position within the offset's slice added
    return 1000 * layer + 100 * (br == "v") + 50 * (kind == "weight") + off


def make():
    t = {}
    for layer in (0, 1):
        for br in ("k", "v"):
            b = np.zeros((W, G), np.float32)
            m = np.zeros((W, G, D), np.float32)
            for i in range(W):
                b[i] = code(layer, br, "bias", i) + 0.01 * np.arange(G)
                m[i] = code(layer, br, "weight", i) + 0.001 * np.arange(G * D).reshape(G, D)
            t[f"blk.{layer}.cmp_{br}_gate.bias"] = b
            t[f"blk.{layer}.cmp_{br}_gate.weight"] = m
    t["blk.1.cmp_entry_norm.weight"] = np.arange(4, dtype=np.float32)
    return t


def expected(src, name, k):
    """Offset i of the shifted tensor holds offset (i - k) mod W of the source, written out."""
    s = src[name]
    e = np.empty_like(s)
    for i in range(W):
        e[i] = s[(i - k) % W]
    return e


def run(tmp, k, *opts):
    src = os.path.join(tmp, "in.safetensors")
    dst = os.path.join(tmp, "out.safetensors")
    if os.path.exists(dst):
        os.remove(dst)
    r = subprocess.run([sys.executable, os.path.join(TOOLS, "shift_gates.py"), src, str(k), dst, *opts],
                       capture_output=True, text=True)
    return r.returncode, (read_safetensors(dst) if r.returncode == 0 else None)


def moved_set(src, out, k):
    moved, wrong = set(), []
    for n in src:
        if np.array_equal(out[n], src[n]):
            continue
        if n.endswith("entry_norm.weight") or not np.array_equal(out[n], expected(src, n, k)):
            wrong.append(n)
        moved.add(n)
    return moved, wrong


def main():
    src = make()
    with tempfile.TemporaryDirectory() as tmp:
        write_safetensors(os.path.join(tmp, "in.safetensors"), src)
        gates = {n for n in src if "_gate." in n}
        cases = [
            ((), gates),
            (("--part", "bias"), {n for n in gates if n.endswith("bias")}),
            (("--part", "map"), {n for n in gates if n.endswith("weight")}),
            (("--branch", "k", "--layers", "1"), {"blk.1.cmp_k_gate.bias", "blk.1.cmp_k_gate.weight"}),
        ]
        for opts, want in cases:
            rc, out = run(tmp, 3, *opts)
            check(rc == 0, f"K=3 {' '.join(opts) or '(defaults)'}: exit 0")
            if rc != 0:
                continue
            moved, wrong = moved_set(src, out, 3)
            check(moved == want and not wrong,
                  f"K=3 {' '.join(opts) or '(defaults)'}: moved exactly {sorted(want)} (got {sorted(moved)}, wrong {wrong})")
        # a hand-checked entry: offset 0 of layer 0's key bias after K=3 is offset 5's (code 5)
        rc, out = run(tmp, 3)
        check(rc == 0 and out["blk.0.cmp_k_gate.bias"][0, 0] == np.float32(5.0), "offset 0 holds offset 5 after K=3")
        rc, out = run(tmp, W)
        check(rc == 0 and all(np.array_equal(out[n], src[n]) for n in src), "K=W is the identity")
        rc, _ = run(tmp, 3, "--layers", "7")
        check(rc != 0, "a selection that matches nothing is refused")
        bad = dict(src)
        bad["blk.0.cmp_k_gate.weight"] = np.zeros((G, D), np.float32)
        write_safetensors(os.path.join(tmp, "in.safetensors"), bad)
        rc, _ = run(tmp, 3)
        check(rc != 0, "a shared (2-D) gate map is refused")
    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
