#!/usr/bin/env python3
"""Independent NumPy reference for a llama, qwen2 or qwen3 GGUF model (e.g. SmolLM2).

Used by PhaseKV's tests as ground truth; it shares no code with PhaseKV.
Only numpy, gguf (GGUFReader + gguf.quants.dequantize) and the stdlib are used.

What it implements
------------------
For each prompt (a list of token ids):
  1. Forward the whole prompt at once (positions 0..n-1, causal mask) and write
     the logits of the LAST prompt position to DIR/ref_<name>.f32
     (raw little-endian float32, vocab_size values).
  2. Greedy-decode exactly --n-predict tokens (argmax, ties -> lowest id, no
     stop at EOS), feeding each chosen token back one at a time through a KV
     cache. Write DIR/ref_<name>.json:
       {"name", "n_prompt", "greedy": [ids], "logits_file", "vocab_size"}

Conventions
-----------
* Every tensor is dequantized once to float32. GGUF lists dims innermost-first
  (ne), so the numpy shape is the reverse: a weight W is [out, in], y = W @ x.
  Activations are row-major [n_tokens, features], so we compute x @ W.T.
* rmsnorm(v) = v / sqrt(mean(v^2) + eps), then multiplied by the norm weight.
* RoPE is GGML "normal" (non-NeoX) mode, as llama GGUFs use (the converter
  permuted the q/k rows for it): within each head, ADJACENT pairs
  (x[2i], x[2i+1]), i < rope_dim/2, rotate by angle pos * base^(-2i/rope_dim):
  (x0*cos - x1*sin, x0*sin + x1*cos). Dims >= rope_dim are left as is.
* Attention: GQA (query head h uses KV head h // (n_head / n_head_kv)),
  scores scaled by 1/sqrt(head_dim), softmax over positions 0..pos.
* FFN: down( silu(gate h) * (up h) ), silu(z) = z / (1 + exp(-z)).
* qwen2 (Qwen2 / Qwen2.5, HF Qwen2Attention): q, k and v projections add a bias
  (blk.N.attn_{q,k,v}.bias). qwen3 (HF Qwen3Attention): no biases; each head of q and of k
  is RMS-normalized over head_dim (weights blk.N.attn_{q,k}_norm.weight, the model's eps)
  after the projection and before RoPE. Both use HF's rotate_half RoPE, which GGUF keeps
  as is (GGML "NeoX" mode): pairs (x[i], x[i + rope_dim/2]).
* head_dim is {arch}.attention.key_length when the file has it (Qwen3: 128 with
  d_model 1024 and 16 heads), else n_embd / n_head.
* LM head: output.weight if present, else tied to token_embd.weight.
* All arithmetic is float32 (RoPE angles are computed in float64, then cast).
"""
import argparse
import json
import os
import time

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize


def load_model(path):
    """Return (hparams dict, {tensor name: float32 ndarray in numpy order})."""
    reader = GGUFReader(path)

    def meta(key, default=None):
        field = reader.fields.get(key)
        return default if field is None else field.contents()

    arch = meta("general.architecture")
    if arch not in ("llama", "qwen2", "qwen3"):
        raise SystemExit(f"unsupported architecture {arch!r} (expected llama, qwen2 or qwen3)")
    a = arch
    hp = {
        "arch": arch,
        "neox": arch != "llama",
        "n_embd": int(meta(f"{a}.embedding_length")),
        "n_layer": int(meta(f"{a}.block_count")),
        "n_head": int(meta(f"{a}.attention.head_count")),
        "n_head_kv": int(meta(f"{a}.attention.head_count_kv")),
        "n_ff": int(meta(f"{a}.feed_forward_length")),
        "eps": float(meta(f"{a}.attention.layer_norm_rms_epsilon")),
        "rope_base": float(meta(f"{a}.rope.freq_base", 10000.0)),
    }
    hp["head_dim"] = int(meta(f"{a}.attention.key_length", hp["n_embd"] // hp["n_head"]))
    hp["rope_dim"] = int(meta(f"{a}.rope.dimension_count", hp["head_dim"]))

    weights = {}
    for t in reader.tensors:
        shape = tuple(int(d) for d in reversed(t.shape))  # ne is innermost-first
        w = dequantize(t.data, t.tensor_type).astype(np.float32, copy=False)
        weights[t.name] = np.ascontiguousarray(w.reshape(shape))
    if "output.weight" not in weights:  # tied embeddings
        weights["output.weight"] = weights["token_embd.weight"]
    hp["vocab_size"] = weights["token_embd.weight"].shape[0]
    return hp, weights


class Llama:
    def __init__(self, hp, w):
        self.hp, self.w = hp, w
        half = hp["rope_dim"] // 2
        # inv_freq[i] = base^(-2i/rope_dim)
        self.inv_freq = hp["rope_base"] ** (-2.0 * np.arange(half, dtype=np.float64) / hp["rope_dim"])

    def rmsnorm(self, x, weight):
        ms = np.mean(x * x, axis=-1, keepdims=True, dtype=np.float32)
        return (x / np.sqrt(ms + np.float32(self.hp["eps"]))) * weight

    def rope(self, x, positions):
        """x: [n_tok, n_heads, head_dim]; rotate adjacent pairs (llama) or (i, i + half) (qwen)."""
        half = self.hp["rope_dim"] // 2
        ang = np.asarray(positions, dtype=np.float64)[:, None] * self.inv_freq[None, :]
        cos = np.cos(ang).astype(np.float32)[:, None, :]  # [n_tok, 1, half]
        sin = np.sin(ang).astype(np.float32)[:, None, :]
        x = x.copy()
        if self.hp["neox"]:
            a, b = slice(0, half), slice(half, 2 * half)
        else:
            a, b = slice(0, 2 * half, 2), slice(1, 2 * half, 2)
        x0 = x[..., a].copy()
        x1 = x[..., b].copy()
        x[..., a] = x0 * cos - x1 * sin
        x[..., b] = x0 * sin + x1 * cos
        return x

    def project_qkv(self, il, h):
        """h [n, n_embd] -> q [n, n_head, hd], k, v [n, n_head_kv, hd], before RoPE: the
        projections, qwen2's biases, qwen3's per-head q/k RMSNorm."""
        hp, w = self.hp, self.w
        n, hd = h.shape[0], hp["head_dim"]
        b = f"blk.{il}."
        q = h @ w[b + "attn_q.weight"].T
        k = h @ w[b + "attn_k.weight"].T
        v = h @ w[b + "attn_v.weight"].T
        if hp["arch"] == "qwen2":
            q, k, v = q + w[b + "attn_q.bias"], k + w[b + "attn_k.bias"], v + w[b + "attn_v.bias"]
        q = q.reshape(n, hp["n_head"], hd)
        k = k.reshape(n, hp["n_head_kv"], hd)
        v = v.reshape(n, hp["n_head_kv"], hd)
        if hp["arch"] == "qwen3":
            q = self.rmsnorm(q, w[b + "attn_q_norm.weight"])
            k = self.rmsnorm(k, w[b + "attn_k_norm.weight"])
        return q, k, v

    def new_cache(self, max_len):
        hp = self.hp
        shape = (hp["n_layer"], max_len, hp["n_head_kv"], hp["head_dim"])
        return {"k": np.zeros(shape, np.float32), "v": np.zeros(shape, np.float32), "len": 0}

    def forward(self, tokens, cache, capture=None):
        """Run tokens at positions cache.len.. ; append to cache; return logits [n_tok, vocab].
        capture: optional {layer: None}; each listed layer's normed attention input is stored."""
        hp, w = self.hp, self.w
        n_head, n_kv, hd = hp["n_head"], hp["n_head_kv"], hp["head_dim"]
        group = n_head // n_kv
        n = len(tokens)
        p0 = cache["len"]
        pos = np.arange(p0, p0 + n)
        total = p0 + n
        scale = np.float32(1.0 / np.sqrt(hd))
        # causal mask: query at pos[i] may see key positions 0..pos[i]
        mask = np.where(np.arange(total)[None, :] <= pos[:, None], 0.0, -np.inf).astype(np.float32)

        x = w["token_embd.weight"][np.asarray(tokens)]  # [n, n_embd]
        for il in range(hp["n_layer"]):
            b = f"blk.{il}."
            h = self.rmsnorm(x, w[b + "attn_norm.weight"])
            if capture is not None and il in capture:
                capture[il] = h.copy()
            q, k, v = self.project_qkv(il, h)
            q, k = self.rope(q, pos), self.rope(k, pos)
            cache["k"][il, p0:total] = k
            cache["v"][il, p0:total] = v
            K = cache["k"][il, :total]  # [total, n_kv, hd]
            V = cache["v"][il, :total]
            out = np.empty((n, n_head, hd), np.float32)
            for hq in range(n_head):
                kh = hq // group
                s = (q[:, hq, :] @ K[:, kh, :].T) * scale + mask  # [n, total]
                s = s - s.max(axis=-1, keepdims=True)
                p = np.exp(s)
                p /= p.sum(axis=-1, keepdims=True)
                out[:, hq, :] = p @ V[:, kh, :]
            x = x + out.reshape(n, n_head * hd) @ w[b + "attn_output.weight"].T

            h = self.rmsnorm(x, w[b + "ffn_norm.weight"])
            g = h @ w[b + "ffn_gate.weight"].T
            u = h @ w[b + "ffn_up.weight"].T
            x = x + ((g / (np.float32(1.0) + np.exp(-g))) * u) @ w[b + "ffn_down.weight"].T
        cache["len"] = total
        x = self.rmsnorm(x, w["output_norm.weight"])
        return x @ w["output.weight"].T


def run_prompt(model, ids, n_predict):
    """Return (last-prompt-position logits, list of n_predict greedy ids)."""
    cache = model.new_cache(len(ids) + n_predict)
    logits = model.forward(ids, cache)[-1]
    prompt_logits = logits.astype("<f4")
    greedy = []
    for i in range(n_predict):
        tok = int(np.argmax(logits))  # first maximum -> ties go to lowest id
        greedy.append(tok)
        if i + 1 < n_predict:
            logits = model.forward([tok], cache)[-1]
    return prompt_logits, greedy


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gguf", required=True, help="llama-architecture GGUF model file")
    ap.add_argument("--prompts", required=True,
                    help='JSON file: {"prompts": [{"name": str, "ids": [int, ...]}, ...]}')
    ap.add_argument("--n-predict", type=int, required=True, help="greedy tokens to decode per prompt")
    ap.add_argument("--out-dir", required=True, help="where ref_<name>.f32 / ref_<name>.json go")
    args = ap.parse_args()

    with open(args.prompts) as f:
        prompts = json.load(f)["prompts"]
    os.makedirs(args.out_dir, exist_ok=True)

    t0 = time.time()
    hp, weights = load_model(args.gguf)
    model = Llama(hp, weights)
    print(f"loaded {args.gguf} in {time.time() - t0:.1f}s: {hp}")

    for pr in prompts:
        name, ids = pr["name"], [int(t) for t in pr["ids"]]
        if not ids:
            raise SystemExit(f"prompt {name!r} is empty")
        t1 = time.time()
        logits, greedy = run_prompt(model, ids, args.n_predict)
        logits_file = f"ref_{name}.f32"
        logits.tofile(os.path.join(args.out_dir, logits_file))
        with open(os.path.join(args.out_dir, f"ref_{name}.json"), "w") as f:
            json.dump({"name": name, "n_prompt": len(ids), "greedy": greedy,
                       "logits_file": logits_file, "vocab_size": int(hp["vocab_size"])}, f)
            f.write("\n")
        print(f"{name}: n_prompt={len(ids)} greedy={greedy} ({time.time() - t1:.1f}s)")
    print(f"total {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
