#!/usr/bin/env python3
"""Reference token ids for PhaseKV's byte-level BPE tokenizer, computed with HuggingFace `tokenizers`.

The vocabulary, merges and token types are read from a GGUF file with gguf.GGUFReader (not with
PhaseKV's reader) and turned into a tokenizers.Tokenizer configured like SmolLM2's published
tokenizer.json:

  model          BPE(vocab, merges), no unk token, no continuing_subword_prefix, no
                 end_of_word_suffix, byte_fallback=False, ignore_merges=False, no dropout
  normalizer     none
  pre_tokenizer  Sequence([Digits(individual_digits=True),
                           ByteLevel(add_prefix_space=False, use_regex=True)])
  decoder        ByteLevel()
  added tokens   every token of type 3 (CONTROL) as AddedToken(content, special=True,
                 normalized=False), so that it is matched anywhere in the input text

With --pre qwen2 the pre-tokenizer is instead Qwen2's (and Qwen3's) from their published
tokenizer.json: Sequence([Split(Regex(QWEN2_PATTERN), behavior="isolated"),
ByteLevel(add_prefix_space=False, use_regex=False)]) — run over the same GGUF vocabulary, so
PhaseKV's "qwen2" pre-tokenizer is checked without a Qwen model at hand.

Each corpus string is encoded with add_special_tokens=False and decoded back with
skip_special_tokens=False, and every string whose round trip differs is reported on stderr.

Byte-level BPE can only round-trip a byte whose byte-level character is a token. SmolLM2's
vocabulary lacks 0x04 0x06 0x13 0x14 0x16 0x1D (control characters), 0xF1 0xF2 (lead bytes of
U+40000..U+BFFFF) and bytes that never occur in UTF-8 (0xC0 0xC1 0xF5..0xFF). With no unk token,
tokenizers' BPE silently drops such a byte, so decode(encode(s)) is s's UTF-8 with those bytes
removed, decoded lossily (U+FFFD for the orphaned continuation bytes). Such strings are "lossy":
they are kept (their ids are what the reference produces) and listed in "lossy_cases"; the exit
status is 1 only for a round-trip failure that this does not explain.

Usage: tokenizer_ref.py --gguf MODEL.gguf --corpus CORPUS.json --out OUT.json
Output (UTF-8 JSON, ensure_ascii=False):
  {"cases": [{"text": str, "ids": [int, ...]}, ...],
   "missing_bytes": [int, ...],   bytes with no byte-level token
   "lossy_cases": [int, ...]}     indices into cases whose round trip drops those bytes
"""
import argparse
import json
import sys
import time

import gguf
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

# Qwen2.5 / Qwen3 tokenizer.json, "pre_tokenizer" -> Split -> pattern -> Regex.
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                 r"\s*[\r\n]+|\s+(?!\S)|\s+")

TOKEN_TYPE_CONTROL = 3


def field_contents(reader, key):
    field = reader.fields.get(key)
    if field is None:
        raise SystemExit(f"error: GGUF has no '{key}'")
    return field.contents()


def load_gguf_vocab(path):
    reader = gguf.GGUFReader(path)
    model = field_contents(reader, "tokenizer.ggml.model")
    if model != "gpt2":
        raise SystemExit(f"error: tokenizer.ggml.model is '{model}', expected 'gpt2' (byte-level BPE)")
    pre = reader.fields.get("tokenizer.ggml.pre")
    pre = pre.contents() if pre is not None else None
    tokens = field_contents(reader, "tokenizer.ggml.tokens")
    merges = field_contents(reader, "tokenizer.ggml.merges")
    types = field_contents(reader, "tokenizer.ggml.token_type")
    if len(types) != len(tokens):
        raise SystemExit(f"error: {len(tokens)} tokens but {len(types)} token types")
    vocab = {}
    for i, tok in enumerate(tokens):
        if tok in vocab:
            raise SystemExit(f"error: token {tok!r} appears twice (ids {vocab[tok]} and {i})")
        vocab[tok] = i
    pairs = []
    for i, m in enumerate(merges):
        parts = m.split(" ")
        if len(parts) != 2 or not all(parts):
            raise SystemExit(f"error: merge {i} {m!r} is not 'left right'")
        pairs.append((parts[0], parts[1]))
    control = [(i, tokens[i]) for i, t in enumerate(types) if t == TOKEN_TYPE_CONTROL]
    return {"pre": pre, "tokens": tokens, "vocab": vocab, "merges": pairs, "control": control}


def build_tokenizer(v, pre="gguf"):
    # tokenizers 0.23 rejects an explicit None for continuing_subword_prefix / end_of_word_suffix
    # ("'None' is not an instance of 'str'"), and "" would be Some(""), not None: leave them out.
    bpe = models.BPE(vocab=v["vocab"], merges=v["merges"], unk_token=None, fuse_unk=False,
                     byte_fallback=False, ignore_merges=False, dropout=None)
    # The options must hold the GPT-2 defaults whatever the binding accepted.
    assert bpe.unk_token is None and bpe.continuing_subword_prefix is None and bpe.end_of_word_suffix is None
    assert bpe.byte_fallback is False and bpe.ignore_merges is False and bpe.dropout is None
    tok = Tokenizer(bpe)
    if pre == "qwen2":
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
    else:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ])
    tok.decoder = decoders.ByteLevel()
    specials = [AddedToken(content, special=True, normalized=False, single_word=False, lstrip=False, rstrip=False)
                for _, content in v["control"]]
    tok.add_special_tokens(specials)
    # Control tokens already exist in the vocabulary: they must keep their GGUF ids.
    for i, content in v["control"]:
        got = tok.token_to_id(content)
        if got != i:
            raise SystemExit(f"error: control token {content!r} has id {got} in tokenizers, {i} in the GGUF")
    if tok.get_vocab_size(with_added_tokens=True) != len(v["tokens"]):
        raise SystemExit("error: adding the control tokens changed the vocabulary size")
    return tok


def missing_bytes(tok):
    """Bytes whose byte-level character is not a token. With no unk token, tokenizers' BPE silently
    drops such a character, so text containing that byte cannot round-trip."""
    b2u = bytes_to_unicode()
    return [b for b in range(256) if tok.token_to_id(b2u[b]) is None]


def bytes_to_unicode():
    """GPT-2's byte -> printable character map (as in tokenizers' ByteLevel)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--gguf", required=True, help="GGUF model with tokenizer.ggml.* metadata (gpt2 model)")
    ap.add_argument("--corpus", required=True, help="JSON array of strings (make_tokenizer_corpus.py)")
    ap.add_argument("--out", required=True, help="output JSON path")
    ap.add_argument("--pre", choices=["gguf", "qwen2"], default="gguf",
                    help="pre-tokenizer: SmolLM2's (the GGUF's, default) or Qwen2's")
    args = ap.parse_args()

    t0 = time.perf_counter()
    v = load_gguf_vocab(args.gguf)
    tok = build_tokenizer(v, args.pre)
    t1 = time.perf_counter()
    print(f"vocab {len(v['tokens'])}, merges {len(v['merges'])}, control tokens {len(v['control'])}, "
          f"pre '{v['pre']}' ({t1 - t0:.2f}s)", file=sys.stderr)
    missing = missing_bytes(tok)
    if missing:
        print("note: no token for byte(s) " + " ".join(f"0x{b:02X}" for b in missing)
              + ": tokenizers drops them (no unk token), strings containing them cannot round-trip",
              file=sys.stderr)

    with open(args.corpus, encoding="utf-8") as f:
        corpus = json.load(f)
    if not isinstance(corpus, list) or not all(isinstance(s, str) for s in corpus):
        raise SystemExit("error: corpus must be a JSON array of strings")
    bad = [i for i, s in enumerate(corpus) if any(0xD800 <= ord(c) <= 0xDFFF for c in s)]
    if bad:
        raise SystemExit(f"error: corpus strings {bad[:10]} contain lone surrogates (not encodable as UTF-8)")

    encodings = tok.encode_batch(corpus, add_special_tokens=False)
    missing_set = set(missing)
    cases, lossy, failures = [], [], []
    for i, (s, enc) in enumerate(zip(corpus, encodings)):
        ids = list(enc.ids)
        back = tok.decode(ids, skip_special_tokens=False)
        if back != s:
            raw = s.encode("utf-8")
            expected = bytes(b for b in raw if b not in missing_set).decode("utf-8", errors="replace")
            if missing_set & set(raw) and back == expected:
                lossy.append((i, s, back, ids))
            else:
                failures.append((i, s, back, ids))
        cases.append({"text": s, "ids": ids})
    t2 = time.perf_counter()

    with open(args.out, "w", encoding="utf-8", newline="\n") as f:
        json.dump({"cases": cases, "missing_bytes": missing, "lossy_cases": [c[0] for c in lossy]}, f,
                  ensure_ascii=False, separators=(",", ":"))
        f.write("\n")

    n_ids = sum(len(c["ids"]) for c in cases)
    print(f"{len(cases)} strings, {n_ids} tokens, encode+decode {t2 - t1:.2f}s -> {args.out}", file=sys.stderr)
    for i, s, back, ids in lossy:
        print(f"lossy #{i} (bytes without a token dropped): text={s!r} decoded={back!r}", file=sys.stderr)
    for i, s, back, ids in failures:
        print(f"ROUND TRIP FAILED #{i}: text={s!r} decoded={back!r} ids={ids[:40]}", file=sys.stderr)
    print(f"round trip: {len(cases) - len(lossy) - len(failures)} exact, {len(lossy)} lossy "
          f"(missing bytes), {len(failures)} unexplained failure(s)", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
