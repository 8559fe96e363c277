"""Diagnostic (not part of the grid): dense multi-query associative recall without filler.

A sequence is R records " key = value\\n" (or " key value\\n" with --sep 0), then Q lookups of
them drawn with replacement, the loss on the looked-up values only (Q per sequence: dense
supervision, as in Zoology's MQAR). It shows which part of the training mix a model of a given
size can learn in how many steps; docs/VALIDATION.md has its runs. Logged every 100 steps: the
training batch's lookup NLL and greedy accuracy, and the same on 32 held-out sequences with the
'=' (the format the self-test probes).

Usage: recall_diag.py [--size micro] [--steps N] [--lr X] [--constant-lr] [--qk-lr-mult M]
                      [--R 8] [--Q 16] [--sep 0|1] [--nosep-frac P] [--init PARAMS.npz]
                      [--save PARAMS.npz] [--offset-init [--freeze-offset]] [--aux-periodic P]

Attempts at the '=' plateau (docs/VALIDATION.md has the runs): --offset-init starts layer 0's
heads 0 and 1 as content-independent heads that attend one and two tokens back (the
previous-token and two-back heads the composed circuit needs; tools/train/offset_heads.py),
--freeze-offset also holds their attention pattern during training (this is what works: train.py
--offset-heads), --aux-periodic P replaces a share P of the training sequences by random
sequences of period 2 or 3 (supervised after the first period), which a one-layer head solves by
looking 1 or 2 tokens back, so those heads would get a direct gradient (it did not help).
"""
import argparse
import math
import os
import sys
import time

os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402

import model  # noqa: E402
from offset_heads import freeze_offset_update, offset_init  # noqa: E402
import train  # noqa: E402
import vocab as V  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="micro", choices=sorted(train.SIZES))
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--lr", type=float, default=3e-3, help="peak learning rate (warm-up over min(200, steps / 10) steps, then a cosine decay to 5 %%)")
    ap.add_argument("--constant-lr", action="store_true", help="no cosine decay: the peak rate after the warm-up")
    ap.add_argument("--qk-lr-mult", type=float, default=1.0,
                    help="learning-rate multiplier for the attention's query and key weights (where the attention "
                    "pattern is learned)")
    ap.add_argument("--R", type=int, default=8, help="records per sequence")
    ap.add_argument("--Q", type=int, default=16, help="lookups per sequence (with replacement)")
    ap.add_argument("--B", type=int, default=16, help="batch")
    ap.add_argument("--sep", type=int, default=1, choices=(0, 1), help="records 'key = value' (1) or 'key value' (0)")
    ap.add_argument("--nosep-frac", type=float, default=0.0, help="share of sequences without the '='")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--init", help="start from this params.npz (train.py's or this script's)")
    ap.add_argument("--save", help="write the final parameters here")
    ap.add_argument("--offset-init", action="store_true",
                    help="layer 0's heads 0 and 1 start as fixed-offset heads (1 and 2 tokens back)")
    ap.add_argument("--freeze-offset", action="store_true",
                    help="with --offset-init: keep those two heads' query and key rows, layer 0's attention norm and "
                    "the embeddings' shared component fixed during training")
    ap.add_argument("--aux-periodic", type=float, default=0.0,
                    help="share of training sequences that are random sequences of period 2 or 3")
    a = ap.parse_args()
    if a.R < 1 or a.Q < 1 or a.steps < 1 or not 0.0 <= a.nosep_frac <= 1.0 or not 0.0 < a.qk_lr_mult < 1e3 \
            or not 0.0 <= a.aux_periodic < 1.0:
        sys.exit("recall_diag.py: --R, --Q, --steps must be >= 1, --nosep-frac in [0, 1], --qk-lr-mult in (0, 1000), --aux-periodic in [0, 1)")
    voc = V.Vocab()
    words = np.array(voc.words)
    if 2 * a.R > len(words):
        sys.exit(f"recall_diag.py: --R {a.R} needs {2 * a.R} distinct words, the vocabulary has {len(words)}")
    cfg = train.make_config(a.size, "full", voc)
    params = model.init_params(cfg, a.seed)
    if a.freeze_offset and not a.offset_init:
        sys.exit("recall_diag.py: --freeze-offset needs --offset-init")
    if a.offset_init and a.init:
        sys.exit("recall_diag.py: --offset-init starts a model; it cannot be combined with --init")
    u = None
    if a.offset_init:
        params, u = offset_init(cfg, params, a.seed)
    if a.init:
        params = train.load_params(a.init, params)
    opt = train.make_optimizer(a.lr, a.steps, a.constant_lr)
    if a.qk_lr_mult != 1.0:  # Adam's update is proportional to the rate: scaling it scales the rate
        labels = jax.tree_util.tree_map_with_path(
            lambda path, _: "qk" if getattr(path[-1], "key", None) in ("attn_q", "attn_k") else "rest", params)
        opt = optax.chain(opt, optax.transforms.partition({"qk": optax.scale(a.qk_lr_mult), "rest": optax.identity()},
                                                          labels))
    state = opt.init(params)
    T = 1 + 4 * (a.R + a.Q)

    def sample(rng, sep):
        kv = rng.choice(words, size=2 * a.R, replace=False)
        keys, vals = kv[:a.R], kv[a.R:]
        mid = [voc.sep] if sep else []
        ids, w = [voc.bos], np.zeros(T, np.float32)
        for i in rng.permutation(a.R):
            ids += [int(keys[i])] + mid + [int(vals[i]), voc.newline]
        for i in rng.choice(a.R, size=a.Q):
            ids += [int(keys[i])] + mid
            w[len(ids) - 1] = 1.0  # the prediction made here is the value
            ids += [int(vals[i]), voc.newline]
        ids += [voc.pad] * (T - len(ids))
        return np.array(ids, np.int32), w

    def periodic(rng):
        per = int(rng.integers(2, 4))
        ids = np.array([voc.bos] + list(np.resize(rng.choice(words, size=per, replace=False), T - 1)), np.int32)
        w = np.zeros(T, np.float32)
        w[per:T - 1] = a.Q / (T - 1 - per)  # the prediction at t is ids[t + 1]; as much weight as a recall sequence
        return ids, w

    def one(rng, force_sep):
        if not force_sep and a.aux_periodic > 0 and rng.random() < a.aux_periodic:
            return periodic(rng)
        return sample(rng, force_sep or (a.sep == 1 and rng.random() >= a.nosep_frac))

    def batch(rng, n, force_sep=False):
        ids, w = zip(*(one(rng, force_sep) for _ in range(n)))
        return jnp.asarray(np.stack(ids)), jnp.asarray(np.stack(w))

    def loss_fn(p, ids, w):
        nll, hit = train.next_token_nll(model.forward(cfg, p, ids), ids)
        ww = w[:, :-1]
        return jnp.sum(nll * ww) / jnp.sum(ww), jnp.sum(hit * ww) / jnp.sum(ww)

    @jax.jit
    def step(p, s, ids, w):
        (loss, acc), g = jax.value_and_grad(loss_fn, has_aux=True)(p, ids, w)
        upd, s = opt.update(g, s, p)
        if a.freeze_offset:
            upd = freeze_offset_update(upd, u, cfg["head_dim"])
        return optax.apply_updates(p, upd), s, loss, acc

    evaluate = jax.jit(loss_fn)
    rng, eval_rng = np.random.default_rng(1 + a.seed), np.random.default_rng(5)
    t0 = time.time()
    for it in range(1, a.steps + 1):
        params, state, loss, acc = step(params, state, *batch(rng, a.B))
        if it % 100 == 0 or it == a.steps:
            el, ea = evaluate(params, *batch(eval_rng, 32, force_sep=True))
            print(f"step {it}/{a.steps} lookup nll {float(loss):.3f} acc {float(acc):.3f} | held out, with '=': "
                  f"nll {float(el):.3f} acc {float(ea):.3f} (ln R = {math.log(a.R):.2f}) {time.time() - t0:.0f} s",
                  flush=True)
    if a.save:
        train.save_params(a.save, params)


if __name__ == "__main__":
    main()
