"""Layer 0's first two KV heads as fixed-offset heads (1 and 2 tokens back), their parameters held.

Why: the self-test's records are "key = value", so the value sits two tokens after its key and
every lookup ends on the same token '='. Retrieval then needs a layer-0 head at the value that
looks two tokens back (to its key), one at the lookup's '=' that looks one back, and a layer-1
head that compares what the two copied; each is useless without the others, and the models of
docs/VALIDATION.md sat on that plateau for 20,000 steps. Starting the two layer-0 heads as
(nearly) content-independent offset heads and holding the parameters that set their pattern
(their value and output weights, and everything else, train) removes the chicken-and-egg:
recall_diag.py's dense '=' recall goes from chance to 100 % in ~2,500 steps. Started but not held, the heads drift to
content-based patterns within a few thousand steps and the plateau stays.

The export is unaffected: these are ordinary weights of an ordinary Llama layer.
"""
import sys

import jax.numpy as jnp
import numpy as np


def offset_init(cfg, params, seed):
    """Layer 0's KV heads 0 and 1, with the first query head of each one's group (query heads 0 and
    G = heads / kv_heads; 0 and 1 without GQA), as heads looking 1 and 2 tokens back: every token embedding gets a
    shared component along a unit vector u, and those heads' query and key rows read only u, with
    RoPE phases set so that the score q_t . k_s peaks at t - s = 1 (KV head 0) and 2 (KV head 1). Only
    the first three frequency pairs are used (the others change too slowly to tell neighbouring
    offsets apart). Nearly content-independent: q and k scale with u . RMSNorm(x), which varies a
    little with each token (at d 64 the peak is at the intended offset at 86-98 % of positions
    right after init, at d 128 at all). Returns (params, u)."""
    rng = np.random.default_rng(1000 + seed)
    D, HD, HK = cfg["d"], cfg["head_dim"], cfg["kv_heads"]
    G = cfg["heads"] // HK
    if HK < 2 or cfg["heads"] != G * HK:
        sys.exit(f"--offset-heads needs at least 2 KV heads and heads a multiple of them "
                 f"(here {cfg['heads']} heads, {HK} KV heads)")
    u = rng.standard_normal(D)
    u /= np.linalg.norm(u)
    emb = np.asarray(params["token_embd"], np.float64)
    emb = emb + np.linalg.norm(emb, axis=1).mean() * u[None, :]  # as large as a typical embedding
    inv = cfg["rope_base"] ** (-np.arange(0, HD, 2, dtype=np.float64) / HD)
    amp = 1.6  # score gap to the neighbouring offsets ~10 (d 64) to ~19 (d 128) after RMSNorm and 1/sqrt(hd)
    blk = dict(params["blk"][0])
    wq, wk = np.array(blk["attn_q"], np.float64), np.array(blk["attn_k"], np.float64)
    for kvh, off in ((0, 1), (1, 2)):  # KV heads 0 and 1, each with the first query head of its group
        head = kvh * G
        qv, kv = np.zeros(HD), np.zeros(HD)
        for pr in range(3):
            # q pair (A, 0) rotated by t*th, k pair A(cos ph, sin ph) rotated by s*th: the dot is
            # A^2 cos((s - t) th + ph), largest where t - s = ph / th
            qv[2 * pr] = amp
            kv[2 * pr], kv[2 * pr + 1] = amp * np.cos(off * inv[pr]), amp * np.sin(off * inv[pr])
        wq[head * HD:(head + 1) * HD] = np.outer(qv, u)
        wk[kvh * HD:(kvh + 1) * HD] = np.outer(kv, u)
    blk["attn_q"], blk["attn_k"] = jnp.asarray(wq, jnp.float32), jnp.asarray(wk, jnp.float32)
    p = dict(params)
    p["token_embd"] = jnp.asarray(emb, jnp.float32)
    p["blk"] = [blk] + list(params["blk"][1:])
    return p, jnp.asarray(u, jnp.float32)


def freeze_offset_update(upd, u, head_dim):
    """The update with the offset heads' parameters held: no change to layer 0's query and key rows
    of the offset heads (query heads 0 and G, KV heads 0 and 1) or its attention norm, none to the embeddings along u. (The attention pattern
    is then held only approximately: the rest of each embedding still trains, which moves the RMS
    scaling a little; in a compressed layer 0 the pooled entries also compete in the softmax.)"""
    nq, nk = upd["blk"][0]["attn_q"].shape[0], upd["blk"][0]["attn_k"].shape[0]
    if nq % nk or nk < 2 * head_dim:
        raise ValueError("freeze_offset_update: needs at least 2 KV heads and heads a multiple of them "
                         "(offset_init's condition)")
    G = nq // nk
    qhead, khead = jnp.arange(nq) // head_dim, jnp.arange(nk) // head_dim
    qrows = (qhead != 0) & (qhead != G)  # the offset heads' query rows (heads 0 and G) are held
    b0 = dict(upd["blk"][0])
    b0["attn_q"] = b0["attn_q"] * qrows[:, None]
    b0["attn_k"] = b0["attn_k"] * (khead >= 2)[:, None]
    b0["attn_norm"] = jnp.zeros_like(b0["attn_norm"])
    out = dict(upd)
    out["blk"] = [b0] + list(upd["blk"][1:])
    e = upd["token_embd"]
    out["token_embd"] = e - (e @ u)[:, None] * u[None, :]
    return out
