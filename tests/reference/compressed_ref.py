#!/usr/bin/env python3
"""Independent NumPy reference for PhaseKV's per-layer attention memories (full, sliding, compressed).

Written from DESIGN.md section 3 only; it shares no code with PhaseKV's C++ sources. Only numpy,
gguf (GGUFReader / GGUFWriter / gguf.quants) and the stdlib are used. The Llama block itself
(GGUF tensor names, weights [out, in], RMSNorm, RoPE, GQA, SwiGLU, tied LM head) comes from
llama_ref.py in this folder; everything about attention memory is implemented here.

Model conventions (inherited from llama_ref.py)
-----------------------------------------------
* Weights are dequantized to float32; a weight is [out, in] in numpy order, y = x @ W.T.
* rmsnorm(v) = v / sqrt(mean(v^2) + eps) * weight.
* RoPE is GGML "normal" (non-NeoX) mode: within each head the ADJACENT pairs (x[2i], x[2i+1]),
  i < rope_dim/2, rotate by angle pos * base^(-2i/rope_dim). Angles in float64, then float32.
* GQA: query head h reads KV head h // (n_head / n_head_kv). SwiGLU MLP. LM head = output.weight,
  or token_embd.weight when output.weight is absent (tied embeddings).
* All activations, projections, scores and softmaxes are float32.

Memory kinds (per layer; every rule applies per KV head)
--------------------------------------------------------
t is the 0-based absolute position of the query token.
* full:                  the query at t sees the exact K,V of tokens 0..t.
* sliding(L), L >= 1:    the query at t sees the exact K,V of tokens max(0, t-L+1)..t.
* compressed(W, S, L, gate="uniform"), W >= 1, S >= 1, L >= 0:
    - Entry j covers the W slots at positions (j+1)S-W .. (j+1)S-1 (slot i <-> position
      (j+1)S-W+i). Positions < 0 are EMPTY slots: payload 0 and gate logit -inf.
      For W = S this is the partition [jS, jS+S); for W > S windows overlap; for W < S some
      tokens are in no entry.
    - Uniform gate: every valid slot has gate logit 0, empty slots -inf, and the weights are
      a = softmax over the W slots. Hence a_i = 1/W for a full window and 1/n_valid for the
      first windows when W > S (an empty slot gets weight exactly 0 and contributes nothing;
      it does NOT dilute the mean).
    - Payload = the layer's own projections (shared payload): V_hat_j = sum_i a_i * v_i and
      K_hat_j = sum_i a_i * k_i, with the key convention chosen by --rope / "rope":
        rotate_tokens ("token", default): k_i is each token's key rotated at ITS OWN position;
                                          K_hat_j is used as is.
        rotate_entry  ("entry"):          k_i is the UN-rotated key; the pooled K_hat_j is then
                                          rotated at position j*S (no entry RMSNorm).
    - Pooling precision: float32. The weights a_i are computed in float64 and rounded to float32;
      the weighted sum is accumulated in float32 (batch path: slot order i = 0..W-1; streaming
      path: an online-softmax accumulator, running max / denominator / weighted sum).
    - Entry j is emitted when token (j+1)S-1 has been processed, so the query at t sees every
      complete entry j < floor((t+1)/S) -- including the entry completed by token t itself --
      PLUS the exact K,V of tokens t-L+1..t (clipped at 0), all in ONE softmax over the
      concatenated scores. Recent tokens are deliberately covered twice: no dedupe.
    - L < S-1 is accepted here (the C++ validator rejects it unless declared intentional).
* Scores: q_rot . k / sqrt(head_dim); the query is rotated at its own position t.
* Optional sink: a layer may carry "sink": [n_head floats] (one per QUERY head, or one scalar for
  all heads). The sink is an extra logit in the softmax denominator with no value:
      p_n = exp(s_n) / (exp(sink) + sum_m exp(s_m)),  out = sum_n p_n v_n.
  It is compared to the already-scaled scores (it is not divided by sqrt(head_dim)).
* A query that sees no key at all (only possible for compressed with L = 0 before the first entry
  exists, e.g. t < S-1) gets attention output 0 (with or without a sink).

Two independent formulations are implemented:
  batch  -- O(T^2): for every query t the visible key/value set is built explicitly from the rules
            above and entries are pooled directly from their slot list. This is the default and
            what the CLI writes.
  stream -- a state machine fed in chunks (or token by token): exact-token ring, emitted entries,
            and one online-softmax accumulator per open window.
--self-check asserts that they agree, plus the invariants of DESIGN.md section 3.

CLI
---
  compressed_ref.py --gguf PATH --layers SPEC --ids IDS.json --out OUT.f32 [--rope token|entry]
      SPEC: a JSON list (inline text or a file path) with one object per layer, e.g.
        [{"kind": "full"}, {"kind": "sliding", "L": 8},
         {"kind": "compressed", "W": 8, "S": 4, "L": 4, "gate": "uniform"}]
      A single object (not a list) applies to every layer. Optional per-layer keys:
      "rope": "token"|"entry" (overrides --rope), "sink": [n_head floats] or a number.
      IDS.json: a JSON list of token ids (or {"ids": [...]}).
      OUT.f32: the logits of EVERY position, raw little-endian float32, shape [T, vocab].
  compressed_ref.py --make-tiny OUT.gguf [--seed N]   write a tiny random llama GGUF (F32 weights)
  compressed_ref.py --self-check [--gguf PATH]        run the invariants (tiny random model default)
"""
import argparse
import json
import os
import sys
import tempfile
import time
from collections import deque

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama_ref import Llama, load_model  # noqa: E402

ROPE_TOKEN, ROPE_ENTRY = "rotate_tokens", "rotate_entry"
_ROPE_NAMES = {"token": ROPE_TOKEN, "tokens": ROPE_TOKEN, ROPE_TOKEN: ROPE_TOKEN,
               "entry": ROPE_ENTRY, ROPE_ENTRY: ROPE_ENTRY}


# ----------------------------------------------------------------------------- layer specs

def parse_layers(spec, n_layer, n_head, default_rope="token"):
    """Validate and normalise a layer spec (list of dicts, or one dict for every layer)."""
    if isinstance(spec, dict):
        spec = [spec] * n_layer
    if not isinstance(spec, list) or len(spec) != n_layer:
        raise SystemExit(f"--layers needs a list of {n_layer} layer objects (got {spec!r:.200})")
    out = []
    for il, d in enumerate(spec):
        if not isinstance(d, dict) or "kind" not in d:
            raise SystemExit(f"layer {il}: expected an object with a 'kind' (got {d!r})")
        kind = d["kind"]
        lay = {"kind": kind}
        if kind == "full":
            allowed = {"kind", "sink"}
        elif kind == "sliding":
            allowed = {"kind", "L", "sink"}
            lay["L"] = int(d["L"])
            if lay["L"] < 1:
                raise SystemExit(f"layer {il}: sliding needs L >= 1")
        elif kind == "compressed":
            allowed = {"kind", "W", "S", "L", "gate", "rope", "sink"}
            lay["W"], lay["S"], lay["L"] = int(d["W"]), int(d["S"]), int(d["L"])
            lay["gate"] = d.get("gate", "uniform")
            if lay["W"] < 1 or lay["S"] < 1 or lay["L"] < 0:
                raise SystemExit(f"layer {il}: compressed needs W >= 1, S >= 1, L >= 0")
            if lay["gate"] != "uniform":
                raise SystemExit(f"layer {il}: only gate 'uniform' is implemented (got {lay['gate']!r})")
            rope = d.get("rope", default_rope)
            if rope not in _ROPE_NAMES:
                raise SystemExit(f"layer {il}: rope must be 'token' or 'entry' (got {rope!r})")
            lay["rope"] = _ROPE_NAMES[rope]
        else:
            raise SystemExit(f"layer {il}: unknown kind {kind!r} (full | sliding | compressed)")
        extra = set(d) - allowed
        if extra:
            raise SystemExit(f"layer {il}: unknown keys {sorted(extra)} for kind {kind!r}")
        sink = d.get("sink")
        if sink is None:
            lay["sink"] = None
        else:
            s = np.asarray(sink, dtype=np.float32)
            s = np.full(n_head, s, np.float32) if s.ndim == 0 else s
            if s.shape != (n_head,):
                raise SystemExit(f"layer {il}: sink needs {n_head} values (one per query head)")
            lay["sink"] = s
        out.append(lay)
    return out


# ----------------------------------------------------------------------------- pooling

def uniform_slot_weights(j, W, S):
    """Positions of the W slots of entry j and their uniform-gate softmax weights (float32)."""
    pos = np.arange((j + 1) * S - W, (j + 1) * S)
    logits = np.where(pos >= 0, 0.0, -np.inf)
    e = np.exp(logits - logits.max())  # the last slot is always valid, so max = 0
    return pos, (e / e.sum()).astype(np.float32)


def pool_entry_direct(kpool, v, j, W, S):
    """Batch pooling of entry j: sum_i a_i * x_i over its slots, float32, slot order.

    kpool, v: [T, n_kv, hd] (keys already in the convention's form). Empty slots have a_i = 0 and
    payload 0, so they are skipped."""
    pos, a = uniform_slot_weights(j, W, S)
    kh = np.zeros(kpool.shape[1:], np.float32)
    vh = np.zeros(v.shape[1:], np.float32)
    for p, ai in zip(pos, a):
        if p >= 0:
            kh += ai * kpool[p]
            vh += ai * v[p]
    return kh, vh


class OnlineAccumulator:
    """Open-window accumulator: online softmax over slot logits (all 0 for the uniform gate)."""

    def __init__(self, shape):
        self.m = np.float32(-np.inf)
        self.d = np.float32(0.0)
        self.k = np.zeros(shape, np.float32)
        self.v = np.zeros(shape, np.float32)

    def add(self, logit, k, v):
        logit = np.float32(logit)
        m_new = max(self.m, logit)
        c = np.float32(np.exp(self.m - m_new))  # exp(-inf) = 0 on the first add
        e = np.float32(np.exp(logit - m_new))
        self.d = self.d * c + e
        self.k = self.k * c + e * k
        self.v = self.v * c + e * v
        self.m = m_new

    def result(self):
        return self.k / self.d, self.v / self.d


# ----------------------------------------------------------------------------- the model

class CompressedLlama:
    def __init__(self, hp, w, layers):
        self.hp, self.w, self.layers = hp, w, layers
        self.base = Llama(hp, w)  # rmsnorm / rope helpers and the full-attention cross-check
        self.scale = np.float32(1.0 / np.sqrt(hp["head_dim"]))

    # -- shared pieces
    def _qkv(self, il, x, pos):
        hp, w = self.hp, self.w
        n, hd = x.shape[0], hp["head_dim"]
        b = f"blk.{il}."
        h = self.base.rmsnorm(x, w[b + "attn_norm.weight"])
        q = (h @ w[b + "attn_q.weight"].T).reshape(n, hp["n_head"], hd)
        k = (h @ w[b + "attn_k.weight"].T).reshape(n, hp["n_head_kv"], hd)
        v = (h @ w[b + "attn_v.weight"].T).reshape(n, hp["n_head_kv"], hd)
        return self.base.rope(q, pos), k, self.base.rope(k, pos), v

    def _rope_one(self, x, p):
        """Rotate one [n_kv, hd] vector set at position p."""
        return self.base.rope(x[None], [p])[0]

    def _attend(self, q, keys, vals, sink):
        """q: [n_head, hd]; keys, vals: [n, n_kv, hd] -> [n_head, hd] (one softmax per head)."""
        hp = self.hp
        group = hp["n_head"] // hp["n_head_kv"]
        out = np.zeros((hp["n_head"], hp["head_dim"]), np.float32)
        if keys.shape[0] == 0:
            return out  # nothing visible: output 0 (see docstring)
        for hq in range(hp["n_head"]):
            kh = hq // group
            s = (keys[:, kh, :] @ q[hq]) * self.scale
            m = s.max() if sink is None else max(s.max(), sink[hq])
            e = np.exp(s - m)
            den = e.sum(dtype=np.float32)
            if sink is not None:
                den += np.exp(sink[hq] - m)
            out[hq] = (e @ vals[:, kh, :]) / den
        return out

    def _finish_layer(self, il, x, attn):
        w, b = self.w, f"blk.{il}."
        n = x.shape[0]
        x = x + attn.reshape(n, -1) @ w[b + "attn_output.weight"].T
        h = self.base.rmsnorm(x, w[b + "ffn_norm.weight"])
        g = h @ w[b + "ffn_gate.weight"].T
        u = h @ w[b + "ffn_up.weight"].T
        return x + ((g / (np.float32(1.0) + np.exp(-g))) * u) @ w[b + "ffn_down.weight"].T

    def _logits(self, x):
        return self.base.rmsnorm(x, self.w["output_norm.weight"]) @ self.w["output.weight"].T

    # -- batch formulation: visible set built explicitly per query
    def forward_batch(self, ids):
        hp = self.hp
        T = len(ids)
        pos = np.arange(T)
        x = self.w["token_embd.weight"][np.asarray(ids)]
        for il, lay in enumerate(self.layers):
            q, k, k_rot, v = self._qkv(il, x, pos)
            kind = lay["kind"]
            if kind == "compressed":
                W, S = lay["W"], lay["S"]
                kpool = k_rot if lay["rope"] == ROPE_TOKEN else k
                n_ent = T // S  # entries whose last slot (j+1)S-1 <= T-1
                ek = np.zeros((n_ent, hp["n_head_kv"], hp["head_dim"]), np.float32)
                ev = np.zeros_like(ek)
                for j in range(n_ent):
                    ek[j], ev[j] = pool_entry_direct(kpool, v, j, W, S)
                    if lay["rope"] == ROPE_ENTRY:
                        ek[j] = self._rope_one(ek[j], j * S)
            attn = np.zeros((T, hp["n_head"], hp["head_dim"]), np.float32)
            for t in range(T):
                if kind == "full":
                    keys, vals = k_rot[:t + 1], v[:t + 1]
                elif kind == "sliding":
                    lo = max(0, t - lay["L"] + 1)
                    keys, vals = k_rot[lo:t + 1], v[lo:t + 1]
                else:
                    n_vis = (t + 1) // lay["S"]
                    lo = max(0, t - lay["L"] + 1)
                    ex_k = k_rot[lo:t + 1] if lay["L"] > 0 else k_rot[:0]
                    ex_v = v[lo:t + 1] if lay["L"] > 0 else v[:0]
                    keys = np.concatenate([ek[:n_vis], ex_k])
                    vals = np.concatenate([ev[:n_vis], ex_v])
                attn[t] = self._attend(q[t], keys, vals, lay["sink"])
            x = self._finish_layer(il, x, attn)
        return self._logits(x)

    # -- streaming formulation: state machine fed chunk by chunk
    def new_state(self):
        st = []
        for lay in self.layers:
            if lay["kind"] == "full":
                exact = deque()
            else:
                exact = deque(maxlen=lay["L"])
            st.append({"exact": exact, "ent_k": [], "ent_v": [], "open": {}})
        return {"pos": 0, "layers": st}

    def forward_stream(self, ids, state):
        """Process ids at positions state.pos..; update state; return logits [n, vocab]."""
        hp = self.hp
        n = len(ids)
        p0 = state["pos"]
        pos = np.arange(p0, p0 + n)
        x = self.w["token_embd.weight"][np.asarray(ids)]
        for il, lay in enumerate(self.layers):
            ls = state["layers"][il]
            q, k, k_rot, v = self._qkv(il, x, pos)
            attn = np.zeros((n, hp["n_head"], hp["head_dim"]), np.float32)
            for r in range(n):
                p = p0 + r
                if lay["kind"] != "compressed" or lay["L"] > 0:
                    ls["exact"].append((k_rot[r], v[r]))
                if lay["kind"] == "compressed":
                    W, S = lay["W"], lay["S"]
                    kp = k_rot[r] if lay["rope"] == ROPE_TOKEN else k[r]
                    # open windows containing p: (j+1)S-W <= p <= (j+1)S-1
                    for j in range(p // S, (p + W) // S):
                        acc = ls["open"].setdefault(j, OnlineAccumulator(kp.shape))
                        acc.add(0.0, kp, v[r])  # uniform gate: logit 0 for a valid slot
                    if (p + 1) % S == 0:
                        j = (p + 1) // S - 1
                        kh, vh = ls["open"].pop(j).result()
                        if lay["rope"] == ROPE_ENTRY:
                            kh = self._rope_one(kh, j * S)
                        ls["ent_k"].append(kh)
                        ls["ent_v"].append(vh)
                parts_k = list(ls["ent_k"]) + [e[0] for e in ls["exact"]]
                parts_v = list(ls["ent_v"]) + [e[1] for e in ls["exact"]]
                if parts_k:
                    keys, vals = np.stack(parts_k), np.stack(parts_v)
                else:
                    keys = vals = np.zeros((0, hp["n_head_kv"], hp["head_dim"]), np.float32)
                attn[r] = self._attend(q[r], keys, vals, lay["sink"])
            x = self._finish_layer(il, x, attn)
        state["pos"] = p0 + n
        return self._logits(x)

    def run_stream(self, ids, chunks=None):
        """Feed ids in the given chunk sizes (default: one token at a time); logits [T, vocab]."""
        chunks = chunks or [1] * len(ids)
        assert sum(chunks) == len(ids)
        st, outs, i = self.new_state(), [], 0
        for c in chunks:
            outs.append(self.forward_stream(ids[i:i + c], st))
            i += c
        return np.concatenate(outs)


# ----------------------------------------------------------------------------- tiny model

TINY = {"vocab": 96, "d": 64, "layers": 3, "heads": 4, "kv_heads": 2, "head_dim": 16, "ffn": 128}


def tiny_tokens(vocab):
    toks = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "ab"]
    toks += [chr(c) for c in range(33, 33 + vocab - len(toks))]  # printable ASCII, byte-level safe
    assert len(toks) == vocab and len(set(toks)) == vocab
    return toks


def make_tiny(path, seed=0, cfg=TINY):
    """Write a small random llama GGUF (F32 weights, tied embeddings, minimal gpt2 tokenizer)."""
    import gguf
    rng = np.random.default_rng(seed)
    V, D, NL, H, HK, HD, F = (cfg[k] for k in ("vocab", "d", "layers", "heads", "kv_heads", "head_dim", "ffn"))

    def rnd(*shape, std=1.0):
        return (rng.standard_normal(shape) * std).astype(np.float32)

    w = gguf.GGUFWriter(path, "llama")
    w.add_name("phasekv-tiny-random")
    w.add_uint32("llama.block_count", NL)
    w.add_uint32("llama.context_length", 256)
    w.add_uint32("llama.embedding_length", D)
    w.add_uint32("llama.feed_forward_length", F)
    w.add_uint32("llama.attention.head_count", H)
    w.add_uint32("llama.attention.head_count_kv", HK)
    w.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-5)
    w.add_float32("llama.rope.freq_base", 10000.0)
    w.add_uint32("llama.rope.dimension_count", HD)
    w.add_uint32("llama.vocab_size", V)
    w.add_file_type(0)  # ALL_F32
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(tiny_tokens(V))
    w.add_token_types([3 if i < 3 else 1 for i in range(V)])
    w.add_token_merges(["a b"])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(False)

    # Scales chosen so that attention is far from uniform (q.k/sqrt(hd) has std ~2) and the
    # memory kinds visibly change the logits.
    w.add_tensor("token_embd.weight", rnd(V, D))
    for il in range(NL):
        b = f"blk.{il}."
        w.add_tensor(b + "attn_norm.weight", 1.0 + 0.1 * rnd(D))
        w.add_tensor(b + "attn_q.weight", rnd(H * HD, D, std=1.5 / np.sqrt(D)))
        w.add_tensor(b + "attn_k.weight", rnd(HK * HD, D, std=1.5 / np.sqrt(D)))
        w.add_tensor(b + "attn_v.weight", rnd(HK * HD, D, std=1.0 / np.sqrt(D)))
        w.add_tensor(b + "attn_output.weight", rnd(D, H * HD, std=1.0 / np.sqrt(H * HD)))
        w.add_tensor(b + "ffn_norm.weight", 1.0 + 0.1 * rnd(D))
        w.add_tensor(b + "ffn_gate.weight", rnd(F, D, std=1.0 / np.sqrt(D)))
        w.add_tensor(b + "ffn_up.weight", rnd(F, D, std=1.0 / np.sqrt(D)))
        w.add_tensor(b + "ffn_down.weight", rnd(D, F, std=1.0 / np.sqrt(F)))
    w.add_tensor("output_norm.weight", 1.0 + 0.1 * rnd(D))
    # no output.weight: the LM head is tied to token_embd.weight
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# ----------------------------------------------------------------------------- self-check

def _maxdiff(a, b):
    return float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))


def _comp(W, S, L, rope="token", sink=None):
    d = {"kind": "compressed", "W": W, "S": S, "L": L, "gate": "uniform", "rope": rope}
    if sink is not None:
        d["sink"] = sink
    return d


def self_check(gguf_path=None, seed=1234):
    t_start = time.time()
    tmp = None
    if gguf_path is None:
        tmp = tempfile.TemporaryDirectory()
        gguf_path = os.path.join(tmp.name, "tiny.gguf")
        make_tiny(gguf_path, seed=seed)
    hp, w = load_model(gguf_path)
    NL, NH = hp["n_layer"], hp["n_head"]
    V = hp["vocab_size"]
    rng = np.random.default_rng(seed)
    ids_all = [int(i) for i in rng.integers(0, V, size=64)]
    results = []
    TOL = 2e-4  # logits are O(10); float32 reorderings give ~1e-5

    def model(spec):
        return CompressedLlama(hp, w, parse_layers(spec, NL, NH))

    def check(name, diff, tol=TOL):
        results.append((name, diff))
        print(f"  {name:<72s} max|d| = {diff:.3e}")
        assert diff <= tol, f"{name}: {diff} > {tol}"

    print(f"model {gguf_path}: {hp}")

    # 0. entry pooling alone: direct and streaming accumulator vs mean of the valid slots (float64)
    print("[pooling] entries vs float64 mean of positions max(0,(j+1)S-W)..(j+1)S-1")
    kk = rng.standard_normal((23, 2, 16)).astype(np.float32)
    vv = rng.standard_normal((23, 2, 16)).astype(np.float32)
    for W, S in [(8, 4), (4, 4), (1, 1), (3, 1), (5, 3), (2, 4), (9, 2)]:
        worst = 0.0
        opened = {}
        for p in range(kk.shape[0]):
            for j in range(p // S, (p + W) // S):
                opened.setdefault(j, OnlineAccumulator(kk.shape[1:])).add(0.0, kk[p], vv[p])
            if (p + 1) % S == 0:
                j = (p + 1) // S - 1
                lo, hi = max(0, (j + 1) * S - W), (j + 1) * S
                mk, mv = kk[lo:hi].astype(np.float64).mean(0), vv[lo:hi].astype(np.float64).mean(0)
                dk, dv = pool_entry_direct(kk, vv, j, W, S)
                sk, sv = opened.pop(j).result()
                worst = max(worst, _maxdiff(dk, mk), _maxdiff(dv, mv), _maxdiff(sk, mk), _maxdiff(sv, mv))
        check(f"pool W={W} S={S}", worst, 1e-5)

    # 1. my full kind vs llama_ref (independent full-attention reference)
    print("[full] batch 'full' vs llama_ref.Llama")
    T = 24
    ids = ids_all[:T]
    full = model({"kind": "full"}).forward_batch(ids)
    base = Llama(hp, w)
    ref = base.forward(ids, base.new_cache(T))
    check("full(batch) == llama_ref, T=24", _maxdiff(full, ref), 1e-4)
    scale = float(np.max(np.abs(ref)))
    print(f"  (logit scale: max|logit| = {scale:.2f})")

    # 2. W=S=1, uniform, L=0 equals full attention (both RoPE conventions, both paths)
    print("[invariant] compressed W=S=1 uniform L=0 == full")
    for rope in ("token", "entry"):
        m = model(_comp(1, 1, 0, rope))
        check(f"W=S=1 L=0 rope={rope} batch  == full, T=24", _maxdiff(m.forward_batch(ids), full))
        check(f"W=S=1 L=0 rope={rope} stream == full, T=24", _maxdiff(m.run_stream(ids), full))
    # W=S=1 with L >= T: every token is counted twice -> softmax unchanged -> still full
    m = model(_comp(1, 1, T))
    check("W=S=1 L=T (every token twice) batch == full, T=24", _maxdiff(m.forward_batch(ids), full))

    # 3. sliding(L) equals full for T <= L
    print("[invariant] sliding(L) == full for T <= L")
    for L, T2 in [(24, 24), (30, 24), (8, 8), (8, 5), (1, 1)]:
        f2 = full[:T2]
        m = model({"kind": "sliding", "L": L})
        check(f"sliding L={L} batch  == full, T={T2}", _maxdiff(m.forward_batch(ids[:T2]), f2))
        check(f"sliding L={L} stream == full, T={T2}", _maxdiff(m.run_stream(ids[:T2]), f2))

    # 4. no entry complete yet (T < S): compressed(W,S,L) == sliding(L)
    print("[invariant] compressed with T < S (no entry yet) == sliding(L)")
    for W, S, L, T2 in [(8, 8, 3, 7), (16, 8, 5, 7), (6, 6, 2, 4)]:
        sl = model({"kind": "sliding", "L": L}).forward_batch(ids[:T2])
        check(f"compressed W={W} S={S} L={L} == sliding L={L}, T={T2}",
              _maxdiff(model(_comp(W, S, L)).forward_batch(ids[:T2]), sl))

    # 5. sink = -inf is no sink
    print("[invariant] sink = -inf == no sink")
    spec = [{"kind": "full"}, {"kind": "sliding", "L": 5}, _comp(8, 4, 4)]
    a = model(spec).forward_batch(ids[:13])
    spec_inf = [dict(d, sink=[-np.inf] * NH) for d in spec]
    check("mixed layers, sink=-inf == no sink, T=13", _maxdiff(model(spec_inf).forward_batch(ids[:13]), a))

    # 6. batch == token-by-token stream == random-chunk stream, many (W, S, L), both conventions
    print("[invariant] batch == stream(token by token) == stream(random chunks)")
    configs = [
        ("W>S overlap", lambda r: _comp(8, 4, 4, r)),
        ("W>S, L=S-1", lambda r: _comp(8, 4, 3, r)),
        ("W=S", lambda r: _comp(4, 4, 4, r)),
        ("W=S, L>W", lambda r: _comp(4, 4, 9, r)),
        ("W=S=1 L=2", lambda r: _comp(1, 1, 2, r)),
        ("S=1 W>S", lambda r: _comp(3, 1, 2, r)),
        ("W=5 S=3 (W not mult of S)", lambda r: _comp(5, 3, 2, r)),
        ("W<S (gaps)", lambda r: _comp(2, 4, 3, r)),
        ("L=0 < S-1 (empty view)", lambda r: _comp(8, 4, 0, r)),
        ("W=S=8 L=8", lambda r: _comp(8, 8, 8, r)),
        ("mixed full/sliding/compressed + sinks",
         lambda r: [{"kind": "full", "sink": 0.5},
                    {"kind": "sliding", "L": 6, "sink": list(rng.normal(size=NH))},
                    _comp(8, 4, 4, r, sink=list(rng.normal(size=NH)))]),
        ("per-layer mixed S (lcm 12)",
         lambda r: [_comp(8, 4, 4, r), _comp(6, 3, 2, r), _comp(2, 2, 1, r)]),
    ]
    for label, mk in configs:
        for rope in ("token", "entry"):
            spec = mk(rope)
            m = model(spec if isinstance(spec, list) else [spec] * NL)
            worst_tok = worst_chunk = 0.0
            for T2 in (3, 13, 22):
                ids2 = ids_all[:T2]
                b = m.forward_batch(ids2)
                s1 = m.run_stream(ids2)
                chunks, left = [], T2
                while left:
                    c = int(rng.integers(1, min(left, 7) + 1))
                    chunks.append(c)
                    left -= c
                s2 = m.run_stream(ids2, chunks)
                worst_tok = max(worst_tok, _maxdiff(b, s1))
                worst_chunk = max(worst_chunk, _maxdiff(b, s2))
            check(f"{label}, rope={rope}: batch vs token-by-token (T=3,13,22)", worst_tok)
            check(f"{label}, rope={rope}: batch vs random chunks (T=3,13,22)", worst_chunk)

    # 7. prefix property: logits at positions < T do not depend on later tokens (causality)
    print("[invariant] causality: logits of a prefix equal the prefix of the logits")
    m = model(_comp(8, 4, 4))
    long = m.forward_batch(ids_all[:22])
    for T2 in (5, 11, 16):
        check(f"compressed 8/4/4: prefix T={T2} of T=22", _maxdiff(m.forward_batch(ids_all[:T2]), long[:T2]))

    # 8. informative (no assert): compression is not full attention
    print("[info] differences from full attention (expected > 0, no assert)")
    for spec, label in [(_comp(8, 4, 24), "compressed 8/4 L>=T"), (_comp(8, 4, 4), "compressed 8/4/4"),
                        ({"kind": "sliding", "L": 6}, "sliding L=6")]:
        d = _maxdiff(model(spec).forward_batch(ids), full)
        print(f"  {label + ' vs full, T=24':<72s} max|d| = {d:.3e}")
        assert d > 1e-3, f"{label} unexpectedly equals full attention"

    print(f"self-check passed: {len(results)} checks, worst max|d| = {max(r[1] for r in results):.3e}, "
          f"{time.time() - t_start:.1f}s")
    if tmp is not None:
        tmp.cleanup()


# ----------------------------------------------------------------------------- CLI

def _load_json_arg(text_or_path):
    s = text_or_path.strip()
    if s.startswith("[") or s.startswith("{"):
        return json.loads(s)
    with open(text_or_path) as f:
        return json.load(f)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf", help="llama-architecture GGUF model file")
    ap.add_argument("--layers", help="JSON list (inline or file) with one memory-kind object per layer")
    ap.add_argument("--ids", help="JSON file with a list of token ids")
    ap.add_argument("--out", help="output: logits of every position, raw little-endian float32 [T, vocab]")
    ap.add_argument("--rope", choices=["token", "entry"], default="token",
                    help="entry key RoPE convention for compressed layers: token = rotate each token at "
                         "its own position before pooling (default); entry = pool un-rotated, rotate "
                         "entry j at position j*S")
    ap.add_argument("--mode", choices=["batch", "stream"], default="batch",
                    help="batch: O(T^2) explicit formulation (default); stream: token-by-token state machine")
    ap.add_argument("--make-tiny", metavar="OUT.gguf", help="write a tiny random llama GGUF and exit")
    ap.add_argument("--seed", type=int, default=0, help="seed for --make-tiny / --self-check")
    ap.add_argument("--self-check", action="store_true",
                    help="assert the invariants on a tiny random model (or on --gguf)")
    args = ap.parse_args()

    if args.make_tiny:
        make_tiny(args.make_tiny, seed=args.seed)
        print(f"wrote {args.make_tiny}: {TINY}, seed {args.seed}")
        return
    if args.self_check:
        self_check(args.gguf, seed=args.seed if args.seed else 1234)
        return
    missing = [n for n in ("gguf", "layers", "ids", "out") if getattr(args, n) is None]
    if missing:
        ap.error("missing " + ", ".join("--" + n for n in missing))

    t0 = time.time()
    hp, w = load_model(args.gguf)
    layers = parse_layers(_load_json_arg(args.layers), hp["n_layer"], hp["n_head"], args.rope)
    with open(args.ids) as f:
        ids = json.load(f)
    if isinstance(ids, dict):
        ids = ids["ids"]
    ids = [int(i) for i in ids]
    if not ids:
        raise SystemExit("--ids is empty")
    bad = [i for i in ids if not 0 <= i < hp["vocab_size"]]
    if bad:
        raise SystemExit(f"token ids out of range [0, {hp['vocab_size']}): {bad[:8]}")
    m = CompressedLlama(hp, w, layers)
    logits = m.forward_batch(ids) if args.mode == "batch" else m.run_stream(ids)
    logits.astype("<f4").tofile(args.out)
    print(f"wrote {args.out}: [{len(ids)}, {hp['vocab_size']}] float32 ({args.mode}, {time.time() - t0:.2f}s)")


if __name__ == "__main__":
    main()
