#!/usr/bin/env python3
"""Trained scalar gates for a SmolLM2 retrofit that keeps retrieval through compressed entries.

A training-free retrofit (uniform pooling, one-hot planted gates) destroys SmolLM2's
key-value retrieval at every residue, so a planted *weak* residue has nothing to be weaker
than. This script trains the one thing that retrieval needs: a gate that, in every window,
puts its weight on the token that carries a record's value. It is a linear probe on the
layer's normed attention input x (the gate's own input, DESIGN.md §3: s_i = Z·x_i + b_i):

  1. Build training texts: `key = value` records among filler sentences, then demonstration
     lookups and a query (the self-test's probe shape, but with words and sentences of this
     script's own, so the self-test's probes stay held out).
  2. Run the full-attention model (numpy, llama_ref.py: no PhaseKV code) and collect x at
     every position of every compressed layer; label 1 at value tokens (the token after
     " =") and at the text's first token (the attention sink), 0 elsewhere.
  3. Fit Z per layer by ridge regression, scale it so value tokens score `--margin` above
     the median of the others, and report, on a held-out text, how often the labelled token
     holds the window's largest gate weight.
  4. Write `blk.N.cmp_{k,v}_gate.weight` [n_kv_heads, d_model] and `.bias` [W, n_kv_heads]
     (0, or -strength at the `--weak` offsets: a planted weak residue) for
     `phasekv convert --kv LAYERS:compressed:W=..,S=..,L=..,gate=scalar --gates OUT`.

Usage: value_gates.py --gguf SmolLM2.gguf --layers 1-29 --window 8 --out gates.safetensors
                      [--weak 5 --strength 30] [--texts 6] [--tokens 900] [--seed 1]
"""
import argparse
import os
import random
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import tokenizer_ref  # noqa: E402
from compressed_ref import write_safetensors  # noqa: E402
from llama_ref import Llama, load_model  # noqa: E402

# Held out from the self-test: other words, other sentences.
KEYS = ("apple river stone cloud maple tiger piano candle forest silver rocket pepper garden violet marble "
        "falcon copper meadow harbor lemon pencil castle winter island bucket saddle thunder button jacket "
        "rabbit anchor basket bottle camera carpet cherry dragon engine feather glove hammer ladder mirror "
        "needle orchid parrot pillow rubber shadow spider tunnel velvet wallet").split()
VALUES = ("orange yellow purple seven twelve north south bright quiet heavy simple frozen golden narrow rapid "
          "gentle hollow silent wooden proud sharp brave clever humble lucky noble rough smooth tender vivid "
          "ancient bitter calm curious eager fancy fierce grumpy hungry jolly lazy lively modern nervous "
          "plain polite rare shiny sleepy tiny").split()
FILLER = ["A dog barked somewhere down the street.", "The printer ran out of paper.",
          "We bought vegetables at the market.", "The sky turned grey before noon.",
          "His bicycle needed a new tyre.", "The kitchen smelled of fresh herbs.",
          "The ferry crossed the bay twice a day.", "A new bakery opened near the station.",
          "The hallway light was left on.", "They planted tomatoes in the spring.",
          "The radio played old songs all evening.", "The path through the woods was muddy.",
          "Someone left a note on the table.", "The stairs creaked under his weight.",
          "The school bell rang at nine.", "Leaves piled up along the fence.",
          "The waiter brought two glasses of water.", "Her sister moved to another town.",
          "The pond froze in January.", "The ticket office opens early.",
          "Thunder rolled over the valley.", "The farmer checked the fences.",
          "A parcel was waiting at the door.", "The window was open all night.",
          "Right.", "Sure.", "Good.", "Of course.", "Maybe later."]


def make_text(rng, n_tokens_hint, n_records=16):
    ks = rng.sample(KEYS, n_records)
    vs = rng.sample(VALUES, n_records)
    recs = [f" {k} = {v}" for k, v in zip(ks, vs)]
    lines, n = [], 0
    while n < n_tokens_hint:
        s = " " + rng.choice(FILLER)
        lines.append(s)
        n += len(s.split()) + 2
    for r in recs:
        lines.insert(rng.randrange(0, int(len(lines) * 0.8) + 1), r)
    t = rng.randrange(n_records)
    demo = rng.sample([i for i in range(n_records) if i != t], 4)
    return "\n".join(lines) + "\n" + "\n".join(recs[d] for d in demo) + "\n" + f" {ks[t]} ="


def parse_layers(text, n_layer):
    out = set()
    for part in text.split(","):
        if part == "all":
            out.update(range(n_layer))
        elif "-" in part:
            a, b = part.split("-")
            out.update(range(int(a), int(b) + 1))
        else:
            out.add(int(part))
    bad = [i for i in out if not 0 <= i < n_layer]
    if bad:
        raise SystemExit(f"--layers: {bad} outside 0..{n_layer - 1}")
    return sorted(out)


def labels(ids, sep):
    """1 at value tokens (after " =") and at the first token, which the model uses as its
    attention sink; 0 elsewhere."""
    y = np.zeros(len(ids), np.float64)
    y[0] = 1.0
    for i in range(1, len(ids)):
        if ids[i - 1] == sep:
            y[i] = 1.0
    return y


def window_top_rate(scores, y, W):
    """Of the windows holding exactly one labelled token, how often it has the largest score."""
    hit = tot = 0
    for j in range(len(y) // W):
        ys = y[j * W:(j + 1) * W]
        if ys.sum() != 1:
            continue
        tot += 1
        hit += int(np.argmax(scores[j * W:(j + 1) * W]) == int(np.argmax(ys)))
    return hit, tot


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--layers", required=True, help="compressed layers, e.g. 1-29 or all")
    ap.add_argument("--window", type=int, required=True, help="W of those layers (bias rows)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--weak", default="", help="window offsets to make weak, e.g. 5 or 2,5")
    ap.add_argument("--strength", type=float, default=30.0, help="bias subtracted at weak offsets")
    ap.add_argument("--margin", type=float, default=12.0, help="value score above the median other score")
    ap.add_argument("--texts", type=int, default=6, help="training texts (one more is held out)")
    ap.add_argument("--tokens", type=int, default=900, help="approximate tokens per text")
    ap.add_argument("--ridge", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()

    t_start = time.time()
    tok = tokenizer_ref.build_tokenizer(tokenizer_ref.load_gguf_vocab(a.gguf))
    sep = tok.encode(" =", add_special_tokens=False).ids
    if len(sep) != 1:
        raise SystemExit("' =' is not one token in this vocabulary")
    sep = sep[0]
    hp, w = load_model(a.gguf)
    layers = parse_layers(a.layers, hp["n_layer"])
    weak = [int(s) for s in a.weak.split(",") if s != ""]
    if any(not 0 <= o < a.window for o in weak):
        raise SystemExit(f"--weak {a.weak}: offsets must lie in 0..{a.window - 1}")
    model = Llama(hp, w)
    rng = random.Random(a.seed)
    d = hp["n_embd"]
    xtx = {il: np.zeros((d + 1, d + 1)) for il in layers}
    xty = {il: np.zeros(d + 1) for il in layers}
    held = None
    for t in range(a.texts + 1):
        ids = tok.encode(make_text(rng, a.tokens), add_special_tokens=False).ids
        y = labels(ids, sep)
        got = {il: None for il in layers}
        model.forward(ids, model.new_cache(len(ids)), capture=got)
        if t == a.texts:
            held = (ids, y, got)
            break
        for il in layers:
            X = np.concatenate([got[il].astype(np.float64), np.ones((len(ids), 1))], axis=1)
            xtx[il] += X.T @ X
            xty[il] += X.T @ y
        print(f"text {t + 1}/{a.texts}: {len(ids)} tokens, {int(y.sum())} values ({time.time() - t_start:.0f} s)",
              file=sys.stderr)
    ids, y, got = held
    tensors = {}
    n_kv = hp["n_head_kv"]
    worst = 1.0
    for il in layers:
        reg = a.ridge * np.eye(d + 1)
        reg[d, d] = 0
        beta = np.linalg.solve(xtx[il] + reg, xty[il])
        z, c = beta[:d], beta[d]
        s = got[il].astype(np.float64) @ z + c
        gap = np.median(s[y == 1]) - np.median(s[y == 0])
        if gap <= 0:
            raise SystemExit(f"layer {il}: the probe does not separate value tokens (gap {gap:.3f})")
        z = z * (a.margin / gap)
        hit, tot = window_top_rate(got[il].astype(np.float64) @ z, y, a.window)
        worst = min(worst, hit / max(tot, 1))
        print(f"layer {il:2d}: labelled token on top in {hit}/{tot} held-out windows", file=sys.stderr)
        bias = np.zeros((a.window, n_kv), np.float32)
        for o in weak:
            bias[o, :] = -a.strength
        Z = np.tile(z.astype(np.float32)[None, :], (n_kv, 1))
        for b in ("k", "v"):
            tensors[f"blk.{il}.cmp_{b}_gate.weight"] = Z
            tensors[f"blk.{il}.cmp_{b}_gate.bias"] = bias
    write_safetensors(a.out, tensors, metadata={"value_gates": f"layers={a.layers} W={a.window} weak={a.weak}"})
    print(f"wrote {a.out}: {len(layers)} layers, weak offsets {weak or 'none'}, worst held-out top rate "
          f"{worst:.2f} ({time.time() - t_start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
