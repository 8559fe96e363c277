"""A small Llama-family decoder in JAX with DESIGN.md section 3 compressed attention memories.

Conventions are the ones PhaseKV reads from a llama GGUF (tests/reference/llama_ref.py):
weights [out, in] (y = x @ W.T), RMSNorm v / sqrt(mean(v^2) + eps) * w, GGML "normal" RoPE
(adjacent pairs (x[2i], x[2i+1]) rotate by pos * base^(-2i/hd)), GQA (query head h reads KV
head h // (H / H_kv)), SwiGLU, LM head tied to the token embedding.

A compressed layer (kind "compressed", W, S, L, gate "scalar" or "uniform"): per KV head and
branch B in {k, v}, entry j pools the tokens at positions p = (j+1)S-W+i, i = 0..W-1 (p < 0:
empty, no weight), with weights a = softmax_i(s_i), s_i = Z_i . x_p + b_i on the block's normed
input x_p (one gate map Z_i and bias b_i per offset: the phase paper's scalar gates, PhaseKV's
gate=scalar,gate_maps=offset), over the layer's own key (rotated at its own position,
rope=token) and value. A query at t sees the entries j < floor((t+1)/S) and its last L exact
tokens in one softmax. "uniform": s = 0 (mean pooling, no parameters).
"""
import math

import jax
import jax.numpy as jnp
import numpy as np


def init_params(cfg, seed):
    rng = np.random.default_rng(seed)
    V, D, H, HK, HD, F = (cfg[k] for k in ("vocab", "d", "heads", "kv_heads", "head_dim", "ffn"))
    NL = len(cfg["layers"])

    def rnd(*shape, std):
        return (rng.standard_normal(shape) * std).astype(np.float32)

    out_std = 1.0 / math.sqrt(2 * NL)
    p = {"token_embd": rnd(V, D, std=1.0 / math.sqrt(D)), "output_norm": np.ones(D, np.float32), "blk": []}
    for spec in cfg["layers"]:
        b = {
            "attn_norm": np.ones(D, np.float32),
            "attn_q": rnd(H * HD, D, std=1.0 / math.sqrt(D)),
            "attn_k": rnd(HK * HD, D, std=1.0 / math.sqrt(D)),
            "attn_v": rnd(HK * HD, D, std=1.0 / math.sqrt(D)),
            "attn_output": rnd(D, H * HD, std=out_std / math.sqrt(H * HD)),
            "ffn_norm": np.ones(D, np.float32),
            "ffn_gate": rnd(F, D, std=1.0 / math.sqrt(D)),
            "ffn_up": rnd(F, D, std=1.0 / math.sqrt(D)),
            "ffn_down": rnd(D, F, std=out_std / math.sqrt(F)),
        }
        if spec["kind"] == "compressed" and spec.get("gate") == "scalar":
            W = spec["W"]
            for br in ("k", "v"):
                b[f"cmp_{br}_gate.bias"] = np.zeros((W, HK), np.float32)
                b[f"cmp_{br}_gate.weight"] = rnd(W, HK, D, std=0.02)
        p["blk"].append(b)
    return jax.tree_util.tree_map(jnp.asarray, p)


def rope_tables(T, hd, base):
    """cos/sin [T, hd/2]: angles in float64, then float32 (as the references compute them)."""
    inv = base ** (-np.arange(0, hd, 2, dtype=np.float64) / hd)
    ang = np.arange(T, dtype=np.float64)[:, None] * inv[None, :]
    return jnp.asarray(np.cos(ang).astype(np.float32)), jnp.asarray(np.sin(ang).astype(np.float32))


def rope(x, cos, sin):
    """x [B, T, n, hd]: adjacent pairs rotate (GGML normal mode)."""
    x0, x1 = x[..., 0::2], x[..., 1::2]
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    r0 = x0 * c - x1 * s
    r1 = x0 * s + x1 * c
    return jnp.stack([r0, r1], axis=-1).reshape(x.shape)


def rmsnorm(x, w, eps):
    return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps) * w


def pool(spec, blk, xn, k, v):
    """Entries of a compressed layer: K_hat, V_hat [B, E, HK, hd] for E = T // S, and the
    gate weights [B, E, W, HK] per branch (for analysis)."""
    B, T = xn.shape[:2]
    W, S = spec["W"], spec["S"]
    E = T // S
    pos = (np.arange(E)[:, None] + 1) * S - W + np.arange(W)[None, :]  # [E, W]
    valid = jnp.asarray(pos >= 0)
    pc = np.maximum(pos, 0)
    out, weights = [], []
    for br, payload in (("k", k), ("v", v)):
        if spec.get("gate", "uniform") == "scalar":
            # s[b, p, i, h] = Z_i[h] . x_p + b_i[h], gathered at slot i of entry j: p = pos[j, i]
            s_all = jnp.einsum("btd,whd->btwh", xn, blk[f"cmp_{br}_gate.weight"]) + blk[f"cmp_{br}_gate.bias"]
            s = s_all[:, pc, np.arange(W)[None, :], :]  # [B, E, W, HK]
        else:
            s = jnp.zeros((B, E, W, payload.shape[2]), xn.dtype)
        s = jnp.where(valid[None, :, :, None], s, -jnp.inf)
        a = jax.nn.softmax(s, axis=2)
        a = jnp.where(valid[None, :, :, None], a, 0.0)
        gathered = payload[:, pc]  # [B, E, W, HK, hd]
        out.append(jnp.einsum("bewh,bewhc->behc", a, gathered))
        weights.append(a)
    return out[0], out[1], weights


def attention_probs(cfg, spec, blk, xn, cos, sin):
    """The layer's attention: probabilities p [B, HK, G, T, N] and the values they weigh
    [B, N', HK, hd] as a list (full: N = T over the tokens' values; compressed: N = E + T, the
    entries' pooled values then the exact tokens'), plus the gate weights (None for full)."""
    B, T, _ = xn.shape
    H, HK, HD = cfg["heads"], cfg["kv_heads"], cfg["head_dim"]
    G = H // HK
    q = rope((xn @ blk["attn_q"].T).reshape(B, T, H, HD), cos, sin)
    k = rope((xn @ blk["attn_k"].T).reshape(B, T, HK, HD), cos, sin)
    v = (xn @ blk["attn_v"].T).reshape(B, T, HK, HD)
    qg = q.reshape(B, T, HK, G, HD)
    scale = 1.0 / math.sqrt(HD)
    t = np.arange(T)
    exact = jnp.einsum("bthgc,bphc->bhgtp", qg, k) * scale  # [B, HK, G, T, T]
    if spec["kind"] == "full":
        mask = t[None, :] <= t[:, None]
        sc = jnp.where(jnp.asarray(mask), exact, -jnp.inf)
        return jax.nn.softmax(sc, axis=-1), [v], None
    L, S = spec["L"], spec["S"]
    kh, vh, gw = pool(spec, blk, xn, k, v)
    E = kh.shape[1]
    ent = jnp.einsum("bthgc,behc->bhgte", qg, kh) * scale  # [B, HK, G, T, E]
    emask = np.arange(E)[None, :] < ((t[:, None] + 1) // S)
    xmask = (t[None, :] <= t[:, None]) & (t[None, :] > t[:, None] - L)
    sc = jnp.concatenate([jnp.where(jnp.asarray(emask), ent, -jnp.inf),
                          jnp.where(jnp.asarray(xmask), exact, -jnp.inf)], axis=-1)
    # A row with nothing visible (L = 0 before the first entry) gets output 0.
    any_vis = jnp.asarray(emask.any(-1) | xmask.any(-1))
    p = jax.nn.softmax(jnp.where(any_vis[:, None], sc, 0.0), axis=-1)
    p = jnp.where(any_vis[:, None], p, 0.0)
    return p, [vh, v], gw


def attention(cfg, spec, blk, xn, cos, sin):
    B, T, _ = xn.shape
    p, vals, gw = attention_probs(cfg, spec, blk, xn, cos, sin)
    o, n0 = 0.0, 0
    for val in vals:  # the value rows in the probabilities' order, summed in that order
        n = val.shape[1]
        o = o + jnp.einsum("bhgtp,bphc->bthgc", p[..., n0:n0 + n], val)
        n0 += n
    return o.reshape(B, T, -1), gw


def forward(cfg, params, ids, return_gates=False, return_inputs=False):
    """ids [B, T] -> logits [B, T, V] (float32); with return_gates also the per-layer gate
    weights of the compressed layers; with return_inputs (instead of logits) every layer's
    normed attention input, what its gates read."""
    B, T = ids.shape
    cos, sin = rope_tables(T, cfg["head_dim"], cfg["rope_base"])
    eps = cfg["eps"]
    x = params["token_embd"][ids]
    gates, inputs = [], []
    for spec, blk in zip(cfg["layers"], params["blk"]):
        xn = rmsnorm(x, blk["attn_norm"], eps)
        inputs.append(xn)
        o, gw = attention(cfg, spec, blk, xn, cos, sin)
        gates.append(gw)
        x = x + o @ blk["attn_output"].T
        xn = rmsnorm(x, blk["ffn_norm"], eps)
        x = x + (jax.nn.silu(xn @ blk["ffn_gate"].T) * (xn @ blk["ffn_up"].T)) @ blk["ffn_down"].T
    if return_inputs:
        return inputs
    x = rmsnorm(x, params["output_norm"], eps)
    logits = x @ params["token_embd"].T
    return (logits, gates) if return_gates else logits


def kv_specs(cfg):
    """`phasekv convert --kv` arguments for the model's layers."""
    out = []
    for i, s in enumerate(cfg["layers"]):
        if s["kind"] == "full":
            out.append(f"{i}:full")
        else:
            gate = s.get("gate", "uniform")
            extra = ",gate_maps=offset" if gate == "scalar" else ""
            out.append(f"{i}:compressed:W={s['W']},S={s['S']},L={s['L']},gate={gate}{extra}")
    return out


def export_gguf(path, cfg, params, vocab, name):
    import gguf
    p = jax.tree_util.tree_map(lambda a: np.asarray(a, np.float32), params)
    a = "llama"
    w = gguf.GGUFWriter(path, a)
    w.add_name(name)
    w.add_uint32(f"{a}.block_count", len(cfg["layers"]))
    w.add_uint32(f"{a}.context_length", cfg["ctx"])
    w.add_uint32(f"{a}.embedding_length", cfg["d"])
    w.add_uint32(f"{a}.feed_forward_length", cfg["ffn"])
    w.add_uint32(f"{a}.attention.head_count", cfg["heads"])
    w.add_uint32(f"{a}.attention.head_count_kv", cfg["kv_heads"])
    w.add_float32(f"{a}.attention.layer_norm_rms_epsilon", cfg["eps"])
    w.add_float32(f"{a}.rope.freq_base", cfg["rope_base"])
    w.add_uint32(f"{a}.rope.dimension_count", cfg["head_dim"])
    w.add_uint32(f"{a}.vocab_size", len(vocab))
    w.add_file_type(0)  # ALL_F32
    f = vocab.gguf_fields()
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(f["pre"])
    w.add_token_list(f["tokens"])
    w.add_token_types(f["types"])
    w.add_token_merges(f["merges"])
    w.add_bos_token_id(f["bos"])
    w.add_eos_token_id(f["eos"])
    w.add_add_bos_token(True)
    w.add_tensor("token_embd.weight", p["token_embd"])
    for il, b in enumerate(p["blk"]):
        for n in ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate", "ffn_up",
                  "ffn_down"):
            w.add_tensor(f"blk.{il}.{n}.weight", b[n])
    w.add_tensor("output_norm.weight", p["output_norm"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def gate_tensors(cfg, params):
    """The --gates safetensors content: blk.N.cmp_{k,v}_gate.{bias [W, HK], weight [W, HK, d]}."""
    out = {}
    for il, (s, b) in enumerate(zip(cfg["layers"], params["blk"])):
        if s["kind"] == "compressed" and s.get("gate") == "scalar":
            for br in ("k", "v"):
                out[f"blk.{il}.cmp_{br}_gate.bias"] = np.asarray(b[f"cmp_{br}_gate.bias"], np.float32)
                out[f"blk.{il}.cmp_{br}_gate.weight"] = np.asarray(b[f"cmp_{br}_gate.weight"], np.float32)
    return out
