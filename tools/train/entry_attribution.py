#!/usr/bin/env python3
"""Where does a trained compressed model keep a record, by the residue of its value?

For held-out training-mix sequences (the trainer's own generator, seed 777) and every lookup
" key = value" in them, with the record's value token at position p and residue r = p mod 8, this
prints per residue, for the last compressed layer (the retrieval layer of the micro models):
  acc        the trainer's greedy lookup accuracy (the model's own forward)
  attention  the largest query head's attention mass, at the lookup's '=', on the entry that
             holds position p (entry floor(p / S)), on the next entry and on the previous one
  gates      per branch (key, value), the gate weight (the largest over KV heads) of the entry
             slot holding each of the record's tokens: the key (p - 2), '=' (p - 1), the value
             (p), the newline (p + 1) and the next token (p + 2), each in its own entry
A residue where the query's attention leaves the value's own entry, or where neither branch
keeps a record token, is where the block layout (which tokens fall in which entry) and the gate
maps leave the record without an entry that holds both its key and its value.

Usage: entry_attribution.py MODEL_DIR [--seqs N] [--json]  (W = S models only)
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

TOKENS = ("key", "=", "value", "newline", "next")
P = 8  # the residues reported (the self-test's period for the grid)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model_dir")
    ap.add_argument("--seqs", type=int, default=256, help="held-out sequences (default 256)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    cfg = json.load(open(os.path.join(a.model_dir, "train.json")))["config"]
    comp = [i for i, s in enumerate(cfg["layers"]) if s["kind"] == "compressed"]
    if not comp:
        sys.exit(f"entry_attribution: {a.model_dir} has no compressed layer")
    li = comp[-1]
    spec = cfg["layers"][li]
    S, W = spec["S"], spec["W"]
    if W != S:
        sys.exit(f"entry_attribution: W{W}/S{S}: only W = S (one entry per token) is handled")
    params = load_params(os.path.join(a.model_dir, "params.npz"), model.init_params(cfg, 0))
    T = cfg["ctx"] // 2
    ids, _, lookups = data.batch(np.random.default_rng(777), Vocab(), a.seqs, T, dense=0.0)
    fwd = jax.jit(lambda p, i: model.forward(cfg, p, i))
    inp = jax.jit(lambda p, i: model.forward(cfg, p, i, return_inputs=True))
    logits = np.asarray(fwd(params, jnp.asarray(ids)))
    xn = inp(params, jnp.asarray(ids))[li]
    cos, sin = model.rope_tables(T, cfg["head_dim"], cfg["rope_base"])
    pr, _, (gk, gv) = model.attention_probs(cfg, spec, params["blk"][li], xn, cos, sin)
    pr, gk, gv = np.asarray(pr), np.asarray(gk), np.asarray(gv)  # [B, HK, G, T, E + T], [B, E, W, HK]
    E = gk.shape[1]
    emask = np.arange(E)[None, :] < ((np.arange(T)[:, None] + 1) // S)  # entries visible at t
    per = {r: [] for r in range(P)}
    for b in range(ids.shape[0]):
        for qp, pv in lookups[b]:
            m = pr[b, :, :, qp, :E]  # [HK, G, E]

            def mass(j):
                return float(m[:, :, j].max()) if 0 <= j < E and emask[qp, j] else 0.0

            jv = pv // S
            gates = []
            for g in (gk, gv):
                gates.append([float(g[b, (pv + d) // S, (pv + d) % S, :].max()) if (pv + d) // S < E else np.nan
                              for d in (-2, -1, 0, 1, 2)])
            per[pv % P].append((float(np.argmax(logits[b, qp]) == ids[b, qp + 1]), mass(jv), mass(jv + 1),
                                mass(jv - 1), gates[0], gates[1]))
    rows = []
    for r in range(P):
        x = per[r]
        if not x:
            continue
        rows.append({"residue": r, "lookups": len(x), "accuracy": float(np.mean([y[0] for y in x])),
                     "attention_own": float(np.mean([y[1] for y in x])),
                     "attention_next": float(np.mean([y[2] for y in x])),
                     "attention_prev": float(np.mean([y[3] for y in x])),
                     "key_gate": dict(zip(TOKENS, np.nanmean([y[4] for y in x], 0).tolist())),
                     "value_gate": dict(zip(TOKENS, np.nanmean([y[5] for y in x], 0).tolist()))})
    if a.json:
        print(json.dumps({"model": a.model_dir, "layer": li, "W": W, "S": S, "residues": rows}, indent=1))
        return
    print(f"{a.model_dir}: layer {li} (W{W}/S{S}), {sum(r['lookups'] for r in rows)} lookups")
    print("res lookups  acc % | attention: own  next  prev | key gate: " + " ".join(TOKENS) +
          " | value gate: " + " ".join(TOKENS))
    for r in rows:
        print(f"{r['residue']:3d} {r['lookups']:7d} {100 * r['accuracy']:6.1f} |            {r['attention_own']:.2f}  "
              f"{r['attention_next']:.2f}  {r['attention_prev']:.2f} |           " +
              " ".join(f"{r['key_gate'][t]:.2f}" for t in TOKENS) + " |             " +
              " ".join(f"{r['value_gate'][t]:.2f}" for t in TOKENS))


if __name__ == "__main__":
    main()
