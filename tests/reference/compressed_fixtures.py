#!/usr/bin/env python3
"""Fixtures for PhaseKV's compressed-memory tests, computed with compressed_ref.py (numpy only).

Usage: compressed_fixtures.py --out-dir DIR [--seed N]

Writes
  DIR/tiny_cmp.gguf            compressed_ref.make_tiny (3 layers, d 64, 4 heads, 2 KV heads,
                               head_dim 16, vocab 96, context 256), seed N
  DIR/<case>.safetensors       random gate / payload-map / entry-norm / sink tensors, only for
                               cases whose layers need them (scales: see
                               compressed_ref.random_cmp_tensors); some tensors are stored as F16
                               or BF16 to exercise the conversion (biases always F32)
  DIR/<case>.ids.json          token ids, random in [3, 96)
  DIR/<case>.f32               batch-mode logits of EVERY position, little-endian float32 [T, vocab]
  DIR/tiny_cmp_qwen2.gguf, DIR/tiny_cmp_qwen3.gguf   the same shapes as qwen2 / qwen3 models
  DIR/cases.json               {"gguf": "tiny_cmp.gguf", "cases": [{"name", "gguf", "kv", "gates", "layers",
                               "ids", "logits", "T", "vocab"}]}
"kv" holds PhaseKV `--kv` strings ([LAYERS:]KIND[:PARAMS]) derived mechanically from the
reference layer spec "layers" (see kv_string), so that the two always express the same memory.
The logits are computed from the files as written (the safetensors file is read back), and every
case is also run through the streaming formulation (token by token) as a cross-check.
"""
import argparse
import json
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import compressed_ref as cr  # noqa: E402
from llama_ref import load_model  # noqa: E402

VOCAB = cr.TINY["vocab"]


def comp(W, S, L, **kw):
    d = {"kind": "compressed", "W": W, "S": S, "L": L, "gate": "uniform", "rope": "token"}
    d.update(kw)
    return d


SLIDING6 = {"kind": "sliding", "L": 6}

# name, T, layer specs (one dict = every layer), options
#   gate_weights: False -> leave out the optional shared gate maps (bias-only gates)
#   dtypes: {tensor-name suffix: "F16" | "BF16"} for the stored tensors
CASES = [
    ("overlap_w8s4l4", 30, comp(8, 4, 4), {}),
    ("partition_w4s4l4", 29, comp(4, 4, 4), {}),
    ("s1_w3s1l2", 24, comp(3, 1, 2), {}),
    ("w1s1l0", 20, comp(1, 1, 0), {}),
    ("short_prompt_t5", 5, comp(8, 4, 4), {}),
    ("ragged_w5s3l2_t23", 23, comp(5, 3, 2), {}),
    ("rope_entry_w8s4l4", 30, comp(8, 4, 4, rope="entry"), {}),
    ("gap_w8s4l0", 22, comp(8, 4, 0), {}),
    ("sliding_l6", 24, SLIDING6, {}),
    ("mixed_full_sliding_cmp", 27, [{"kind": "full"}, SLIDING6, comp(8, 4, 4)], {}),
    ("scalar_shared", 30, comp(8, 4, 4, gate="scalar"), {"dtypes": {"cmp_k_gate.weight": "BF16"}}),
    ("scalar_bias_only", 25, comp(6, 3, 2, gate="scalar"), {"gate_weights": False}),
    ("vector_shared", 28, comp(8, 4, 4, gate="vector"), {}),
    ("scalar_offset", 26, comp(4, 2, 2, gate="scalar", gate_maps="offset"), {}),
    ("vector_offset", 31, comp(8, 4, 3, gate="vector", gate_maps="offset"), {}),
    ("payload_map_shared_f16", 30, comp(8, 4, 4, payload="map"),
     {"dtypes": {"cmp_k.weight": "F16", "cmp_v.weight": "F16"}}),
    ("payload_map_offset", 25, comp(6, 3, 2, gate="scalar", payload="map", payload_maps="offset"), {}),
    ("entry_norm", 30, comp(8, 4, 4, rope="entry", entry_norm=True), {}),
    ("vector_map_entry_norm", 32, comp(8, 4, 4, rope="entry", entry_norm=True, gate="vector", payload="map"), {}),
    ("sinks_all_kinds", 26, [{"kind": "full", "sink": True}, dict(SLIDING6, sink=True),
                             comp(8, 4, 4, sink=True)], {}),
    ("planted_k2_v5", 40, comp(8, 8, 16, gate="planted", K=2, V=5, strength=10.0), {}),
    ("planted_weak5", 40, comp(8, 8, 16, gate="planted", weak=[5], strength=10.0), {}),
    ("planted_weak13_s6", 26, comp(4, 2, 2, gate="planted", weak=[1, 3], strength=6.0), {}),
    # Qwen2 (q/k/v biases) and Qwen3 (per-head q/k RMSNorm), NeoX RoPE: full attention and one
    # compressed retrofit each (their own tiny GGUFs, "arch" below).
    ("qwen2_full", 24, {"kind": "full"}, {"arch": "qwen2"}),
    ("qwen2_w8s4l4", 30, comp(8, 4, 4), {"arch": "qwen2"}),
    ("qwen3_full", 24, {"kind": "full"}, {"arch": "qwen3"}),
    ("qwen3_w8s4l4_scalar", 30, comp(8, 4, 4, gate="scalar", rope="entry", entry_norm=True), {"arch": "qwen3"}),
    ("mixed_gates", 30, [comp(6, 3, 2, gate="scalar"),
                         comp(4, 2, 1, gate="vector", gate_maps="offset", rope="entry"),
                         comp(4, 4, 4, gate="planted", K=1, V=3, strength=10.0)], {}),
]


def _num(x):
    return f"{float(x):g}"


def kv_params(spec):
    """One layer spec -> 'KIND[:PARAMS]' in PhaseKV's --kv syntax (a planted gate goes last)."""
    kind = spec["kind"]
    p = []
    if kind == "sliding":
        p.append(f"L={spec['L']}")
    elif kind == "compressed":
        W, S, L = spec["W"], spec["S"], spec["L"]
        gate = spec.get("gate", "uniform")
        rope = spec.get("rope", "token")
        payload = spec.get("payload", "layer")
        p += [f"W={W}", f"S={S}", f"L={L}", f"rope={rope}"]
        if gate in ("scalar", "vector"):
            p.append(f"gate_maps={spec.get('gate_maps', 'shared')}")
        p.append(f"payload={payload}")
        if payload == "map":
            p.append(f"payload_maps={spec.get('payload_maps', 'shared')}")
        if rope == "entry":
            p.append(f"entry_norm={1 if spec.get('entry_norm', False) else 0}")
        if L < S - 1:
            p.append("gap=1")
    elif kind != "full":
        raise ValueError(kind)
    sink = spec.get("sink")
    if sink is True:
        p.append("sink=1")
    elif sink not in (None, False):
        raise ValueError("inline sink values cannot be expressed as --kv; use \"sink\": true")
    if kind == "compressed":
        gate = spec.get("gate", "uniform")
        if gate == "planted":
            if "weak" in spec:
                weak = spec["weak"] if isinstance(spec["weak"], list) else [spec["weak"]]
                g = "weak=" + ",".join(str(int(a)) for a in weak)
            else:
                g = f"K={int(spec['K'])},V={int(spec['V'])}"
            p.append(f"gate=planted:{g},strength={_num(spec.get('strength', 10.0))}")
        else:
            p.append(f"gate={gate}")
    return kind + (":" + ",".join(p) if p else "")


def kv_strings(specs):
    """All layers equal -> ['all:...']; otherwise one string per layer ('0:...', '1:...', ...)."""
    if all(s == specs[0] for s in specs):
        return ["all:" + kv_params(specs[0])]
    return [f"{il}:{kv_params(s)}" for il, s in enumerate(specs)]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    t0 = time.time()

    gguf_name = "tiny_cmp.gguf"
    models = {}
    for arch, name in (("llama", gguf_name), ("qwen2", "tiny_cmp_qwen2.gguf"), ("qwen3", "tiny_cmp_qwen3.gguf")):
        gguf_path = os.path.join(args.out_dir, name)
        cr.make_tiny(gguf_path, seed=args.seed, arch=arch)
        hp, w = load_model(gguf_path)
        assert hp["vocab_size"] == VOCAB and hp["n_layer"] == 3 and hp["arch"] == arch
        models[arch] = (name, hp, w)
        print(f"wrote {gguf_path} ({time.time() - t0:.2f}s)")

    names = [c[0] for c in CASES]
    assert len(set(names)) == len(names)
    out_cases = []
    for ci, (name, T, specs, opt) in enumerate(CASES):
        t1 = time.time()
        case_gguf, hp, w = models[opt.get("arch", "llama")]
        specs = [dict(s) for s in (specs if isinstance(specs, list) else [specs] * hp["n_layer"])]
        rng = np.random.default_rng([args.seed, ci])
        ids = [int(i) for i in rng.integers(3, VOCAB, size=T)]
        tens = cr.random_cmp_tensors(hp, specs, rng, gate_weights=opt.get("gate_weights", True))
        gates_name = None
        gates = None
        if tens:
            dts = {}
            for n in tens:
                for suffix, dt in opt.get("dtypes", {}).items():
                    if n.endswith("." + suffix):
                        dts[n] = dt
            assert set(dts.values()) <= {"F16", "BF16"} and not any(n.endswith(".bias") for n in dts)
            if opt.get("dtypes"):
                assert dts, f"{name}: dtypes matched no tensor"
            gates_name = f"{name}.safetensors"
            gpath = os.path.join(args.out_dir, gates_name)
            cr.write_safetensors(gpath, tens, dts, {"case": name, "generator": "compressed_fixtures.py"})
            gates = cr.TensorSource(cr.read_safetensors(gpath)[0], gpath)  # what the file really holds
        layers = cr.parse_layers(specs, hp, gates=gates)
        if gates is not None and gates.unused():
            raise SystemExit(f"{name}: tensors written but unused: {gates.unused()}")
        m = cr.CompressedLlama(hp, w, layers)
        logits = m.forward_batch(ids).astype("<f4")
        assert logits.shape == (T, VOCAB) and np.all(np.isfinite(logits))
        stream_d = cr._maxdiff(m.run_stream(ids), logits)
        assert stream_d < 2e-4, f"{name}: batch vs stream {stream_d}"

        ids_name, logits_name = f"{name}.ids.json", f"{name}.f32"
        with open(os.path.join(args.out_dir, ids_name), "w") as f:
            json.dump(ids, f)
            f.write("\n")
        logits.tofile(os.path.join(args.out_dir, logits_name))
        kv = kv_strings(specs)
        out_cases.append({"name": name, "gguf": case_gguf, "kv": kv, "gates": gates_name, "layers": specs,
                          "ids": ids_name, "logits": logits_name, "T": T, "vocab": VOCAB})
        print(f"  {name:<24s} T={T:<3d} gates={'yes' if gates_name else 'no ':<3s} "
              f"stream max|d|={stream_d:.1e}  {time.time() - t1:.2f}s  --kv {' --kv '.join(kv)}")

    with open(os.path.join(args.out_dir, "cases.json"), "w") as f:
        json.dump({"gguf": gguf_name, "cases": out_cases}, f, indent=1)
        f.write("\n")
    print(f"wrote {len(out_cases)} cases to {args.out_dir}/cases.json in {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
