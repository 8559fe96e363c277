#!/usr/bin/env python3
"""Reference data for the CPU engine tests (tests/unit/test_engine.cpp), computed without PhaseKV:

  1. five prompts (plain, chat-templated, code, non-English, digits and punctuation) are
     tokenized with the HF `tokenizers` reference of tokenizer_ref.py;
  2. llama_ref.py (numpy) computes the final-position logits and 32 greedy tokens for each.

The chat prompt is rendered here by hand in SmolLM2's ChatML format (the model's template:
a default system message, then <|im_start|>user ... <|im_end|>, then the assistant header).

Usage: engine_fixtures.py --gguf MODEL.gguf --out-dir DIR
Writes DIR/prompts.json ({"prompts": [{"name", "text", "parse_special", "ids"}]}) and the
llama_ref outputs DIR/ref_<name>.json / .f32.
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import tokenizer_ref  # noqa: E402

SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
PROMPTS = [
    ("plain", "The capital of France is", False),
    ("chat", "<|im_start|>system\n" + SYSTEM + "<|im_end|>\n<|im_start|>user\nWhat is the tallest mountain "
             "in the world?<|im_end|>\n<|im_start|>assistant\n", True),
    ("code", "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n    if n < 2:\n        return n\n"
             "    return", False),
    ("nonenglish", "La tour Eiffel se trouve à Paris. 东京是日本的首都。 Москва — столица", False),
    ("digits", "Count: 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12... and then {\"x\": [3.14, -2e5]} ->", False),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--n-predict", type=int, default=32)
    a = ap.parse_args()
    os.makedirs(a.out_dir, exist_ok=True)
    tok = tokenizer_ref.build_tokenizer(tokenizer_ref.load_gguf_vocab(a.gguf))
    prompts = []
    for name, text, special in PROMPTS:
        ids = tok.encode(text, add_special_tokens=False).ids
        prompts.append({"name": name, "text": text, "parse_special": special, "ids": ids})
    path = os.path.join(a.out_dir, "prompts.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"prompts": prompts}, f, ensure_ascii=False)
    subprocess.run([sys.executable, os.path.join(HERE, "llama_ref.py"), "--gguf", a.gguf, "--prompts", path,
                    "--n-predict", str(a.n_predict), "--out-dir", a.out_dir], check=True)
    print("engine fixtures written to", a.out_dir)


if __name__ == "__main__":
    sys.exit(main())
