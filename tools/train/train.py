#!/usr/bin/env python3
"""Train one small decoder with (or without) chunked compressed attention and export it for
PhaseKV: MODEL.gguf (F32, tied embeddings, the small BPE of vocab.py), gates.safetensors (the
learned per-offset gates), kv.txt (the `phasekv convert --kv` arguments), train.json (config,
loss curve, the trainer's own lookup accuracy per residue) and check_ids.json +
check_logits.f32 (the trainer's forward on one sequence, for tools/train/check_export.py) and
calib.txt (held-out training-mix text for `phasekv inspect --gates`).

Usage: train.py --model NAME [--size micro|micro3|mini|wide|wide-gqa|small] [--seed N] [--steps N] --out DIR
Models (same size, data and steps within a size):
  full          full attention in every layer
  w8s8 w8s4 w4s4  every layer compressed, learned scalar gates (per-offset maps and biases), L = 16
  w8s8-uniform  every layer compressed, uniform (mean-pooling) gates
Deterministic on the CPU for a fixed seed (numpy data and initialisation, XLA CPU kernels) on
one kind of host; XLA compiles for the host's instruction set, so another CPU (or
--xla_cpu_max_isa) trains a different model from the same seed.
--offset-heads (layer 0's two fixed-offset heads, tools/train/offset_heads.py) and --dense P
(a share of dense-recall sequences) are what make the models learn the "key = value" retrieval
within a few thousand steps (docs/VALIDATION.md); train.sh's micro6 grid uses both.
"""
import argparse
import json
import math
import os
import sys
import time

os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=true")
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import data  # noqa: E402
import model  # noqa: E402
from offset_heads import freeze_offset_update, offset_init  # noqa: E402
from safetensors_io import write_safetensors  # noqa: E402
from vocab import Vocab  # noqa: E402

SIZES = {
    # d, layers, heads, kv_heads, head_dim, ffn, sequence length, batch, steps, learning rate, L
    "micro": dict(d=64, n_layers=2, heads=4, kv_heads=4, head_dim=16, ffn=192, T=96, batch=16, steps=250,
                  lr=3e-3, L=8),
    "micro3": dict(d=64, n_layers=3, heads=4, kv_heads=4, head_dim=16, ffn=192, T=96, batch=16, steps=250,
                   lr=3e-3, L=8),
    "mini": dict(d=64, n_layers=2, heads=4, kv_heads=4, head_dim=16, ffn=192, T=64, batch=32, steps=3000,
                 lr=3e-3, L=8),
    # micro6's recipe at d 128: the issue's smallest width at micro's depth and sequence length, at a
    # third of micro's rate (at 3e-3 the full-attention models stay on the plateau for 5,000 steps)
    "wide": dict(d=128, n_layers=2, heads=4, kv_heads=4, head_dim=32, ffn=384, T=96, batch=16, steps=250,
                 lr=1e-3, L=8),
    # the same with grouped-query attention: 8 query heads of 16 sharing 4 KV heads (G = 2)
    "wide-gqa": dict(d=128, n_layers=2, heads=8, kv_heads=4, head_dim=16, ffn=384, T=96, batch=16, steps=250,
                     lr=1e-3, L=8),
    "small": dict(d=128, n_layers=4, heads=4, kv_heads=4, head_dim=32, ffn=384, T=128, batch=32, steps=3000,
                  lr=3e-3, L=16),
}
MODELS = {
    "full": None,
    "w8s8": dict(W=8, S=8, gate="scalar"),
    "w8s4": dict(W=8, S=4, gate="scalar"),
    "w4s4": dict(W=4, S=4, gate="scalar"),
    "w8s8-uniform": dict(W=8, S=8, gate="uniform"),
    # Only the last layer compressed, the ones below full attention: their outputs then carry no
    # block phase (t mod S) into the compressed layer's gate maps (the causal check's control).
    "w8s8-top": dict(W=8, S=8, gate="scalar", top_only=True),
}


def make_config(size, name, vocab):
    z = SIZES[size]
    c = MODELS[name]
    if c is None:
        layer = {"kind": "full"}
    else:
        layer = {"kind": "compressed", "W": c["W"], "S": c["S"], "L": z["L"], "gate": c["gate"]}
    layers = [dict(layer) for _ in range(z["n_layers"])]
    if c is not None and c.get("top_only"):
        layers[:-1] = [{"kind": "full"} for _ in layers[:-1]]
    return {"vocab": len(vocab), "d": z["d"], "heads": z["heads"], "kv_heads": z["kv_heads"],
            "head_dim": z["head_dim"], "ffn": z["ffn"], "eps": 1e-5, "rope_base": 10000.0, "ctx": 2 * z["T"],
            "layers": layers}


def lookup_accuracy(cfg, params, vocab, rng, n_seq, T, P, bs=16):
    """The trainer's own retrieval check: greedy hit rate of the looked-up values, by the
    residue (mod P) of the record's value token in the haystack."""
    fwd = jax.jit(lambda p, x: model.forward(cfg, p, x))
    hits, count = np.zeros(P), np.zeros(P)
    for _ in range(max(1, n_seq // bs)):
        ids, _, lookups = data.batch(rng, vocab, bs, T, dense=0.0)
        pred = np.asarray(jnp.argmax(fwd(params, jnp.asarray(ids)), -1))
        for b, lk in enumerate(lookups):
            for q, vp in lk:
                r = vp % P
                count[r] += 1
                hits[r] += pred[b, q] == ids[b, q + 1]
    return hits / np.maximum(count, 1), count


def save_params(path, params):
    """params.npz: every leaf under its tree path (what --init reads back)."""
    leaves, _ = jax.tree_util.tree_flatten_with_path(params)
    np.savez(path, **{jax.tree_util.keystr(k): np.asarray(x) for k, x in leaves})


def load_params(path, like):
    """The leaves of `like` from a params.npz by tree path; a missing leaf or another shape exits
    naming it (a file of another model may hold more, e.g. gates a full model does not have)."""
    leaves, tree = jax.tree_util.tree_flatten_with_path(like)
    out = []
    with np.load(path) as f:
        for k, x in leaves:
            name = jax.tree_util.keystr(k)
            if name not in f.files:
                sys.exit(f"train.py: {path} lacks {name} (another model or size?)")
            if f[name].shape != x.shape:
                sys.exit(f"train.py: {path}: {name} has shape {f[name].shape}, this model {x.shape}")
            out.append(jnp.asarray(f[name]))
    return jax.tree_util.tree_unflatten(tree, out)


def make_optimizer(lr, steps, constant=False):
    """AdamW (b2 0.98, weight decay 0.01) after global-norm clipping at 1, warm-up over
    min(200, steps / 10) steps, then a cosine decay to 5 % of the peak `lr` (or, with
    `constant`, the peak `lr` to the end)"""
    warmup = min(200, steps // 10)
    if constant:
        sched = optax.join_schedules([optax.linear_schedule(0.0, lr, warmup), optax.constant_schedule(lr)], [warmup])
    else:
        sched = optax.warmup_cosine_decay_schedule(0.0, lr, warmup, steps, lr * 0.05)
    return optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(sched, b2=0.98, weight_decay=0.01))


def next_token_nll(logits, ids):
    """(NLL of each next token, whether the argmax was it), for positions 0..T-2"""
    lp = jax.nn.log_softmax(logits[:, :-1], -1)
    nll = -jnp.take_along_axis(lp, ids[:, 1:, None], -1)[..., 0]
    return nll, (jnp.argmax(lp, -1) == ids[:, 1:]).astype(jnp.float32)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, choices=sorted(MODELS))
    ap.add_argument("--size", default="small", choices=sorted(SIZES))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--steps", type=int, help="training steps (default: the size's)")
    ap.add_argument("--lr", type=float, help="peak learning rate (default: the size's)")
    ap.add_argument("--short", default="", metavar="T0:N",
                    help="curriculum: the first N steps train on sequences of T0 tokens (fewer records)")
    ap.add_argument("--alternate", type=int, default=0, metavar="T0",
                    help="curriculum: every other step trains on sequences of T0 tokens (twice as many)")
    ap.add_argument("--few", default="", metavar="R:N",
                    help="curriculum: the first N steps hold R records per sequence (and R lookups)")
    ap.add_argument("--queries", type=int, default=0, help="lookups per sequence (default T/16, at least 4)")
    ap.add_argument("--with-replacement", action="store_true",
                    help="draw the lookups with replacement: a repeated key cannot be answered by elimination")
    ap.add_argument("--repeat", type=float, default=0.0, metavar="P",
                    help="share of filler lines that repeat the start of an earlier line (weight 1: induction practice)")
    ap.add_argument("--no-sep", action="store_true",
                    help='diagnostic: records "key value" without " =" (retrieval by plain one-step induction)')
    ap.add_argument("--lm-weight", type=float, default=0.1, help="loss weight of the non-lookup predictions")
    ap.add_argument("--init", default="", metavar="DIR",
                    help="start from the parameters another run of the same model and size saved (DIR/params.npz)")
    ap.add_argument("--dense", type=float, default=0.0, metavar="P",
                    help="share of training sequences that are dense recall (records, then lookups to the end, no "
                    "filler; the held-out checks stay on the mix)")
    ap.add_argument("--offset-heads", action="store_true",
                    help="layer 0's heads 0 and 1 start as fixed-offset heads (1 and 2 tokens back) and keep that "
                    "attention pattern (tools/train/offset_heads.py: what breaks the '=' plateau)")
    ap.add_argument("--out", required=True, help="output directory (created)")
    args = ap.parse_args()

    t_start = time.time()
    data.QUERIES, data.REPLACE, data.REPEAT, data.LM_WEIGHT = (args.queries, args.with_replacement, args.repeat,
                                                               args.lm_weight)
    data.SEP = not args.no_sep
    if not 0.0 <= args.dense <= 1.0:
        sys.exit(f"train.py: --dense {args.dense}: a share in [0, 1]")
    data.DENSE = args.dense
    vocab = Vocab()
    z = SIZES[args.size]
    steps = args.steps or z["steps"]
    lr = args.lr or z["lr"]
    cfg = make_config(args.size, args.model, vocab)
    params = model.init_params(cfg, args.seed)
    if args.offset_heads and args.init:
        sys.exit("train.py: --offset-heads starts a model; it cannot be combined with --init (the loaded heads "
                 "would not be the ones the update holds)")
    if args.dense > 0:
        shortest = z["T"]
        if args.short:
            shortest = min(shortest, int(args.short.split(":")[0]))
        if args.alternate:
            shortest = min(shortest, args.alternate)
        need = 1 + 7 + (4 if data.SEP else 3) * (data.DENSE_RECORDS + 1)
        if shortest < need:
            sys.exit(f"train.py: --dense needs sequences of at least {need} tokens ({data.DENSE_RECORDS} records and a "
                     f"lookup after up to 7 pads); the shortest here is {shortest}")
    u = None
    if args.offset_heads:
        params, u = offset_init(cfg, params, args.seed)
    if args.init:
        params = load_params(os.path.join(args.init, "params.npz"), params)
    opt = make_optimizer(lr, steps)
    state = opt.init(params)

    def loss_fn(p, ids, w, m):
        """(weighted loss, mean NLL of the looked-up values: m marks the '=' of each lookup)"""
        nll, _ = next_token_nll(model.forward(cfg, p, ids), ids)
        ww, mm = w[:, :-1], m[:, :-1]
        return jnp.sum(nll * ww) / jnp.sum(ww), jnp.sum(nll * mm) / jnp.sum(mm)

    def lookup_mask(ids, lookups):
        m = np.zeros(ids.shape, np.float32)
        for b, lk in enumerate(lookups):
            for q, _ in lk:
                m[b, q] = 1.0
        return jnp.asarray(m)

    @jax.jit
    def step(p, s, ids, w, m):
        (loss, lookup_nll), g = jax.value_and_grad(loss_fn, has_aux=True)(p, ids, w, m)
        upd, s = opt.update(g, s, p)
        if u is not None:
            upd = freeze_offset_update(upd, u, cfg["head_dim"])
        return optax.apply_updates(p, upd), s, loss, lookup_nll

    rng = np.random.default_rng(1000 + args.seed)
    curve = []
    t0 = time.time()
    short_T, short_n = (int(x) for x in args.short.split(":")) if args.short else (0, 0)
    few_r, few_n = (int(x) for x in args.few.split(":")) if args.few else (0, 0)
    for it in range(1, steps + 1):
        T_now = short_T if it <= short_n else z["T"]
        if args.alternate and it % 2 == 1:
            T_now = args.alternate
        ids, w, lk = data.batch(rng, vocab, z["batch"] * (z["T"] // T_now), T_now, few_r if it <= few_n else 0)
        params, state, loss, lnll = step(params, state, jnp.asarray(ids), jnp.asarray(w), lookup_mask(ids, lk))
        if it % 50 == 0 or it == steps:
            curve.append([it, float(loss), float(lnll)])
            el = time.time() - t0
            print(f"[train {args.model}/{args.size} seed {args.seed}] step {it}/{steps} loss {float(loss):.4f} "
                  f"lookup nll {float(lnll):.4f}  {el:.0f} s, eta {el / it * (steps - it):.0f} s", flush=True)
    train_s = time.time() - t0

    os.makedirs(args.out, exist_ok=True)
    strides = [s["S"] for s in cfg["layers"] if s["kind"] == "compressed"]
    P = math.lcm(*strides) if strides else 8
    acc, cnt = lookup_accuracy(cfg, params, vocab, np.random.default_rng(7), 512, z["T"], P)
    acc_short = None
    if short_T:  # the curriculum's length too (where retrieval may exist before it carries to T)
        a, c = lookup_accuracy(cfg, params, vocab, np.random.default_rng(7), 512, short_T, P)
        acc_short = round(float(np.sum(a * c) / np.sum(c)), 4)
    eval_rng = np.random.default_rng(99)
    ids, w, lk = data.batch(eval_rng, vocab, 32, z["T"], dense=0.0)
    eval_loss = float(loss_fn(params, jnp.asarray(ids), jnp.asarray(w), lookup_mask(ids, lk))[0])

    save_params(os.path.join(args.out, "params.npz"), params)
    name = f"phasekv-train-{args.model}-{args.size}-s{args.seed}"
    model.export_gguf(os.path.join(args.out, "model.gguf"), cfg, params, vocab, name)
    gates = model.gate_tensors(cfg, params)
    if gates:
        write_safetensors(os.path.join(args.out, "gates.safetensors"), gates)
    with open(os.path.join(args.out, "kv.txt"), "w") as f:
        f.write("\n".join(model.kv_specs(cfg)) + "\n")
    # The check sequence: one held-out training-mix sequence, the trainer's logits at every position.
    check_ids, _, _ = data.sample(np.random.default_rng(12345), vocab, z["T"])
    logits = np.asarray(model.forward(cfg, params, jnp.asarray(check_ids[None])), np.float32)[0]
    with open(os.path.join(args.out, "check_ids.json"), "w") as f:
        json.dump([int(i) for i in check_ids], f)
    logits.astype("<f4").tofile(os.path.join(args.out, "check_logits.f32"))
    # Calibration text for `phasekv inspect --gates`: two held-out sequences of the training mix
    # as text (without BOS; the tokenizer adds it), 2T - 1 tokens, within the model's positions.
    calib_rng = np.random.default_rng(777)
    with open(os.path.join(args.out, "calib.txt"), "w") as f:
        f.write("".join(vocab.text(data.sample(calib_rng, vocab, z["T"])[0][1:]) for _ in range(2)))
    info = {"model": args.model, "size": args.size, "seed": args.seed, "steps": steps, "config": cfg,
            "kv": model.kv_specs(cfg), "period": P, "train_s": round(train_s, 1),
            "wall_s": round(time.time() - t_start, 1), "eval_loss": eval_loss, "curve": curve,
            "lookup_acc_by_residue": [round(float(a), 4) for a in acc],
            "lookup_count_by_residue": [int(c) for c in cnt],
            "lookup_acc_mean": round(float(np.sum(acc * cnt) / np.sum(cnt)), 4),
            "lookup_acc_mean_short": acc_short, "data": {"queries": data.QUERIES, "with_replacement": data.REPLACE,
                                                         "repeat": data.REPEAT, "lm_weight": data.LM_WEIGHT,
                                                         "sep": data.SEP, "dense": data.DENSE},
            "offset_heads": bool(args.offset_heads)}
    with open(os.path.join(args.out, "train.json"), "w") as f:
        json.dump(info, f, indent=1)
    print(f"[train] {name}: eval loss {eval_loss:.4f}, lookup accuracy {info['lookup_acc_mean']:.3f} "
          f"(by residue mod {P}: {' '.join(f'{a:.2f}' for a in acc)})"
          + (f", at T {short_T}: {acc_short:.3f}" if short_T else "") + f", {train_s:.0f} s -> {args.out}")


if __name__ == "__main__":
    main()
