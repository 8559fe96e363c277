#!/usr/bin/env python3
"""A layer-truncated model on PhaseKV's CPU backend against the independent numpy reference
(llama_ref.py, which shares no code with PhaseKV): the same greedy continuation of two prompts.
Usage: check_truncated.py --gguf G.gguf --pkv G.pkv --phasekv PATH [--n 16]"""
import argparse
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference"))
import llama_ref  # noqa: E402
import tokenizer_ref  # noqa: E402

PROMPTS = ["The capital of France is", "def fibonacci(n):\n    return"]


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--pkv", required=True)
    ap.add_argument("--phasekv", required=True)
    ap.add_argument("--n", type=int, default=16)
    a = ap.parse_args()
    tok = tokenizer_ref.build_tokenizer(tokenizer_ref.load_gguf_vocab(a.gguf))
    hp, w = llama_ref.load_model(a.gguf)
    model = llama_ref.Llama(hp, w)
    failed = 0
    for text in PROMPTS:
        ids = tok.encode(text, add_special_tokens=False).ids
        _, greedy = llama_ref.run_prompt(model, ids, a.n)
        # phasekv run stops at the model's end-of-sequence tokens (the reference does not): compare
        # up to the first special token.
        k = next((i for i, t in enumerate(greedy) if (tok.id_to_token(t) or "").startswith("<|")), len(greedy))
        want = tok.decode(greedy[:k], skip_special_tokens=False)
        # The reference kernels (f32 activations, what the GPU is checked against): `run`'s default
        # q8 mode may take the other side of a near-tie, as on a Q4_K_M cut's first prompt.
        p = subprocess.run([a.phasekv, "run", "-m", a.pkv, "-p", text, "--greedy", "-n", str(k), "-t", "2",
                            "--kernels", "reference"],
                           capture_output=True, text=True)
        got = p.stdout  # the prompt, then the continuation
        ok = p.returncode == 0 and got.rstrip("\n") == text + want
        print(("ok  " if ok else "FAIL") + f" {text!r}: reference {want!r}, phasekv {got!r}")
        failed += not ok
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
