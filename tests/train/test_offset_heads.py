#!/usr/bin/env python3
"""Checks of the trainer's offset heads and dense-recall sequences (tools/train/offset_heads.py,
data.sample_dense), against values computed here independently of the code under test:

1. offset_init: layer 0's query heads 0 and G (G = heads / kv_heads: 1, or 2 in the GQA size)
   attend one and two tokens back. The attention is
   recomputed here with numpy (RMSNorm, projections, the GGML-normal RoPE of adjacent pairs,
   causal softmax) on random token sequences; the argmax offset must be 1 (head 0) and 2
   (head G) at >= 80 % of the positions >= 3 (86-100 % measured) (the token's own content adds a little noise to
   the shared component), with at least 0.8 of the row's weight there on average.
2. freeze_offset_update: on a random update, the rows of query heads 0 and G and KV heads 0 and 1
   in layer 0's query and key weights and layer 0's attention norm get no change, the embeddings none along u, and
   every other entry is left exactly as it was.
3. train.py wires the hold in: after 3 training steps with micro6's options (--offset-heads
   --dense 0.5 --with-replacement, a W8/S8 micro model),
   the saved parameters keep offset_init's query/key rows of heads 0-1 and layer 0's attention
   norm bit for bit and the embeddings' component along u to 1e-6, while the other heads' rows
   and the embeddings did change (so the steps did train).
4. data.sample_dense: every lookup's '=' follows a record's key and the token after it is that
   record's value; length T; loss weight 1 exactly at the lookups; the start pads put the values
   on all 8 residues over a few hundred samples.
Exit 0 when all hold; prints what failed otherwise.
"""
import os
import subprocess
import sys
import tempfile

os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools", "train"))
import numpy as np  # noqa: E402

import data  # noqa: E402
import model  # noqa: E402
import offset_heads  # noqa: E402
import train  # noqa: E402
import vocab as V  # noqa: E402

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def np_attention_probs(cfg, p, ids):
    """Layer 0's attention probabilities [H, T, T] for one sequence, in numpy (float64)."""
    emb = np.asarray(p["token_embd"], np.float64)
    blk = p["blk"][0]
    x = emb[ids]
    xn = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + cfg["eps"]) * np.asarray(blk["attn_norm"], np.float64)
    T, H, HD = len(ids), cfg["heads"], cfg["head_dim"]
    q = (xn @ np.asarray(blk["attn_q"], np.float64).T).reshape(T, H, HD)
    HK = cfg["kv_heads"]
    k = (xn @ np.asarray(blk["attn_k"], np.float64).T).reshape(T, HK, HD)
    k = np.repeat(k, H // HK, axis=1)  # query head h reads KV head h // G
    ang = np.arange(T)[:, None] * cfg["rope_base"] ** (-np.arange(0, HD, 2) / HD)[None, :]
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]

    def rot(v):
        out = np.empty_like(v)
        out[..., 0::2] = v[..., 0::2] * c - v[..., 1::2] * s
        out[..., 1::2] = v[..., 0::2] * s + v[..., 1::2] * c
        return out

    q, k = rot(q), rot(k)
    sc = np.einsum("thc,shc->hts", q, k) / np.sqrt(HD)
    sc = np.where(np.tril(np.ones((T, T), bool))[None], sc, -np.inf)
    sc -= sc.max(-1, keepdims=True)
    e = np.exp(sc)
    return e / e.sum(-1, keepdims=True)


def main():
    voc = V.Vocab()
    words = np.array(voc.words)
    for size in ("micro", "small", "wide-gqa"):
        cfg = train.make_config(size, "w8s8", voc)
        params, u = offset_heads.offset_init(cfg, model.init_params(cfg, 3), 3)
        rng = np.random.default_rng(11)
        for trial in range(3):
            ids = np.concatenate([[voc.bos], rng.choice(words, size=95)]).astype(np.int64)
            pr = np_attention_probs(cfg, params, ids)
            t = np.arange(3, len(ids))
            G = cfg["heads"] // cfg["kv_heads"]
            for head, off in ((0, 1), (G, 2)):
                am = pr[head, 3:].argmax(-1)
                share = np.mean(t - am == off)
                check(share >= 0.8, f"{size}: head {head}'s strongest key is {off} back at only {share:.2f} of the "
                      f"positions (sequence {trial})")
                mass = pr[head, t, t - off].mean()
                check(mass >= 0.8, f"{size}: head {head} puts {mass:.3f} < 0.8 of its weight {off} back")

        # freeze_offset_update on a random update of the same shapes
        rng = np.random.default_rng(5)
        import jax
        import jax.numpy as jnp
        upd = jax.tree_util.tree_map(lambda a: jnp.asarray(rng.standard_normal(a.shape), jnp.float32), params)
        out = offset_heads.freeze_offset_update(upd, u, cfg["head_dim"])
        HD = cfg["head_dim"]
        G = cfg["heads"] // cfg["kv_heads"]
        for name, held in (("attn_q", (0, G)), ("attn_k", (0, 1))):
            a, b = np.asarray(out["blk"][0][name]), np.asarray(upd["blk"][0][name])
            rows = np.zeros(a.shape[0], bool)
            for h in held:
                rows[h * HD:(h + 1) * HD] = True
            check(np.all(a[rows] == 0), f"{size}: {name} rows of heads {held} still change")
            check(np.array_equal(a[~rows], b[~rows]), f"{size}: {name} rows of the other heads were altered")
        check(np.all(np.asarray(out["blk"][0]["attn_norm"]) == 0), f"{size}: layer 0's attention norm still changes")
        e = np.asarray(out["token_embd"], np.float64)
        uu = np.asarray(u, np.float64)
        check(np.max(np.abs(e @ uu)) < 1e-5, f"{size}: embedding updates keep a component along u")
        e0 = np.asarray(upd["token_embd"], np.float64)
        # what was removed lies along u only (the rest of each row's update is untouched)
        removed = e0 - e
        check(np.allclose(removed, np.outer(removed @ uu, uu), atol=1e-6),
              f"{size}: the embedding update changed off u")
        for il in range(1, len(cfg["layers"])):
            for name, a in upd["blk"][il].items():
                check(np.array_equal(np.asarray(out["blk"][il][name]), np.asarray(a)),
                      f"{size}: layer {il} {name} update altered")
        for name in ("attn_v", "attn_output", "ffn_up", "cmp_k_gate.weight"):
            check(np.array_equal(np.asarray(out["blk"][0][name]), np.asarray(upd["blk"][0][name])),
                  f"{size}: layer 0 {name} update altered")

    # train.py's step holds the heads: 3 steps, then compare with offset_init's values
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, XLA_FLAGS="--xla_cpu_multi_thread_eigen=false")
        r = subprocess.run([sys.executable, os.path.join(HERE, "..", "..", "tools", "train", "train.py"), "--model",
                            "w8s8", "--size", "micro", "--steps", "3", "--seed", "4", "--offset-heads", "--dense", "0.5",
                            "--with-replacement", "--out", tmp],
                           env=env, capture_output=True, text=True)
        check(r.returncode == 0, f"train.py --offset-heads failed: {r.stderr[-500:]}")
        if r.returncode == 0:
            cfg = train.make_config("micro", "w8s8", voc)
            p0, u = offset_heads.offset_init(cfg, model.init_params(cfg, 4), 4)
            p1 = train.load_params(os.path.join(tmp, "params.npz"), p0)
            HD = cfg["head_dim"]
            for name in ("attn_q", "attn_k"):
                a0, a1 = np.asarray(p0["blk"][0][name]), np.asarray(p1["blk"][0][name])
                check(np.array_equal(a0[:2 * HD], a1[:2 * HD]), f"train.py: {name} rows of heads 0-1 changed")
                check(not np.array_equal(a0[2 * HD:], a1[2 * HD:]), f"train.py: {name} rows of heads 2-3 did not train")
            check(np.array_equal(np.asarray(p0["blk"][0]["attn_norm"]), np.asarray(p1["blk"][0]["attn_norm"])),
                  "train.py: layer 0's attention norm changed")
            e0, e1 = np.asarray(p0["token_embd"], np.float64), np.asarray(p1["token_embd"], np.float64)
            uu = np.asarray(u, np.float64)
            check(not np.array_equal(e0, e1), "train.py: the embeddings did not train")
            check(np.max(np.abs((e1 - e0) @ uu)) < 1e-6, "train.py: the embeddings moved along u")

    # dense recall sequences
    rng = np.random.default_rng(9)
    residues = set()
    for _ in range(300):
        ids, w, lk = data.sample_dense(rng, voc, 96, 8)
        check(len(ids) == 96 and len(w) == 96, "dense: length is not T")
        recs = {}
        i = 1
        while ids[i] == voc.pad:
            i += 1
        for r in range(8):
            key, eq, val, nl = ids[i:i + 4]
            check(eq == voc.sep and nl == voc.newline, "dense: a record is not 'key = value\\n'")
            recs[int(key)] = (int(val), i + 2)
            i += 4
        check(len(lk) >= 1, "dense: no lookup")
        marked = set()
        for q, vp in lk:
            key = int(ids[q - 1])
            check(ids[q] == voc.sep and key in recs, "dense: a lookup's '=' does not follow a record key")
            check(recs[key][1] == vp and ids[q + 1] == ids[vp] == recs[key][0],
                  "dense: a lookup's answer is not its record's value")
            residues.add(vp % 8)
            marked.add(q)
        check({int(j) for j in np.nonzero(w == 1.0)[0]} == marked, "dense: loss weight 1 not exactly at the lookups")
    check(residues == set(range(8)), f"dense: values on residues {sorted(residues)} only")
    print("test_offset_heads:", "FAILED" if failures else "ok", f"({len(failures)} failures)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
