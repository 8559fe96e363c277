#!/usr/bin/env python3
"""Reference logits of SmolLM2 with compressed memories, computed without PhaseKV: a fixed
ChatML prompt tokenized with the HF `tokenizers` reference (tokenizer_ref.py), then every
position's logits from compressed_ref.py (numpy) for a few retrofits of all 30 layers.

Usage: compressed_smollm2.py --gguf SmolLM2.gguf --out-dir DIR
Writes DIR/cases.json ({"ids": [...], "cases": [{"name", "kv": [...], "logits": "<name>.f32"}]})
and DIR/<name>.f32 (float32 [T, vocab]).
"""
import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import tokenizer_ref  # noqa: E402
from compressed_ref import CompressedLlama, load_model, parse_layers  # noqa: E402

TEXT = ("<|im_start|>user\nThe lighthouse keeper wrote the code 4471 on the wall, then locked the door and "
        "walked down to the harbour.<|im_end|>\n<|im_start|>assistant\nThe code on the wall was")

# name, --kv strings for phasekv convert, reference spec for every layer
CASES = [
    ("w8s4l8_uniform", ["all:compressed:W=8,S=4,L=8,gate=uniform"],
     {"kind": "compressed", "W": 8, "S": 4, "L": 8, "gate": "uniform"}),
    ("w8s8l16_planted_weak5", ["all:compressed:W=8,S=8,L=16,gate=planted:weak=5,strength=10"],
     {"kind": "compressed", "W": 8, "S": 8, "L": 16, "gate": "planted", "weak": [5], "strength": 10.0}),
    ("w4s4l3_entry", ["all:compressed:W=4,S=4,L=3,rope=entry"],
     {"kind": "compressed", "W": 4, "S": 4, "L": 3, "gate": "uniform", "rope": "entry"}),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--out-dir", required=True)
    a = ap.parse_args()
    os.makedirs(a.out_dir, exist_ok=True)
    tok = tokenizer_ref.build_tokenizer(tokenizer_ref.load_gguf_vocab(a.gguf))
    ids = tok.encode(TEXT, add_special_tokens=False).ids
    hp, w = load_model(a.gguf)
    out = {"ids": ids, "cases": []}
    for name, kv, spec in CASES:
        t0 = time.time()
        m = CompressedLlama(hp, w, parse_layers(spec, hp))
        logits = m.forward_batch(ids)
        logits.astype("<f4").tofile(os.path.join(a.out_dir, name + ".f32"))
        out["cases"].append({"name": name, "kv": kv, "logits": name + ".f32"})
        print(f"{name}: T={len(ids)} {time.time() - t0:.1f}s")
    with open(os.path.join(a.out_dir, "cases.json"), "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    sys.exit(main())
