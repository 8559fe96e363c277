#!/usr/bin/env python3
"""Writes the GGUF fixtures of the import tests with the `gguf` package from PyPI (an
implementation independent of PhaseKV's own GGUF reader), plus JSON files with what the
C++ tests must find: metadata values, tensor placement in the file (absolute byte offsets,
read back with gguf's own reader) and dequantized values computed by gguf.quants.

Usage: make_gguf_fixtures.py OUT_DIR [--smollm2 PATH.gguf]
"""
import argparse
import json
import os
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q, GGUFValueType as VT

# Tiny llama config shared with tests/unit/test_gguf.cpp.
VOCAB, D, LAYERS, HEADS, KV_HEADS, HEAD_DIM, FFN = 64, 64, 2, 4, 2, 16, 96

# One dtype per tensor so that every supported dtype goes through import.
LAYER_DTYPES = [
    {"attn_q": Q.Q4_0, "attn_k": Q.Q4_1, "attn_v": Q.BF16, "attn_output": Q.Q8_0,
     "ffn_gate": Q.Q4_1, "ffn_up": Q.Q4_0, "ffn_down": Q.F16},
    {"attn_q": Q.Q8_0, "attn_k": Q.F16, "attn_v": Q.Q4_1, "attn_output": Q.Q4_0,
     "ffn_gate": Q.BF16, "ffn_up": Q.F32, "ffn_down": Q.Q4_1},
]


def tokens():
    toks = ["<unk>", "<|im_start|>", "<|im_end|>", "<pad>"]
    toks += ["Ġthe", "Ġa", "ä", "日本", "🚀", "\n", "ĠĠ", "x" * 300, ""]
    while len(toks) < VOCAB:
        toks.append("tok%d" % len(toks))
    return toks


def add_tensor(w, name, data_f32, qtype, expected):
    """Quantize (numpy order, outermost first) and add; record the reference dequantization."""
    if qtype == Q.F32:
        raw = data_f32.astype(np.float32)
        w.add_tensor(name, raw)
        deq = raw
    elif qtype == Q.F16:
        raw = data_f32.astype(np.float16)
        w.add_tensor(name, raw)
        deq = raw.astype(np.float32)
    else:
        raw = gguf.quants.quantize(data_f32.astype(np.float32), qtype)
        # uint8 block bytes: the writer derives the logical shape from the byte shape.
        w.add_tensor(name, raw, raw_shape=None if raw.dtype == np.uint8 else data_f32.shape, raw_dtype=qtype)
        deq = gguf.quants.dequantize(raw, qtype).astype(np.float32)
    expected[name] = {"type": qtype.name, "shape": list(data_f32.shape),
                      "dequant": [float(x) for x in deq.reshape(-1)]}


def add_raw_blocks(w, name, blocks, shape, qtype, expected):
    raw = np.frombuffer(bytes(blocks), dtype=np.uint8).reshape(shape[0], -1)
    w.add_tensor(name, raw, raw_dtype=qtype)
    expected[name] = {"type": qtype.name, "shape": list(shape), "dequant": None}


# Types whose blocks are written as random bytes with finite f16 scales (no quantizer needed):
# byte offsets of the f16 fields in each block, as ggml lays them out.
KQUANT_TYPES = [Q.Q5_0, Q.Q5_1, Q.Q2_K, Q.Q3_K, Q.Q4_K, Q.Q5_K, Q.Q6_K]
F16_FIELDS = {Q.Q5_0: [0], Q.Q5_1: [0, 2], Q.Q2_K: [80, 82], Q.Q3_K: [108], Q.Q4_K: [0, 2],
              Q.Q5_K: [0, 2], Q.Q6_K: [208]}


def add_random_blocks(w, name, qtype, rng, expected, rows=3, cols=512):
    """Random quants and sub-scales, finite f16 super-scales (both signs, subnormals too)."""
    block_elems, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
    n_blocks = rows * cols // block_elems
    raw = rng.integers(0, 256, size=(n_blocks, block_bytes), dtype=np.uint8)
    for off in F16_FIELDS[qtype]:
        scale = (rng.standard_normal(n_blocks) * 0.05).astype(np.float16)
        scale[::7] = np.float16(3e-6)  # a subnormal f16
        raw[:, off:off + 2] = scale.view(np.uint8).reshape(n_blocks, 2)
    raw = raw.reshape(rows, -1)
    w.add_tensor(name, raw, raw_dtype=qtype)
    deq = gguf.quants.dequantize(raw, qtype).astype(np.float32)
    assert deq.shape == (rows, cols) and np.isfinite(deq).all()
    expected[name] = {"type": qtype.name, "shape": [rows, cols], "dequant": [float(x) for x in deq.reshape(-1)]}


def write_tiny(path, rng, edge=False, arch="llama", extra_tensor=None):
    expected = {}
    w = gguf.GGUFWriter(path, arch)
    if edge:
        w.add_custom_alignment(64)
    w.add_name("tiny-test-model")
    w.add_uint32(f"{arch}.block_count", LAYERS)
    w.add_uint32(f"{arch}.context_length", 256)
    w.add_uint32(f"{arch}.embedding_length", D)
    w.add_uint32(f"{arch}.feed_forward_length", FFN)
    if edge:  # integer fields in other integer types must be accepted
        w.add_key_value(f"{arch}.attention.head_count", HEADS, VT.INT32)
        w.add_key_value(f"{arch}.attention.head_count_kv", KV_HEADS, VT.UINT16)
    else:
        w.add_uint32(f"{arch}.attention.head_count", HEADS)
        w.add_uint32(f"{arch}.attention.head_count_kv", KV_HEADS)
    w.add_float32(f"{arch}.attention.layer_norm_rms_epsilon", 1e-6)
    w.add_float32(f"{arch}.rope.freq_base", 50000.0)
    w.add_uint32(f"{arch}.rope.dimension_count", HEAD_DIM)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(tokens())
    w.add_token_types([3 if i < 4 else 1 for i in range(VOCAB)])
    w.add_token_merges(["Ġ t", "Ġt he", "h e"])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_pad_token_id(3)
    w.add_unk_token_id(0)
    w.add_add_bos_token(False)
    w.add_chat_template("{% for m in messages %}<|im_start|>{{ m['content'] }}<|im_end|>{% endfor %}")
    if edge:
        w.add_string("test.unicode.ключ", "värde ✓ 🚀")
        w.add_key_value("test.empty", "", VT.STRING)  # add_string() skips empty values
        w.add_string("test.long", "x" * 100000)
        w.add_uint64("test.u64", 2**63 + 5)
        w.add_int64("test.i64", -(2**62))
        w.add_float64("test.f64", 1e-300)
        w.add_bool("test.bool", True)
        w.add_array("test.nested", [[1, 2], [3]])
        w.add_key_value("test.i8", -7, VT.INT8)

    def rnd(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    add_tensor(w, "token_embd.weight", rnd(VOCAB, D), Q.Q8_0, expected)
    for i in range(LAYERS):
        p = f"blk.{i}."
        dt = LAYER_DTYPES[i]
        add_tensor(w, p + "attn_norm.weight", 1.0 + 0.1 * rnd(D), Q.F32, expected)
        add_tensor(w, p + "attn_q.weight", rnd(HEADS * HEAD_DIM, D), dt["attn_q"], expected)
        add_tensor(w, p + "attn_k.weight", rnd(KV_HEADS * HEAD_DIM, D), dt["attn_k"], expected)
        add_tensor(w, p + "attn_v.weight", rnd(KV_HEADS * HEAD_DIM, D), dt["attn_v"], expected)
        add_tensor(w, p + "attn_output.weight", rnd(D, HEADS * HEAD_DIM), dt["attn_output"], expected)
        add_tensor(w, p + "ffn_norm.weight", 1.0 + 0.1 * rnd(D), Q.F32, expected)
        add_tensor(w, p + "ffn_gate.weight", rnd(FFN, D), dt["ffn_gate"], expected)
        add_tensor(w, p + "ffn_up.weight", rnd(FFN, D), dt["ffn_up"], expected)
        add_tensor(w, p + "ffn_down.weight", rnd(D, FFN), dt["ffn_down"], expected)
    add_tensor(w, "output_norm.weight", 1.0 + 0.1 * rnd(D), Q.F32, expected)
    add_tensor(w, "output.weight", rnd(VOCAB, D), Q.F16, expected)
    # Known values: f32 ramp, and hand-made blocks whose values tests/unit/test_gguf.cpp derives by hand.
    add_tensor(w, "test.ramp", (np.arange(64, dtype=np.float32) * 0.25 - 8.0).reshape(2, 32), Q.F32, expected)
    q4_1 = [0x00, 0x38, 0x00, 0xBC] + list(range(16))  # d = 0.5, m = -1.0, qs[j] = j
    q4_0 = [0x00, 0x40] + [0x8F - j for j in range(16)]  # d = 2.0
    q8_0 = [0x00, 0x34] + [(j * 9 - 128) & 0xFF for j in range(32)]  # d = 0.25
    add_raw_blocks(w, "test.hand_q4_1", q4_1, (1, 32), Q.Q4_1, expected)
    add_raw_blocks(w, "test.hand_q4_0", q4_0, (1, 32), Q.Q4_0, expected)
    add_raw_blocks(w, "test.hand_q8_0", q8_0, (1, 32), Q.Q8_0, expected)
    if extra_tensor == "iq4_xs":
        add_raw_blocks(w, "test.iq4_xs", [0] * 136, (1, 256), Q.IQ4_XS, expected)
    if extra_tensor is None and not edge and arch == "llama":
        # Random blocks of the 5-bit and K-quant types (llama.cpp's Q*_K_M mixes use all of
        # them), dequantized by gguf.quants: the independent reference for PhaseKV's decoders.
        for qtype in KQUANT_TYPES:
            add_random_blocks(w, "test.rand_" + qtype.name.lower(), qtype, rng, expected)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return expected


def placement(path):
    """Absolute byte ranges of every tensor, read back with gguf's own reader."""
    r = gguf.GGUFReader(path)
    out = {}
    for t in r.tensors:
        out[t.name] = {"file_offset": int(t.data_offset), "n_bytes": int(t.n_bytes),
                       "ggml_type": int(t.tensor_type), "ne": [int(x) for x in t.shape]}
    return out


def fixture(out_dir, name, **kw):
    path = os.path.join(out_dir, name + ".gguf")
    rng = np.random.default_rng(1234)
    expected = write_tiny(path, rng, **kw)
    where = placement(path)
    for k, v in expected.items():
        v.update(where[k])
    with open(os.path.join(out_dir, name + ".json"), "w") as f:
        json.dump({"tensors": expected}, f)


def smollm2_facts(path, out_dir):
    r = gguf.GGUFReader(path)

    def field(key):
        return r.fields[key].contents()

    toks = r.fields["tokenizer.ggml.tokens"].contents()
    facts = {
        "architecture": field("general.architecture"),
        "vocab_size": len(toks),
        "d_model": int(field("llama.embedding_length")),
        "n_layers": int(field("llama.block_count")),
        "n_heads": int(field("llama.attention.head_count")),
        "n_kv_heads": int(field("llama.attention.head_count_kv")),
        "ffn_dim": int(field("llama.feed_forward_length")),
        "max_positions": int(field("llama.context_length")),
        "rope_theta": float(field("llama.rope.freq_base")),
        "norm_eps": float(field("llama.attention.layer_norm_rms_epsilon")),
        "bos_id": int(field("tokenizer.ggml.bos_token_id")),
        "eos_id": int(field("tokenizer.ggml.eos_token_id")),
        "n_merges": len(r.fields["tokenizer.ggml.merges"].contents()),
        "chat_template": field("tokenizer.chat_template"),
        "tokens": {str(i): toks[i] for i in (0, 1, 2, 17, 100, 1000, 30000, len(toks) - 1)},
        "tensors": placement(path),
    }
    with open(os.path.join(out_dir, "smollm2_facts.json"), "w") as f:
        json.dump(facts, f)


def tiny_qwen3_real_vocab(path, out_dir):
    """A tiny random qwen3 model (3 layers, d = 64) carrying SmolLM2's real 49,152-token vocabulary
    under the qwen2 pre-tokenizer: enough words and sentences for the self-test's probes."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import compressed_ref
    r = gguf.GGUFReader(path)
    vocab = {
        "tokens": r.fields["tokenizer.ggml.tokens"].contents(),
        "types": r.fields["tokenizer.ggml.token_type"].contents(),
        "merges": r.fields["tokenizer.ggml.merges"].contents(),
        "pre": "qwen2",
        "bos": int(r.fields["tokenizer.ggml.bos_token_id"].contents()),
        "eos": int(r.fields["tokenizer.ggml.eos_token_id"].contents()),
    }
    compressed_ref.make_tiny(os.path.join(out_dir, "tiny_qwen3_vocab.gguf"), seed=3, arch="qwen3", vocab=vocab)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir")
    ap.add_argument("--smollm2", default="")
    a = ap.parse_args()
    os.makedirs(a.out_dir, exist_ok=True)
    fixture(a.out_dir, "tiny")
    fixture(a.out_dir, "tiny_edge", edge=True)
    fixture(a.out_dir, "tiny_qwen", arch="qwen2")  # llama tensors only: qwen2's q/k/v biases missing
    fixture(a.out_dir, "tiny_gemma", arch="gemma2")  # an architecture PhaseKV does not implement
    fixture(a.out_dir, "tiny_iq4xs", extra_tensor="iq4_xs")
    if a.smollm2:
        smollm2_facts(a.smollm2, a.out_dir)
        tiny_qwen3_real_vocab(a.smollm2, a.out_dir)
    print("fixtures written to", a.out_dir)


if __name__ == "__main__":
    sys.exit(main())
