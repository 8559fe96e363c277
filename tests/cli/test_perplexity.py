#!/usr/bin/env python3
"""`phasekv perplexity` against an independent numpy evaluation of llama-perplexity's protocol:
the text tokenized by HF tokenizers (tokenizer_ref.py), chunks of n_ctx tokens (the first
replaced by BOS when the model adds one), the numpy forward pass (llama_ref.py) over each chunk
from an empty cache, NLL of token j + 1 from the logits at positions j = n_ctx/2 .. n_ctx-2 in
float64; PPL = exp(mean NLL). On the tiny qwen2 fixture (reference and q8 kernels) and, when
given, SmolLM2; plus the errors a user meets (text shorter than one chunk, a directory)."""
import argparse
import json
import math
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference"))
import llama_ref  # noqa: E402
import tokenizer_ref  # noqa: E402

from harness import check, summary  # noqa: E402 (tests/cli/harness.py, beside this script)




def run(args):
    p = subprocess.run([PHASEKV] + args, capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def reference_ppl(gguf_file, text, n_ctx, pre, max_chunks=None):
    v = tokenizer_ref.load_gguf_vocab(gguf_file)
    tok = tokenizer_ref.build_tokenizer(v, pre)
    ids = tok.encode(text, add_special_tokens=False).ids
    import gguf
    r = gguf.GGUFReader(gguf_file)
    f_add, f_bos = r.fields.get("tokenizer.ggml.add_bos_token"), r.fields.get("tokenizer.ggml.bos_token_id")
    bos_id = int(f_bos.contents()) if f_bos is not None else None
    bos = bool(f_add.contents()) if f_add is not None else False
    bos = bos and bos_id is not None
    if bos:
        ids = [bos_id] + ids
    hp, w = llama_ref.load_model(gguf_file)
    m = llama_ref.Llama(hp, w)
    n_chunks = len(ids) // n_ctx
    if max_chunks is not None:
        n_chunks = min(n_chunks, max_chunks)
    first = n_ctx // 2
    nll = []
    for c in range(n_chunks):
        chunk = list(ids[c * n_ctx:(c + 1) * n_ctx])
        if bos:
            chunk[0] = bos_id
        logits = m.forward(chunk, m.new_cache(n_ctx)).astype(np.float64)
        for j in range(first, n_ctx - 1):
            l = logits[j]
            mx = l.max()
            nll.append(math.log(np.exp(l - mx).sum()) + mx - l[chunk[j + 1]])
    return len(ids), float(np.exp(np.mean(nll))), len(nll), n_chunks


def phasekv_ppl(pkv, text_file, n_ctx, kernels, extra=()):
    rc, out, err = run(["perplexity", "-m", pkv, "-f", text_file, "-c", str(n_ctx), "--json", "-t", "2",
                        "--kernels", kernels] + list(extra))
    check(rc == 0, f"perplexity {pkv} {kernels}: {err}")
    return json.loads(out) if rc == 0 else None


def case(name, gguf, text, n_ctx, pre, tmp, kernels_tol, max_chunks=None):
    pkv = os.path.join(tmp, f"ppl_{name}_{os.getpid()}.pkv")
    txt = os.path.join(tmp, f"ppl_{name}_{os.getpid()}.txt")
    with open(txt, "w", encoding="utf-8") as f:
        f.write(text)
    rc, _, err = run(["convert", gguf, pkv, "--force"])
    check(rc == 0, f"convert {gguf}: {err}")
    n_tok, ref, scored, chunks = reference_ppl(gguf, text, n_ctx, pre, max_chunks)
    extra = ["--chunks", str(max_chunks)] if max_chunks is not None else []
    for kernels, tol in kernels_tol:
        got = phasekv_ppl(pkv, txt, n_ctx, kernels, extra)
        if got is None:
            continue
        print(f"{name} [{kernels}]: phasekv PPL {got['ppl']:.6f}, numpy {ref:.6f} "
              f"({chunks} chunks of {n_ctx}, {scored} scored of {n_tok} tokens)")
        check(got["tokens"] == n_tok, f"{name}: {got['tokens']} tokens, the reference tokenizer {n_tok}")
        check(got["scored"] == scored and got["chunks"] == chunks, f"{name}: scored/chunks {got}")
        check(abs(got["ppl"] - ref) <= tol * ref, f"{name} [{kernels}]: PPL {got['ppl']} vs {ref} (tol {tol})")
    # Human output: llama-perplexity's final line.
    rc, out, err = run(["perplexity", "-m", pkv, "-f", txt, "-c", str(n_ctx), "-t", "1", "--chunks", "1"])
    check(rc == 0 and out.startswith("Final estimate: PPL = ") and "[1]" in err, f"{name} human output: {out}{err}")
    # Shorter than one chunk, and a directory: exit 2 with the reason.
    rc, _, err = run(["perplexity", "-m", pkv, "-f", txt, "-c", str(n_tok + 1)])
    check(rc == 2 and f"has {n_tok} tokens" in err, f"{name}: text shorter than a chunk: {err}")
    rc, _, err = run(["perplexity", "-m", pkv, "-f", tmp, "-c", "8"])
    check(rc == 2 and "directory" in err, f"{name}: -f a directory: {err}")
    os.remove(pkv)
    os.remove(txt)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--phasekv", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--tmp", required=True)
    ap.add_argument("--smollm2", default="")
    a = ap.parse_args()
    global PHASEKV
    PHASEKV = a.phasekv

    rc, out, _ = run(["perplexity", "--help"])
    check(rc == 0 and "--ctx" in out and "--chunks" in out, "perplexity --help")

    # The tiny fixtures' vocabulary is printable ASCII without the space (and the merge "ab").
    rng = np.random.default_rng(7)
    alphabet = [chr(c) for c in range(33, 33 + 92)] + ["ab"] * 6
    tiny_text = "".join(alphabet[i] for i in rng.integers(0, len(alphabet), 300))
    # q8 leaves the F32 fixture's weights on the f32 path: the same tolerance.
    case("qwen2", os.path.join(a.data, "compressed", "tiny_cmp_qwen2.gguf"), tiny_text, 64, "qwen2", a.tmp,
         [("reference", 1e-5), ("q8", 1e-5)])
    if a.smollm2:
        text = ("The robot arm moved slowly across the table, picking up each part and placing it in the bin. "
                "Engineers watched the logs scroll by while the assistant answered questions about torque limits, "
                "battery levels and the next maintenance window. When the light turned green, the line started "
                "again, and the small language model running on the controller kept track of every request. ") * 2
        # Reference kernels: the numpy pass agrees to ~1e-5 in the logits; q8: 8-bit activations
        # move the NLL by a few 1e-3 (measured 0.2 %).
        case("smollm2", a.smollm2, text, 64, "smollm", a.tmp, [("reference", 1e-4), ("q8", 2e-2)], max_chunks=2)

    return summary()


if __name__ == "__main__":
    sys.exit(main())
