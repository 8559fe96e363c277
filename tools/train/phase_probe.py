#!/usr/bin/env python3
"""Does the input of a compressed layer know its token's block phase (t mod S)?

The causal check (shift_gates.py) moves a layer's per-offset gate parameters by k slots: the
token in slot i then gets the bias and map that slot i - k had. If the layer's input x_t carries
no phase, a record k slots later gets exactly the gate weights it had before and the weak residue
translates by k. If x_t does carry the phase (a compressed layer below sees a different set of
complete entries at every slot of its block), the map Z_{i-k} was fitted to inputs of phase i - k
and now reads inputs of phase i: the gates change, and the curve need not translate.

For every layer (the first one's input, the token embeddings, is the baseline: the mix's own
layout tells the phase a little) this prints, over held-out training-mix sequences:
  probe     accuracy of a linear read-out of t mod S from the normed layer input (least squares on
            one-hot targets, fitted on half the sequences, scored on the other half; chance 1/S)
  eta2      share of the gate logits' variance explained by t mod S (per offset, head and
            branch, the median and the largest): how much of the gates' input is phase

Usage: phase_probe.py MODEL_DIR [--seqs N] [--json]
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

import data  # noqa: E402
import model  # noqa: E402
from train import load_params  # noqa: E402
from vocab import Vocab  # noqa: E402


def probe(X, y, S, half):
    """Linear least-squares read-out of y (0..S-1) from X, fitted on rows < half, scored on the rest."""
    A = np.concatenate([X, np.ones((len(X), 1))], 1).astype(np.float64)
    Y = np.eye(S)[y]
    coef, *_ = np.linalg.lstsq(A[:half], Y[:half], rcond=None)
    return float(np.mean(np.argmax(A[half:] @ coef, 1) == y[half:]))


def eta2(g, y, S):
    """Share of the variance of g [N] explained by the group means over y."""
    tot = np.var(g)
    if tot <= 0:
        return 0.0
    means = np.array([g[y == r].mean() for r in range(S)])
    counts = np.array([(y == r).sum() for r in range(S)])
    return float(np.sum(counts * (means - g.mean()) ** 2) / len(g) / tot)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model_dir")
    ap.add_argument("--seqs", type=int, default=64, help="held-out sequences (default 64)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    info = json.load(open(os.path.join(a.model_dir, "train.json")))
    cfg = info["config"]
    vocab = Vocab()
    params = load_params(os.path.join(a.model_dir, "params.npz"), model.init_params(cfg, 0))
    T = cfg["ctx"] // 2
    rng = np.random.default_rng(4242)
    ids, _, _ = data.batch(rng, vocab, a.seqs, T, dense=0.0)
    xs = jax.jit(lambda p, i: model.forward(cfg, p, i, return_inputs=True))(params, jnp.asarray(ids))
    rows = []
    comp = [s for s in cfg["layers"] if s["kind"] == "compressed"]
    if not comp:
        sys.exit(f"phase_probe: {a.model_dir} has no compressed layer")
    S, W = comp[0]["S"], comp[0]["W"]
    t0 = comp[0]["L"] + W  # skip the start, where the absolute position alone tells the phase
    for li, (spec, xn) in enumerate(zip(cfg["layers"], xs)):
        # Every layer's input, the first one included: the token embeddings' own phase content (the
        # mix's layout) is the baseline the layers above add to.
        xn = np.asarray(xn)[:, t0:, :]
        B, Tn, D = xn.shape
        y = np.tile((np.arange(t0, t0 + Tn) % S), B)
        X = xn.reshape(B * Tn, D)
        row = {"layer": li, "kind": spec["kind"], "S": S, "probe_accuracy": probe(X, y, S, (B // 2) * Tn), "chance": 1.0 / S}
        blk = params["blk"][li]
        if "cmp_k_gate.weight" in blk:
            e = []
            for br in ("k", "v"):
                Z = np.asarray(blk[f"cmp_{br}_gate.weight"])  # [W, HK, d]
                g = np.einsum("nd,whd->nwh", X, Z)
                e += [eta2(g[:, i, h], y, S) for i in range(W) for h in range(Z.shape[1])]
            row["gate_eta2_median"] = float(np.median(e))
            row["gate_eta2_max"] = float(np.max(e))
        rows.append(row)
    if a.json:
        print(json.dumps({"model": a.model_dir, "layers": rows}, indent=1))
        return
    for r in rows:
        extra = ""
        if "gate_eta2_median" in r:
            extra = f", gate logits' variance from t mod S: median {r['gate_eta2_median']:.3f}, max {r['gate_eta2_max']:.3f}"
        print(f"layer {r['layer']} ({r['kind']}): t mod {r['S']} read from its input {100 * r['probe_accuracy']:.1f} % "
              f"(chance {100 * r['chance']:.1f} %){extra}")


if __name__ == "__main__":
    main()
