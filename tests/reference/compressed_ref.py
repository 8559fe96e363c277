#!/usr/bin/env python3
"""Independent NumPy reference for PhaseKV's per-layer attention memories (full, sliding, compressed).

Written from DESIGN.md section 3 only; it shares no code with PhaseKV's C++ sources. Only numpy,
gguf (GGUFReader / GGUFWriter / gguf.quants) and the stdlib are used; safetensors files are read
and written by hand. The Llama block itself (GGUF tensor names, weights [out, in], RMSNorm, RoPE,
GQA, SwiGLU, tied LM head) comes from llama_ref.py in this folder; everything about attention
memory is implemented here.

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
t is the 0-based absolute position of the query token; x_p is the block's attention input (the
output of attn_norm) of the token at position p; n_kv = KV heads, hd = head_dim, d = d_model.
* full:                  the query at t sees the exact K,V of tokens 0..t.
* sliding(L), L >= 1:    the query at t sees the exact K,V of tokens max(0, t-L+1)..t.
* compressed(W, S, L, gate, payload, rope), W >= 1, S >= 1, L >= 0:
    - Entry j covers the W slots at positions (j+1)S-W .. (j+1)S-1 (slot / offset i <-> position
      p = (j+1)S-W+i). Positions < 0 are EMPTY slots: excluded from the softmax (weight exactly 0,
      they contribute nothing and do NOT dilute the other weights).
      For W = S this is the partition [jS, jS+S); for W > S windows overlap; for W < S some
      tokens are in no entry.
    - Two branches B in {k, v}, each with its own gate. d_g = 1 ("scalar" gate: one weight per
      slot and KV head, broadcast over the hd channels) or d_g = hd ("vector" gate: one weight per
      channel); G = n_kv * d_g; gate column h*d_g + c is KV head h, channel c.
        gate logit   s[j,i,h,c] = (Z_i x_p)[h*d_g+c] + b[i, h*d_g+c]
        weights      a[j,:,h,c] = softmax over the VALID slots i of s[j,:,h,c]
        payload      P_i(p)     = "layer": the layer's own key / value of token p
                                  "map":   C^B_i x_p   ([n_kv*hd] -> [n_kv, hd], row h*hd+c)
        pooled       B_hat_j[h,c] = sum_i a[j,i,h,c] * P_i(p)[h,c]
      Gates ("gate"):
        uniform  s = 0 on every valid slot (a = 1/n_valid), no parameters, d_g = 1.
        scalar   d_g = 1, bias b [W, G] required; map Z per "gate_maps".
        vector   d_g = hd, same tensors with G = n_kv*hd.
        planted  built here from parameters, no tensors: scalar, bias only (Z = 0), shared map.
                 "K": k, "V": v (ints in [0, W)): b_k[i] = strength if i == k else 0,
                                                  b_v[i] = strength if i == v else 0;
                 "weak": [a, ...] (ints in [0, W)): b[i] = -strength if i in weak else 0 (both
                 branches). Same bias for every KV head. "strength" defaults to 10.0.
      "gate_maps": "shared" (Z_i = Z for every i; Z optional, absent = 0) or "offset" (one Z_i per
      offset, required). "payload_maps": "shared" (C_i = C) or "offset" (one C_i per offset),
      only with "payload": "map".
    - Keys and RoPE ("rope"):
        rotate_tokens ("token", default): the key payload of slot i is rotated at ITS OWN position
                                          p (payload "layer": the layer's rotated key; "map":
                                          C^k_i x_p rotated at p); K_hat_j is used as is.
        rotate_entry  ("entry"):          the key payload is UN-rotated; the pooled K_hat_j is
                                          optionally ("entry_norm": true) RMS-normalised per KV
                                          head, k / sqrt(mean(k^2) + eps) * w (eps = the model's
                                          rms eps, w = cmp_k_norm.weight [hd]), then rotated at
                                          position j*S.
      Values are never rotated.
    - Pooling precision: gate logits and payloads are float32 (x_p @ Z.T + b). Batch path: the
      weights a are a float64 softmax over the valid slots, rounded to float32, and the weighted
      sum is accumulated in float32 in slot order i = 0..W-1. Stream path: one online-softmax
      accumulator per open window and branch, in float32: running max m, denominator d, weighted
      sum, all per (KV head, gate channel) (per channel for vector gates).
    - Entry j is emitted when token (j+1)S-1 has been processed, so the query at t sees every
      complete entry j < floor((t+1)/S) -- including the entry completed by token t itself --
      PLUS the exact K,V of tokens t-L+1..t (clipped at 0; always the layer's own rotated keys and
      values, whatever the payload), all in ONE softmax over the concatenated scores (entries
      first, then exact tokens). Recent tokens are deliberately covered twice: no dedupe.
    - L < S-1 is accepted here (the C++ validator rejects it unless declared intentional: gap=1).
* Scores: q_rot . k / sqrt(head_dim); the query is rotated at its own position t.
* Optional sink (any kind): "sink": [n_head floats] (one per QUERY head), a number (all heads), or
  true (read blk.{l}.attn_sink [n_head] from the --gates file). The sink is an extra logit in the
  softmax denominator with no value:
      p_n = exp(s_n) / (exp(sink) + sum_m exp(s_m)),  out = sum_n p_n v_n.
  It is compared to the already-scaled scores (it is not divided by sqrt(head_dim)).
* A query that sees no key at all (only possible for compressed with L = 0 before the first entry
  exists, e.g. t < S-1) gets attention output 0 (with or without a sink).

Tensors of the --gates file (per layer l, branch b in {k, v}; names as in PhaseKV's runtime)
-------------------------------------------------------------------------------------------
  blk.{l}.cmp_{b}_gate.bias    [W, G]                      scalar / vector gate (required)
  blk.{l}.cmp_{b}_gate.weight  [G, d]  (gate_maps shared, optional: absent means Z = 0)
                               [W, G, d] (gate_maps offset, required; Z_i = tensor[i])
  blk.{l}.cmp_{b}.weight       [n_kv*hd, d] (payload map, payload_maps shared)
                               [W, n_kv*hd, d] (payload_maps offset)
  blk.{l}.cmp_k_norm.weight    [hd]    (entry_norm, only with rope entry)
  blk.{l}.attn_sink            [n_head] ("sink": true, any kind)
All are converted to float32 (F32, F16 and BF16 accepted). A missing required tensor or a wrong
shape is a SystemExit naming the tensor. Tensors the spec does not use are ignored (listed on
stderr by the CLI).
safetensors layout: u64 little-endian header length N, N bytes of JSON {name: {"dtype", "shape",
"data_offsets": [begin, end]}, optional "__metadata__": {str: str}}, then the data block (offsets
relative to its start; row-major little-endian).

Two independent formulations are implemented:
  batch  -- O(T^2): for every query t the visible key/value set is built explicitly from the rules
            above and entries are pooled directly from their slot list. This is the default and
            what the CLI writes.
  stream -- a state machine fed in chunks (or token by token): exact-token ring, emitted entries,
            and one online-softmax accumulator per open window and branch.
They share only the per-token projections (gate logits and payloads of token p for every offset).
--self-check asserts that they agree, checks entries against a from-scratch float64 computation
from the raw tensors, plus the invariants of DESIGN.md section 3.

CLI
---
  compressed_ref.py --gguf PATH --layers SPEC --ids IDS.json --out OUT.f32 [--rope token|entry]
                    [--gates FILE.safetensors] [--mode batch|stream]
      SPEC: a JSON list (inline text or a file path) with one object per layer, e.g.
        [{"kind": "full"}, {"kind": "sliding", "L": 8, "sink": true},
         {"kind": "compressed", "W": 8, "S": 4, "L": 4, "gate": "vector", "gate_maps": "offset",
          "payload": "map", "payload_maps": "shared", "rope": "entry", "entry_norm": true}]
        {"kind": "compressed", "W": 8, "S": 8, "L": 16, "gate": "planted", "K": 2, "V": 5}
      A single object (not a list) applies to every layer. Keys of "compressed": W, S, L, gate
      (uniform|scalar|vector|planted, default uniform), gate_maps (shared|offset, default shared),
      payload (layer|map, default layer), payload_maps (shared|offset, default shared), rope
      (token|entry, default --rope), entry_norm (bool, default false, rope entry only), K, V,
      weak, strength (planted only), sink. Every kind accepts "sink".
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
GATES = ("uniform", "scalar", "vector", "planted")
MAPS = ("shared", "offset")
PAYLOADS = ("layer", "map")


# ----------------------------------------------------------------------------- safetensors

_ST_NP = {"F32": "<f4", "F16": "<f2", "BF16": "<u2"}


def _bf16_bits(a):
    """float32 -> bfloat16 bit patterns (uint16), round to nearest even (no NaNs expected)."""
    u = np.ascontiguousarray(a, np.float32).view("<u4").astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2")


def write_safetensors(path, tensors, dtypes=None, metadata=None):
    """Write {name: array} as a safetensors file; dtypes: {name: "F32"|"F16"|"BF16"} (default F32)."""
    dtypes = dtypes or {}
    header, blobs, off = {}, [], 0
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name, arr in tensors.items():
        a = np.ascontiguousarray(arr, np.float32)
        dt = dtypes.get(name, "F32")
        if dt == "F32":
            raw = a.astype("<f4").tobytes()
        elif dt == "F16":
            raw = a.astype("<f2").tobytes()
        elif dt == "BF16":
            raw = _bf16_bits(a).tobytes()
        else:
            raise ValueError(f"{name}: unsupported dtype {dt!r}")
        header[name] = {"dtype": dt, "shape": [int(s) for s in a.shape], "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    hj = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hj += b" " * (-len(hj) % 8)  # pad the header with spaces to 8 bytes (as the reference writer does)
    with open(path, "wb") as f:
        f.write(len(hj).to_bytes(8, "little"))
        f.write(hj)
        for raw in blobs:
            f.write(raw)


def read_safetensors(path):
    """Read a safetensors file -> ({name: float32 array}, {metadata}). Errors are SystemExit."""
    try:
        with open(path, "rb") as f:
            blob = f.read()
    except OSError as e:
        raise SystemExit(f"{path}: cannot read ({e})")
    if len(blob) < 8:
        raise SystemExit(f"{path}: not a safetensors file (shorter than 8 bytes)")
    n = int.from_bytes(blob[:8], "little")
    if n > len(blob) - 8:
        raise SystemExit(f"{path}: header length {n} runs past the end of the file ({len(blob)} bytes)")
    try:
        header = json.loads(blob[8:8 + n].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SystemExit(f"{path}: header is not JSON ({e})")
    if not isinstance(header, dict):
        raise SystemExit(f"{path}: header is not a JSON object")
    meta = header.pop("__metadata__", None) or {}
    data = blob[8 + n:]
    out = {}
    for name, info in header.items():
        try:
            dt, shape, (b, e) = info["dtype"], [int(s) for s in info["shape"]], info["data_offsets"]
        except (KeyError, TypeError, ValueError):
            raise SystemExit(f"{path}: tensor {name!r}: bad header entry {info!r:.200}")
        if dt not in _ST_NP:
            raise SystemExit(f"{path}: tensor {name!r}: dtype {dt!r} not supported (F32, F16, BF16)")
        itemsize = 4 if dt == "F32" else 2
        count = int(np.prod(shape, dtype=np.int64))
        if not (0 <= b <= e <= len(data)) or e - b != count * itemsize or min(shape, default=0) < 0:
            raise SystemExit(f"{path}: tensor {name!r}: data_offsets {[b, e]} do not fit shape {shape} "
                             f"{dt} in a data block of {len(data)} bytes")
        raw = np.frombuffer(data, dtype=_ST_NP[dt], count=count, offset=b)
        if dt == "BF16":
            arr = (raw.astype(np.uint32) << 16).view(np.float32)
        else:
            arr = raw.astype(np.float32)
        out[name] = arr.reshape(shape)
    return out, meta


class TensorSource:
    """Named float32 tensors (a --gates file or an in-memory dict) with shape checks and use tracking."""

    def __init__(self, tensors=None, origin="--gates"):
        self.tensors = dict(tensors or {})
        self.origin = origin
        self.used = set()

    def get(self, name, shape, required=True, why=""):
        shape = tuple(int(s) for s in shape)
        if name not in self.tensors:
            if required:
                raise SystemExit(f"missing tensor {name!r} {list(shape)}{' (' + why + ')' if why else ''} "
                                 f"in {self.origin}")
            return None
        a = np.asarray(self.tensors[name], np.float32)
        if a.shape != shape:
            raise SystemExit(f"tensor {name!r} in {self.origin} has shape {list(a.shape)}, expected {list(shape)}"
                             f"{' (' + why + ')' if why else ''}")
        self.used.add(name)
        return a

    def unused(self):
        return sorted(set(self.tensors) - self.used)


# ----------------------------------------------------------------------------- layer specs

def _int_list(v, what, il):
    v = v if isinstance(v, list) else [v]
    try:
        out = [int(x) for x in v]
    except (TypeError, ValueError):
        raise SystemExit(f"layer {il}: {what} must be integers (got {v!r})")
    return out


def parse_layers(spec, hp, default_rope="token", gates=None):
    """Validate and normalise a layer spec (list of dicts, or one dict for every layer).

    hp: the model's hyper-parameters (llama_ref.load_model). gates: a TensorSource, a dict of
    tensors, or None (then any layer that needs tensors is a SystemExit)."""
    n_layer, n_head = hp["n_layer"], hp["n_head"]
    if gates is None:
        gates = TensorSource({}, "(no --gates file given)")
    elif not isinstance(gates, TensorSource):
        gates = TensorSource(gates, "the gate tensors")
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
            allowed = {"kind", "W", "S", "L", "gate", "gate_maps", "payload", "payload_maps", "rope",
                       "entry_norm", "K", "V", "weak", "strength", "sink"}
            _parse_compressed(il, d, lay, hp, default_rope, gates)
        else:
            raise SystemExit(f"layer {il}: unknown kind {kind!r} (full | sliding | compressed)")
        extra = set(d) - allowed
        if extra:
            raise SystemExit(f"layer {il}: unknown keys {sorted(extra)} for kind {kind!r}")
        sink = d.get("sink")
        if sink is None or sink is False:
            lay["sink"] = None
        elif sink is True:
            lay["sink"] = gates.get(f"blk.{il}.attn_sink", (n_head,), why=f"layer {il} has \"sink\": true")
        else:
            s = np.asarray(sink, dtype=np.float32)
            s = np.full(n_head, s, np.float32) if s.ndim == 0 else s
            if s.shape != (n_head,):
                raise SystemExit(f"layer {il}: sink needs {n_head} values (one per query head)")
            lay["sink"] = s
        out.append(lay)
    return out


def _parse_compressed(il, d, lay, hp, default_rope, gates):
    n_kv, hd, d_model = hp["n_head_kv"], hp["head_dim"], hp["n_embd"]
    for key in ("W", "S", "L"):
        if key not in d:
            raise SystemExit(f"layer {il}: compressed needs {key}")
    W, S, L = int(d["W"]), int(d["S"]), int(d["L"])
    if W < 1 or S < 1 or L < 0:
        raise SystemExit(f"layer {il}: compressed needs W >= 1, S >= 1, L >= 0")
    lay.update(W=W, S=S, L=L)
    gate = d.get("gate", "uniform")
    gate_maps = d.get("gate_maps", "shared")
    payload = d.get("payload", "layer")
    payload_maps = d.get("payload_maps", "shared")
    rope = d.get("rope", default_rope)
    entry_norm = d.get("entry_norm", False)
    if gate not in GATES:
        raise SystemExit(f"layer {il}: gate must be one of {list(GATES)} (got {gate!r})")
    if gate_maps not in MAPS:
        raise SystemExit(f"layer {il}: gate_maps must be 'shared' or 'offset' (got {gate_maps!r})")
    if gate_maps == "offset" and gate not in ("scalar", "vector"):
        raise SystemExit(f"layer {il}: gate_maps 'offset' needs a scalar or vector gate (gate is {gate!r})")
    if payload not in PAYLOADS:
        raise SystemExit(f"layer {il}: payload must be 'layer' or 'map' (got {payload!r})")
    if payload_maps not in MAPS:
        raise SystemExit(f"layer {il}: payload_maps must be 'shared' or 'offset' (got {payload_maps!r})")
    if payload_maps == "offset" and payload != "map":
        raise SystemExit(f"layer {il}: payload_maps 'offset' needs payload 'map'")
    if rope not in _ROPE_NAMES:
        raise SystemExit(f"layer {il}: rope must be 'token' or 'entry' (got {rope!r})")
    rope = _ROPE_NAMES[rope]
    if entry_norm not in (True, False, 0, 1):
        raise SystemExit(f"layer {il}: entry_norm must be a boolean (got {entry_norm!r})")
    entry_norm = bool(entry_norm)
    if entry_norm and rope != ROPE_ENTRY:
        raise SystemExit(f"layer {il}: entry_norm needs rope 'entry'")
    planted_keys = {"K", "V", "weak", "strength"} & set(d)
    if planted_keys and gate != "planted":
        raise SystemExit(f"layer {il}: {sorted(planted_keys)} only go with gate 'planted'")
    lay.update(gate=gate, gate_maps=gate_maps, payload=payload, payload_maps=payload_maps,
               rope=rope, entry_norm=entry_norm)

    d_g = hd if gate == "vector" else 1
    G = n_kv * d_g
    lay["d_g"] = d_g
    pre = f"blk.{il}."
    # gate: per branch {"bias": [W, n_kv, d_g], "Z": None | [G, d] | [W, G, d]}; None = uniform
    if gate == "uniform":
        lay["gate_k"] = lay["gate_v"] = None
    elif gate in ("scalar", "vector"):
        for br in ("k", "v"):
            why = f"layer {il}: {gate} gate, gate_maps {gate_maps}"
            bias = gates.get(pre + f"cmp_{br}_gate.bias", (W, G), why=why)
            if gate_maps == "shared":
                Z = gates.get(pre + f"cmp_{br}_gate.weight", (G, d_model), required=False, why=why)
            else:
                Z = gates.get(pre + f"cmp_{br}_gate.weight", (W, G, d_model), why=why)
            lay["gate_" + br] = {"bias": bias.reshape(W, n_kv, d_g), "Z": Z}
    else:  # planted: scalar, bias only, shared (absent) map
        strength = d.get("strength", 10.0)
        try:
            strength = float(strength)
        except (TypeError, ValueError):
            raise SystemExit(f"layer {il}: strength must be a number (got {strength!r})")
        if not np.isfinite(strength):
            raise SystemExit(f"layer {il}: strength must be finite")
        bk = np.zeros((W, n_kv, 1), np.float32)
        bv = np.zeros((W, n_kv, 1), np.float32)
        if "weak" in d:
            if "K" in d or "V" in d:
                raise SystemExit(f"layer {il}: planted gate takes either K and V, or weak (not both)")
            weak = _int_list(d["weak"], "weak", il)
            if not weak or any(not 0 <= a < W for a in weak):
                raise SystemExit(f"layer {il}: weak must list offsets in [0, {W}) (got {d['weak']!r})")
            bk[weak] = -strength
            bv[weak] = -strength
            lay["weak"] = sorted(set(weak))
        else:
            if "K" not in d or "V" not in d:
                raise SystemExit(f"layer {il}: planted gate needs both K and V (or weak)")
            K, V = _int_list(d["K"], "K", il), _int_list(d["V"], "V", il)
            if len(K) != 1 or len(V) != 1 or not 0 <= K[0] < W or not 0 <= V[0] < W:
                raise SystemExit(f"layer {il}: planted K and V must be single offsets in [0, {W})")
            bk[K[0]] = strength
            bv[V[0]] = strength
            lay["K"], lay["V"] = K[0], V[0]
        lay["strength"] = strength
        lay["gate_k"] = {"bias": bk, "Z": None}
        lay["gate_v"] = {"bias": bv, "Z": None}
    # payload maps: None (the layer's own K / V) | [n_kv*hd, d] | [W, n_kv*hd, d]
    if payload == "layer":
        lay["map_k"] = lay["map_v"] = None
    else:
        shape = (n_kv * hd, d_model) if payload_maps == "shared" else (W, n_kv * hd, d_model)
        for br in ("k", "v"):
            lay["map_" + br] = gates.get(pre + f"cmp_{br}.weight", shape,
                                         why=f"layer {il}: payload map, payload_maps {payload_maps}")
    lay["k_norm"] = (gates.get(pre + "cmp_k_norm.weight", (hd,), why=f"layer {il}: entry_norm")
                     if entry_norm else None)


# ----------------------------------------------------------------------------- pooling

def uniform_slot_weights(j, W, S):
    """Positions of the W slots of entry j and their uniform-gate softmax weights (float32)."""
    pos = np.arange((j + 1) * S - W, (j + 1) * S)
    logits = np.where(pos >= 0, 0.0, -np.inf)
    e = np.exp(logits - logits.max())  # the last slot is always valid, so max = 0
    return pos, (e / e.sum()).astype(np.float32)


def pool_branch(logits, payloads):
    """Batch pooling of one branch of one entry over its VALID slots, in slot order.

    logits: [n_valid, n_kv, d_g] float32; payloads: [n_valid, n_kv, hd] float32. The weights are a
    float64 softmax over the slots (per KV head and gate channel), rounded to float32; the weighted
    sum is accumulated in float32 (a scalar gate's weight is broadcast over the hd channels)."""
    s = np.asarray(logits, np.float64)
    e = np.exp(s - s.max(axis=0, keepdims=True))
    a = (e / e.sum(axis=0, keepdims=True)).astype(np.float32)
    out = np.zeros(np.shape(payloads)[1:], np.float32)
    for ai, x in zip(a, payloads):
        out += ai * x
    return out


def pool_entry_direct(kpool, v, j, W, S):
    """Uniform-gate batch pooling of entry j (kpool, v: [T, n_kv, hd]; keys already in the
    convention's form). Empty slots (p < 0) are excluded."""
    pos = [p for p in range((j + 1) * S - W, (j + 1) * S) if p >= 0]
    z = np.zeros((len(pos), kpool.shape[1], 1), np.float32)
    return pool_branch(z, kpool[pos]), pool_branch(z, v[pos])


class BranchAccumulator:
    """Online softmax of one branch of one open window: running max m and denominator d per
    (KV head, gate channel), weighted sum [n_kv, hd]; all float32."""

    def __init__(self, shape, d_g=1):
        self.m = np.full((shape[0], d_g), -np.inf, np.float32)
        self.d = np.zeros((shape[0], d_g), np.float32)
        self.acc = np.zeros(shape, np.float32)

    def add(self, logit, x):
        logit = np.broadcast_to(np.asarray(logit, np.float32), self.m.shape)
        m_new = np.maximum(self.m, logit)
        c = np.exp(self.m - m_new)  # exp(-inf) = 0 on the first add
        e = np.exp(logit - m_new)
        self.d = self.d * c + e
        self.acc = self.acc * c + e * x  # [n_kv, d_g] broadcasts over hd when d_g = 1
        self.m = m_new

    def result(self):
        return self.acc / self.d


class OnlineAccumulator:
    """Open-window accumulator: one BranchAccumulator for keys and one for values."""

    def __init__(self, shape, d_g=1):
        self.kb = BranchAccumulator(shape, d_g)
        self.vb = BranchAccumulator(shape, d_g)

    def add(self, logit, k, v, logit_v=None):
        self.kb.add(logit, k)
        self.vb.add(logit if logit_v is None else logit_v, v)

    def result(self):
        return self.kb.result(), self.vb.result()


# ----------------------------------------------------------------------------- the model

class CompressedLlama:
    def __init__(self, hp, w, layers):
        self.hp, self.w, self.layers = hp, w, layers
        self.base = Llama(hp, w)  # rmsnorm / rope helpers and the full-attention cross-check
        self.scale = np.float32(1.0 / np.sqrt(hp["head_dim"]))

    # -- shared pieces
    def _qkv(self, il, x, pos):
        """-> (h = attention input, q rotated, k un-rotated, k rotated, v)."""
        hp, w = self.hp, self.w
        n, hd = x.shape[0], hp["head_dim"]
        b = f"blk.{il}."
        h = self.base.rmsnorm(x, w[b + "attn_norm.weight"])
        q, k, v = self.base.project_qkv(il, h)  # qwen2 biases, qwen3 q/k norms (llama_ref)
        return h, self.base.rope(q, pos), k, self.base.rope(k, pos), v

    def _rope_one(self, x, p):
        """Rotate one [n_kv, hd] vector set at position p."""
        return self.base.rope(x[None], [p])[0]

    def cmp_slots(self, lay, h, k, k_rot, v, pos):
        """Per token (row of h, at absolute positions pos) and per offset i = 0..W-1: the gate
        logits lk, lv [n, W, n_kv, d_g] and the payloads pk, pv [n, W, n_kv, hd] (keys already in
        the convention's form: rotated at p for rope token, un-rotated for rope entry)."""
        hp = self.hp
        n, W = h.shape[0], lay["W"]
        n_kv, hd, d_g = hp["n_head_kv"], hp["head_dim"], lay["d_g"]

        def logits(g):
            if g is None:
                return np.zeros((n, W, n_kv, d_g), np.float32)
            Z = g["Z"]
            if Z is None:
                zx = np.zeros((n, 1, n_kv, d_g), np.float32)
            elif Z.ndim == 2:
                zx = (h @ Z.T).reshape(n, 1, n_kv, d_g)
            else:
                zx = np.einsum("nd,wgd->nwg", h, Z).reshape(n, W, n_kv, d_g)
            return (zx + g["bias"][None]).astype(np.float32)

        def payload(C, own):
            if C is None:
                return np.broadcast_to(own[:, None], (n, W, n_kv, hd))
            if C.ndim == 2:
                return np.broadcast_to((h @ C.T).reshape(n, 1, n_kv, hd), (n, W, n_kv, hd))
            return np.einsum("nd,wod->nwo", h, C).reshape(n, W, n_kv, hd).astype(np.float32)

        lk, lv = logits(lay["gate_k"]), logits(lay["gate_v"])
        pv = payload(lay["map_v"], v)
        if lay["map_k"] is None:
            pk = payload(None, k_rot if lay["rope"] == ROPE_TOKEN else k)
        else:
            pk = payload(lay["map_k"], None)
            if lay["rope"] == ROPE_TOKEN:  # the mapped key of slot i is rotated at ITS position p
                pk = self.base.rope(np.ascontiguousarray(pk).reshape(n, W * n_kv, hd), pos)
                pk = pk.reshape(n, W, n_kv, hd)
        return lk, lv, pk, pv

    def finish_entry(self, lay, kh, j):
        """rope entry: optional per-head RMSNorm of the pooled key, then rotation at j*S."""
        if lay["rope"] == ROPE_ENTRY:
            if lay["entry_norm"]:
                kh = self.base.rmsnorm(kh, lay["k_norm"])
            kh = self._rope_one(kh, j * lay["S"])
        return kh

    def entries_batch(self, lay, h, k, k_rot, v):
        """All complete entries of a prompt of T = len(h) tokens, pooled directly from their slot
        lists: ek, ev [floor(T/S), n_kv, hd]."""
        hp = self.hp
        T = h.shape[0]
        W, S = lay["W"], lay["S"]
        lk, lv, pk, pv = self.cmp_slots(lay, h, k, k_rot, v, np.arange(T))
        n_ent = T // S  # entries whose last slot (j+1)S-1 <= T-1
        ek = np.zeros((n_ent, hp["n_head_kv"], hp["head_dim"]), np.float32)
        ev = np.zeros_like(ek)
        for j in range(n_ent):
            slots = [(i, p) for i, p in enumerate(range((j + 1) * S - W, (j + 1) * S)) if p >= 0]
            ii = np.array([i for i, _ in slots])
            pp = np.array([p for _, p in slots])
            ek[j] = self.finish_entry(lay, pool_branch(lk[pp, ii], pk[pp, ii]), j)
            ev[j] = pool_branch(lv[pp, ii], pv[pp, ii])
        return ek, ev

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
            h, q, k, k_rot, v = self._qkv(il, x, pos)
            kind = lay["kind"]
            if kind == "compressed":
                ek, ev = self.entries_batch(lay, h, k, k_rot, v)
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
            h, q, k, k_rot, v = self._qkv(il, x, pos)
            if lay["kind"] == "compressed":
                lk, lv, pk, pv = self.cmp_slots(lay, h, k, k_rot, v, pos)
            attn = np.zeros((n, hp["n_head"], hp["head_dim"]), np.float32)
            for r in range(n):
                p = p0 + r
                if lay["kind"] != "compressed" or lay["L"] > 0:
                    ls["exact"].append((k_rot[r], v[r]))
                if lay["kind"] == "compressed":
                    W, S = lay["W"], lay["S"]
                    # open windows containing p: (j+1)S-W <= p <= (j+1)S-1; p is their slot i
                    for j in range(p // S, (p + W) // S):
                        i = p - ((j + 1) * S - W)
                        acc = ls["open"].setdefault(j, OnlineAccumulator(k_rot[r].shape, lay["d_g"]))
                        acc.add(lk[r, i], pk[r, i], pv[r, i], logit_v=lv[r, i])
                    if (p + 1) % S == 0:
                        j = (p + 1) // S - 1
                        kh, vh = ls["open"].pop(j).result()
                        ls["ent_k"].append(self.finish_entry(lay, kh, j))
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


# ----------------------------------------------------------------------------- random gate tensors

def random_cmp_tensors(hp, specs, rng, gate_weights=True):
    """Random tensors for every layer of a RAW layer spec list that needs them (plausible scales:
    gate weights std 0.3/sqrt(d), biases std 1 (gates far from uniform), payload maps like
    attn_k / attn_v of make_tiny (std 1.5/sqrt(d), 1.0/sqrt(d)), norm weights 1 + 0.1 N(0,1),
    sinks N(0,1)). gate_weights=False leaves out the OPTIONAL shared gate maps (bias-only gates).
    Returns {name: float32 array}."""
    n_head, n_kv, hd, D = hp["n_head"], hp["n_head_kv"], hp["head_dim"], hp["n_embd"]
    out = {}

    def rnd(*shape, std=1.0):
        return (rng.standard_normal(shape) * std).astype(np.float32)

    for il, s in enumerate(specs):
        pre = f"blk.{il}."
        if s.get("sink") is True:
            out[pre + "attn_sink"] = rnd(n_head)
        if s["kind"] != "compressed":
            continue
        W = int(s["W"])
        gate = s.get("gate", "uniform")
        if gate in ("scalar", "vector"):
            G = n_kv * (hd if gate == "vector" else 1)
            for br in ("k", "v"):
                out[pre + f"cmp_{br}_gate.bias"] = rnd(W, G)
                if s.get("gate_maps", "shared") == "offset":
                    out[pre + f"cmp_{br}_gate.weight"] = rnd(W, G, D, std=0.3 / np.sqrt(D))
                elif gate_weights:
                    out[pre + f"cmp_{br}_gate.weight"] = rnd(G, D, std=0.3 / np.sqrt(D))
        if s.get("payload", "layer") == "map":
            shape = (n_kv * hd, D) if s.get("payload_maps", "shared") == "shared" else (W, n_kv * hd, D)
            out[pre + "cmp_k.weight"] = rnd(*shape, std=1.5 / np.sqrt(D))
            out[pre + "cmp_v.weight"] = rnd(*shape, std=1.0 / np.sqrt(D))
        if s.get("entry_norm", False):
            out[pre + "cmp_k_norm.weight"] = 1.0 + 0.1 * rnd(hd)
    return out


# ----------------------------------------------------------------------------- tiny model

TINY = {"vocab": 96, "d": 64, "layers": 3, "heads": 4, "kv_heads": 2, "head_dim": 16, "ffn": 128}


def tiny_tokens(vocab):
    toks = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "ab"]
    toks += [chr(c) for c in range(33, 33 + vocab - len(toks))]  # printable ASCII, byte-level safe
    assert len(toks) == vocab and len(set(toks)) == vocab
    return toks


def make_tiny(path, seed=0, cfg=TINY, arch="llama", vocab=None):
    """Write a small random llama, qwen2 or qwen3 GGUF (F32 weights, tied embeddings, minimal gpt2
    tokenizer), with the tensor names and metadata llama.cpp's convert_hf_to_gguf.py writes for
    that architecture (qwen2: attn_{q,k,v}.bias; qwen3: attn_{q,k}_norm.weight and an explicit
    attention.key_length). vocab: optionally a real byte-level BPE vocabulary {"tokens", "types",
    "merges", "pre", "bos", "eos"} (cfg["vocab"] is then its size)."""
    import gguf
    rng = np.random.default_rng(seed)
    if vocab is not None:
        cfg = dict(cfg, vocab=len(vocab["tokens"]))
    V, D, NL, H, HK, HD, F = (cfg[k] for k in ("vocab", "d", "layers", "heads", "kv_heads", "head_dim", "ffn"))

    def rnd(*shape, std=1.0):
        return (rng.standard_normal(shape) * std).astype(np.float32)

    a = arch
    w = gguf.GGUFWriter(path, arch)
    w.add_name("phasekv-tiny-random")
    w.add_uint32(f"{a}.block_count", NL)
    w.add_uint32(f"{a}.context_length", 256)
    w.add_uint32(f"{a}.embedding_length", D)
    w.add_uint32(f"{a}.feed_forward_length", F)
    w.add_uint32(f"{a}.attention.head_count", H)
    w.add_uint32(f"{a}.attention.head_count_kv", HK)
    w.add_float32(f"{a}.attention.layer_norm_rms_epsilon", 1e-5 if arch == "llama" else 1e-6)
    w.add_float32(f"{a}.rope.freq_base", 10000.0 if arch == "llama" else 1000000.0)
    if arch == "qwen3":
        w.add_uint32(f"{a}.attention.key_length", HD)
        w.add_uint32(f"{a}.attention.value_length", HD)
    else:
        w.add_uint32(f"{a}.rope.dimension_count", HD)
    w.add_uint32(f"{a}.vocab_size", V)
    w.add_file_type(0)  # ALL_F32
    w.add_tokenizer_model("gpt2")
    if vocab is not None:
        w.add_tokenizer_pre(vocab["pre"])
        w.add_token_list(vocab["tokens"])
        w.add_token_types(vocab["types"])
        w.add_token_merges(vocab["merges"])
        w.add_bos_token_id(vocab["bos"])
        w.add_eos_token_id(vocab["eos"])
    else:
        w.add_tokenizer_pre("smollm" if arch == "llama" else "qwen2")
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
        if arch == "qwen2":
            w.add_tensor(b + "attn_q.bias", rnd(H * HD, std=0.5))
            w.add_tensor(b + "attn_k.bias", rnd(HK * HD, std=0.5))
            w.add_tensor(b + "attn_v.bias", rnd(HK * HD, std=0.5))
        if arch == "qwen3":
            # Per-head norms rescale q.k to ~hd: damp them so attention stays far from one-hot.
            w.add_tensor(b + "attn_q_norm.weight", 0.4 + 0.1 * rnd(HD))
            w.add_tensor(b + "attn_k_norm.weight", 0.4 + 0.1 * rnd(HD))
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
    return float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))


def _comp(W, S, L, rope="token", sink=None, **kw):
    d = {"kind": "compressed", "W": W, "S": S, "L": L, "gate": "uniform", "rope": rope}
    if sink is not None:
        d["sink"] = sink
    d.update(kw)
    return d


def _rope64(hp, y, p):
    """Independent float64 RoPE (adjacent pairs) of y [..., hd] at position p."""
    y = np.array(y, np.float64)
    for i in range(hp["rope_dim"] // 2):
        ang = p * hp["rope_base"] ** (-2.0 * i / hp["rope_dim"])
        c, s = np.cos(ang), np.sin(ang)
        y0, y1 = y[..., 2 * i].copy(), y[..., 2 * i + 1].copy()
        y[..., 2 * i], y[..., 2 * i + 1] = y0 * c - y1 * s, y0 * s + y1 * c
    return y


def _naive_entry64(hp, w, il, spec, tens, h, j):
    """Entry j of layer il computed from scratch in float64 from the RAW spec and tensor dict,
    channel by channel (h: that layer's attention inputs [T, d]). -> (K_hat_j, V_hat_j)."""
    n_kv, hd = hp["n_head_kv"], hp["head_dim"]
    W, S = int(spec["W"]), int(spec["S"])
    gate = spec.get("gate", "uniform")
    dg = hd if gate == "vector" else 1
    rope = spec.get("rope", "token")
    pre = f"blk.{il}."
    slots = [(i, (j + 1) * S - W + i) for i in range(W) if (j + 1) * S - W + i >= 0]
    res = []
    for br in ("k", "v"):
        lg = np.zeros((len(slots), n_kv, hd))
        py = np.zeros((len(slots), n_kv, hd))
        for r, (i, p) in enumerate(slots):
            x = h[p].astype(np.float64)
            for hh in range(n_kv):
                for c in range(hd):
                    col = hh * dg + (c if dg > 1 else 0)
                    s = 0.0
                    if gate in ("scalar", "vector"):
                        s = float(tens[pre + f"cmp_{br}_gate.bias"][i, col])
                        Z = tens.get(pre + f"cmp_{br}_gate.weight")
                        if Z is not None:
                            Zi = Z[i] if spec.get("gate_maps", "shared") == "offset" else Z
                            s += float(Zi[col].astype(np.float64) @ x)
                    elif gate == "planted":
                        st = float(spec.get("strength", 10.0))
                        if "weak" in spec:
                            weak = spec["weak"] if isinstance(spec["weak"], list) else [spec["weak"]]
                            s = -st if i in weak else 0.0
                        else:
                            s = st if i == spec["K" if br == "k" else "V"] else 0.0
                    lg[r, hh, c] = s
            if spec.get("payload", "layer") == "map":
                C = tens[pre + f"cmp_{br}.weight"]
                Ci = C[i] if spec.get("payload_maps", "shared") == "offset" else C
            else:
                Ci = w[pre + f"attn_{br}.weight"]
            y = (Ci.astype(np.float64) @ x).reshape(n_kv, hd)
            py[r] = _rope64(hp, y, p) if (br == "k" and rope == "token") else y
        a = np.exp(lg - lg.max(axis=0))
        a /= a.sum(axis=0)
        out = (a * py).sum(axis=0)
        if br == "k" and rope == "entry":
            if spec.get("entry_norm", False):
                out = out / np.sqrt((out * out).mean(axis=-1, keepdims=True) + hp["eps"])
                out = out * tens[pre + "cmp_k_norm.weight"].astype(np.float64)
            out = _rope64(hp, out, j * S)
        res.append(out)
    return res


def self_check(gguf_path=None, seed=1234):
    t_start = time.time()
    tmp = tempfile.TemporaryDirectory()
    if gguf_path is None:
        gguf_path = os.path.join(tmp.name, "tiny.gguf")
        make_tiny(gguf_path, seed=seed)
    hp, w = load_model(gguf_path)
    NL, NH = hp["n_layer"], hp["n_head"]
    V = hp["vocab_size"]
    rng = np.random.default_rng(seed)
    ids_all = [int(i) for i in rng.integers(0, V, size=64)]
    results = []
    TOL = 2e-4  # logits are O(10); float32 reorderings give ~1e-5

    def model(spec, tens=None):
        return CompressedLlama(hp, w, parse_layers(spec, hp, gates=tens))

    def check(name, diff, tol=TOL):
        results.append((name, diff))
        print(f"  {name:<78s} max|d| = {diff:.3e}")
        assert diff <= tol, f"{name}: {diff} > {tol}"

    def expect_exit(name, fn, needle):
        try:
            fn()
        except SystemExit as e:
            msg = str(e)
            assert needle in msg, f"{name}: message {msg!r} lacks {needle!r}"
            print(f"  {name:<78s} SystemExit: {msg[:70]}")
            results.append((name, 0.0))
            return
        raise AssertionError(f"{name}: no SystemExit")

    def chunked(T2):
        chunks, left = [], T2
        while left:
            c = int(rng.integers(1, min(left, 7) + 1))
            chunks.append(c)
            left -= c
        return chunks

    def batch_vs_stream(label, m, lengths=(3, 13, 22)):
        worst_tok = worst_chunk = 0.0
        for T2 in lengths:
            ids2 = ids_all[:T2]
            b = m.forward_batch(ids2)
            worst_tok = max(worst_tok, _maxdiff(b, m.run_stream(ids2)))
            worst_chunk = max(worst_chunk, _maxdiff(b, m.run_stream(ids2, chunked(T2))))
        Ls = ",".join(str(t) for t in lengths)
        check(f"{label}: batch vs token-by-token (T={Ls})", worst_tok)
        check(f"{label}: batch vs random chunks (T={Ls})", worst_chunk)

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
    # gated pooling: direct (float64 weights) and online accumulator vs a float64 softmax, scalar and vector
    for d_g in (1, 16):
        worst = 0.0
        for n_valid in (1, 3, 8):
            lg = (3 * rng.standard_normal((n_valid, 2, d_g))).astype(np.float32)
            pay = rng.standard_normal((n_valid, 2, 16)).astype(np.float32)
            a = np.exp(lg.astype(np.float64) - lg.max(0))
            a /= a.sum(0)
            ref = (a * pay).sum(0)
            acc = BranchAccumulator((2, 16), d_g)
            for i in range(n_valid):
                acc.add(lg[i], pay[i])
            worst = max(worst, _maxdiff(pool_branch(lg, pay), ref), _maxdiff(acc.result(), ref))
        check(f"gated pool d_g={d_g}: direct and online vs float64 softmax", worst, 1e-5)

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
    # "sink": true reads blk.{l}.attn_sink; same values inline give the same logits
    sinks = {f"blk.{il}.attn_sink": rng.standard_normal(NH).astype(np.float32) for il in range(NL)}
    a = model([dict(d, sink=True) for d in spec], sinks).forward_batch(ids[:13])
    b = model([dict(d, sink=[float(x) for x in sinks[f"blk.{il}.attn_sink"]])
               for il, d in enumerate(spec)]).forward_batch(ids[:13])
    check("mixed layers, sink=true (tensor) == the same sinks inline, T=13", _maxdiff(a, b), 0.0)

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
            batch_vs_stream(f"{label}, rope={rope}", model(spec if isinstance(spec, list) else [spec] * NL))

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
        print(f"  {label + ' vs full, T=24':<78s} max|d| = {d:.3e}")
        assert d > 1e-3, f"{label} unexpectedly equals full attention"

    # ------------------------------------------------------------------ gates and payload maps
    # 9. safetensors round trip (F32 exact, F16 / BF16 = the rounded values) and bad files
    print("[safetensors] hand-written reader / writer")
    st_path = os.path.join(tmp.name, "rt.safetensors")
    arrs = {"a": rng.standard_normal((3, 5)).astype(np.float32),
            "b": rng.standard_normal((2, 3, 4)).astype(np.float32),
            "c": np.array([1.0, -2.5, 3.0e-3, 65504.0, 1.0 + 2 ** -9], np.float32)}
    write_safetensors(st_path, arrs, {"b": "F16", "c": "BF16"}, {"format": "pt"})
    back, meta = read_safetensors(st_path)
    with open(st_path, "rb") as f:
        hlen = int.from_bytes(f.read(8), "little")
        hdr = json.loads(f.read(hlen))
    assert meta == {"format": "pt"} and hdr["c"]["dtype"] == "BF16" and hlen % 8 == 0
    check("safetensors F32 round trip", _maxdiff(back["a"], arrs["a"]), 0.0)
    check("safetensors F16 == float16(x)", _maxdiff(back["b"], arrs["b"].astype(np.float16)), 0.0)
    bf_expect = np.array([1.0, -2.5, 0.0030059814453125, 65536.0, 1.0], np.float32)  # RNE to 8 bits
    check("safetensors BF16 == round-to-nearest-even(x)", _maxdiff(back["c"], bf_expect), 0.0)
    with open(st_path, "r+b") as f:
        f.write((10 ** 6).to_bytes(8, "little"))
    expect_exit("safetensors: header past the end", lambda: read_safetensors(st_path), "runs past")

    # 10. entries vs a from-scratch float64 computation from the raw tensors (layer 0)
    print("[entries] entries_batch vs float64 per-channel computation from the raw tensors (layer 0)")
    x0 = w["token_embd.weight"][np.asarray(ids_all[:22])]
    gate_specs = [
        ("uniform, rope token", _comp(8, 4, 4)),
        ("uniform, rope entry", _comp(8, 4, 4, "entry")),
        ("scalar shared", _comp(8, 4, 4, gate="scalar")),
        ("scalar bias-only", _comp(8, 4, 4, gate="scalar"), False),
        ("vector shared", _comp(8, 4, 4, gate="vector")),
        ("scalar offset", _comp(8, 4, 4, gate="scalar", gate_maps="offset")),
        ("vector offset, W<S", _comp(3, 4, 3, gate="vector", gate_maps="offset")),
        ("vector shared, S=1", _comp(3, 1, 2, gate="vector")),
        ("payload map shared, uniform", _comp(8, 4, 4, payload="map")),
        ("payload map offset, scalar, rope entry", _comp(5, 3, 2, "entry", gate="scalar", payload="map",
                                                         payload_maps="offset")),
        ("entry_norm, payload layer", _comp(8, 4, 4, "entry", entry_norm=True)),
        ("entry_norm, vector offset + map offset", _comp(8, 4, 4, "entry", entry_norm=True, gate="vector",
                                                         gate_maps="offset", payload="map",
                                                         payload_maps="offset")),
        ("planted K=2 V=5", _comp(8, 4, 4, gate="planted", K=2, V=5)),
        ("planted weak=[1,3] strength 6", _comp(4, 2, 2, gate="planted", weak=[1, 3], strength=6)),
    ]
    for entry in gate_specs:
        label, spec = entry[0], entry[1]
        gw = entry[2] if len(entry) > 2 else True
        tens = random_cmp_tensors(hp, [spec] * NL, rng, gate_weights=gw)
        m = model([spec] * NL, tens)
        lay = m.layers[0]
        h, _, k, k_rot, v = m._qkv(0, x0, np.arange(22))
        ek, ev = m.entries_batch(lay, h, k, k_rot, v)
        worst = 0.0
        for j in range(ek.shape[0]):
            nk, nv = _naive_entry64(hp, w, 0, spec, tens, h, j)
            worst = max(worst, _maxdiff(ek[j], nk), _maxdiff(ev[j], nv))
        check(f"entries {label}: {ek.shape[0]} entries vs float64", worst, 5e-5)

    # 11. batch == stream with gates, payload maps, entry norm, planted gates, tensor sinks
    print("[invariant] gated / mapped compressors: batch == stream(token by token) == stream(random chunks)")
    gated = [
        ("scalar shared", lambda r: _comp(8, 4, 4, r, gate="scalar"), True),
        ("scalar bias-only", lambda r: _comp(8, 4, 4, r, gate="scalar"), False),
        ("vector shared", lambda r: _comp(8, 4, 4, r, gate="vector"), True),
        ("scalar offset maps", lambda r: _comp(5, 3, 2, r, gate="scalar", gate_maps="offset"), True),
        ("vector offset maps", lambda r: _comp(8, 4, 3, r, gate="vector", gate_maps="offset"), True),
        ("payload map shared (uniform gate)", lambda r: _comp(8, 4, 4, r, payload="map"), True),
        ("payload map offset (scalar gate)",
         lambda r: _comp(4, 2, 2, r, gate="scalar", payload="map", payload_maps="offset"), True),
        ("vector offset + payload offset, W<S",
         lambda r: _comp(2, 4, 3, r, gate="vector", gate_maps="offset", payload="map",
                         payload_maps="offset"), True),
        ("planted K=2 V=5", lambda r: _comp(8, 4, 4, r, gate="planted", K=2, V=5), True),
        ("planted K=1 V=3 W=S=8", lambda r: _comp(8, 8, 8, r, gate="planted", K=1, V=3, strength=30), True),
        ("planted weak=5", lambda r: _comp(8, 8, 8, r, gate="planted", weak=[5]), True),
        ("planted weak=1,3 strength 6", lambda r: _comp(4, 2, 2, r, gate="planted", weak=[1, 3], strength=6),
         True),
        ("sinks (tensor) on full/sliding/vector compressed",
         lambda r: [{"kind": "full", "sink": True}, {"kind": "sliding", "L": 6, "sink": True},
                    _comp(8, 4, 4, r, gate="vector", sink=True)], True),
        ("per layer: scalar 6/3/2, vector offset 4/2/1, planted 4/4/4",
         lambda r: [_comp(6, 3, 2, r, gate="scalar"), _comp(4, 2, 1, r, gate="vector", gate_maps="offset"),
                    _comp(4, 4, 4, r, gate="planted", K=1, V=3)], True),
    ]
    for label, mk, gw in gated:
        for rope in ("token", "entry"):
            spec = mk(rope)
            spec = spec if isinstance(spec, list) else [spec] * NL
            tens = random_cmp_tensors(hp, spec, rng, gate_weights=gw)
            batch_vs_stream(f"{label}, rope={rope}", model(spec, tens))
    for label, en_gate in [("entry_norm, uniform", {}), ("entry_norm, vector + payload map",
                                                          {"gate": "vector", "payload": "map"})]:
        spec = [_comp(8, 4, 4, "entry", entry_norm=True, **en_gate)] * NL
        batch_vs_stream(f"{label}, rope=entry", model(spec, random_cmp_tensors(hp, spec, rng)))

    # 12. planted K=k, V=v with strength 30: entries are (almost exactly) the key / value at the slot
    print("[planted] strength 30: K_hat_j == key of slot K, V_hat_j == value of slot V (layer 0)")
    for (W, S, L, Kp, Vp) in [(8, 8, 16, 2, 5), (8, 4, 4, 6, 1), (4, 2, 2, 3, 0)]:
        for rope in ("token", "entry"):
            spec = _comp(W, S, L, rope, gate="planted", K=Kp, V=Vp, strength=30)
            m = model([spec] * NL)
            h, _, k, k_rot, v = m._qkv(0, x0, np.arange(22))
            ek, ev = m.entries_batch(m.layers[0], h, k, k_rot, v)
            st = m.new_state()
            m.forward_stream(ids_all[:22], st)
            sk, sv = np.stack(st["layers"][0]["ent_k"]), np.stack(st["layers"][0]["ent_v"])
            worst, n_chk = 0.0, 0
            for j in range(ek.shape[0]):
                pk_, pv_ = (j + 1) * S - W + Kp, (j + 1) * S - W + Vp
                if pk_ < 0 or pv_ < 0:
                    continue  # the planted slot is empty in this early window
                want_k = k_rot[pk_] if rope == "token" else m._rope_one(k[pk_], j * S)
                worst = max(worst, _maxdiff(ek[j], want_k), _maxdiff(ev[j], v[pv_]),
                            _maxdiff(sk[j], want_k), _maxdiff(sv[j], v[pv_]))
                n_chk += 1
            assert n_chk > 0
            check(f"planted W={W} S={S} K={Kp} V={Vp} rope={rope}: {n_chk} entries (batch+stream)", worst, 1e-5)

    # 13. equivalences between gate forms (full model logits, T=22)
    print("[invariant] gate equivalences")
    T2 = 22
    for rope in ("token", "entry"):
        uni = model([_comp(8, 4, 4, rope)] * NL).forward_batch(ids_all[:T2])
        for gm in ("shared", "offset"):
            spec = [_comp(8, 4, 4, rope, gate="scalar", gate_maps=gm)] * NL
            tens = {n: np.zeros_like(a) for n, a in random_cmp_tensors(hp, spec, rng).items()}
            check(f"scalar gate ({gm} maps), Z = 0 and b = 0 == uniform, rope={rope}",
                  _maxdiff(model(spec, tens).forward_batch(ids_all[:T2]), uni), 1e-6)
        spec = [_comp(8, 4, 4, rope, gate="planted", K=3, V=6, strength=0.0)] * NL
        check(f"planted strength 0 == uniform, rope={rope}",
              _maxdiff(model(spec).forward_batch(ids_all[:T2]), uni), 1e-6)
        # payload map with C = attn_k / attn_v == payload layer (shared and per-offset copies)
        for pm in ("shared", "offset"):
            spec_l = [_comp(8, 4, 4, rope, gate="vector")] * NL
            spec_m = [_comp(8, 4, 4, rope, gate="vector", payload="map", payload_maps=pm)] * NL
            tens = random_cmp_tensors(hp, spec_l, rng)
            for il in range(NL):
                for br in ("k", "v"):
                    wt = w[f"blk.{il}.attn_{br}.weight"]
                    tens[f"blk.{il}.cmp_{br}.weight"] = wt if pm == "shared" else np.stack([wt] * 8)
            check(f"payload map ({pm}) C = attn_k/attn_v == payload layer, vector gate, rope={rope}",
                  _maxdiff(model(spec_m, tens).forward_batch(ids_all[:T2]),
                           model(spec_l, tens).forward_batch(ids_all[:T2])), 1e-4)
        # vector gate with per-channel-constant bias and maps == scalar gate
        for gm in ("shared", "offset"):
            spec_s = [_comp(8, 4, 4, rope, gate="scalar", gate_maps=gm)] * NL
            spec_v = [_comp(8, 4, 4, rope, gate="vector", gate_maps=gm)] * NL
            ts = random_cmp_tensors(hp, spec_s, rng)
            hd = hp["head_dim"]
            tv = {n: np.repeat(a, hd, axis=-1 if n.endswith(".bias") else -2) for n, a in ts.items()}
            check(f"vector gate constant across channels == scalar gate ({gm} maps), rope={rope}",
                  _maxdiff(model(spec_v, tv).forward_batch(ids_all[:T2]),
                           model(spec_s, ts).forward_batch(ids_all[:T2])), 1e-4)

    # 14. informative: gates and maps do change the logits
    print("[info] gated compressors vs uniform (expected > 0, no assert)")
    uni = model([_comp(8, 4, 4)] * NL).forward_batch(ids_all[:T2])
    for label, spec in [("scalar", _comp(8, 4, 4, gate="scalar")), ("vector offset",
                        _comp(8, 4, 4, gate="vector", gate_maps="offset")),
                        ("planted K=2 V=5", _comp(8, 4, 4, gate="planted", K=2, V=5))]:
        d = _maxdiff(model([spec] * NL, random_cmp_tensors(hp, [spec] * NL, rng)).forward_batch(ids_all[:T2]), uni)
        print(f"  {label + ' vs uniform, T=22':<78s} max|d| = {d:.3e}")
        assert d > 1e-3, f"{label} unexpectedly equals the uniform gate"

    # 15. clear errors
    print("[errors] bad specs and tensors are SystemExit")
    spec = [_comp(8, 4, 4, gate="vector", gate_maps="offset")] * NL
    tens = random_cmp_tensors(hp, spec, rng)
    expect_exit("missing required tensor", lambda: model(
        spec, {n: a for n, a in tens.items() if n != "blk.1.cmp_v_gate.weight"}), "blk.1.cmp_v_gate.weight")
    expect_exit("wrong shape", lambda: model(
        spec, dict(tens, **{"blk.2.cmp_k_gate.bias": np.zeros((8, 2), np.float32)})), "blk.2.cmp_k_gate.bias")
    expect_exit("no gates file", lambda: model([_comp(8, 4, 4, gate="scalar")] * NL), "missing tensor")
    expect_exit("sink=true without tensor", lambda: model({"kind": "full", "sink": True}), "attn_sink")
    expect_exit("entry_norm with rope token", lambda: model(_comp(8, 4, 4, entry_norm=True)), "entry_norm")
    expect_exit("planted K out of range", lambda: model(_comp(8, 4, 4, gate="planted", K=8, V=0)), "planted")
    expect_exit("planted K without V", lambda: model(_comp(8, 4, 4, gate="planted", K=1)), "both K and V")
    expect_exit("K on a scalar gate", lambda: model(_comp(8, 4, 4, gate="scalar", K=1)), "planted")
    expect_exit("payload_maps offset without payload map",
                lambda: model(_comp(8, 4, 4, payload_maps="offset")), "payload_maps")

    print(f"self-check passed: {len(results)} checks, worst max|d| = {max(r[1] for r in results):.3e}, "
          f"{time.time() - t_start:.1f}s")
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
    ap.add_argument("--gates", metavar="FILE.safetensors",
                    help="gate / payload-map / entry-norm / sink tensors for the layers that need them")
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
    gates = None
    if args.gates:
        gates = TensorSource(read_safetensors(args.gates)[0], args.gates)
    layers = parse_layers(_load_json_arg(args.layers), hp, args.rope, gates)
    if gates is not None and gates.unused():
        print(f"note: {len(gates.unused())} tensors of {args.gates} are not used by the layer spec: "
              f"{gates.unused()[:8]}", file=sys.stderr)
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
