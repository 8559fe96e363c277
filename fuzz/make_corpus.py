#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets (docs/FUZZING.md) into fuzz/corpus/.

Standard library only: the GGUF files are written by the small writer below (independent of
PhaseKV's reader); the .pkv seeds are converted from them with the phasekv tool.

Usage: fuzz/make_corpus.py --phasekv build/host-cpu/tools/phasekv [--out fuzz/corpus]

Seeds keep no .gguf/.pkv extension (the repository ignores those names). Files that
libFuzzer found (crash reproducers kept as regression seeds, named regress-*) are left alone.
"""
import argparse
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile

# ---- GGUF writer ---------------------------------------------------------------------------

U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
SCALAR_FMT = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f", BOOL: "<?",
              U64: "<Q", I64: "<q", F64: "<d"}
GGML = {"F32": 0, "F16": 1, "Q4_0": 2, "Q4_1": 3, "Q8_0": 8, "Q6_K": 14, "BF16": 30}


def gstr(s):
    b = s.encode("utf-8") if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def gvalue(vtype, v):
    if vtype == STRING:
        return gstr(v)
    if vtype == ARRAY:
        etype, items = v
        out = struct.pack("<IQ", etype, len(items))
        for x in items:
            out += gvalue(etype, x)
        return out
    return struct.pack(SCALAR_FMT[vtype], v)


def write_gguf(kvs, tensors, version=3, alignment=32):
    """kvs: [(key, type, value)]; tensors: [(name, ggml_type_name, ne, bytes)] with ne in GGUF
    order (ne[0] contiguous)."""
    out = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs))
    for key, vtype, v in kvs:
        out += gstr(key) + struct.pack("<I", vtype) + gvalue(vtype, v)
    offset = 0
    offsets = []
    for name, tname, ne, data in tensors:
        offsets.append(offset)
        out += gstr(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", n) for n in ne)
        out += struct.pack("<IQ", GGML[tname], offset)
        offset += len(data)
        offset = (offset + alignment - 1) // alignment * alignment
    out += b"\0" * ((-len(out)) % alignment)
    base = len(out)
    for (name, tname, ne, data), off in zip(tensors, offsets):
        out += b"\0" * (base + off - len(out))
        out += data
    return out


# ---- tensor bytes (deterministic, finite) ---------------------------------------------------

class Rng:
    def __init__(self, seed):
        self.x = seed

    def next(self):
        self.x = (self.x * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        return self.x >> 33

    def normal(self):
        return (self.next() % 2001 - 1000) / 1000.0


def f16(x):
    return struct.pack("<e", x)


def bf16(x):
    return struct.pack("<f", x)[2:]


def tensor_bytes(rng, tname, rows, cols, ones=False):
    vals = [1.0 + 0.1 * rng.normal() if ones else rng.normal() for _ in range(rows * cols)]
    if tname == "F32":
        return b"".join(struct.pack("<f", v) for v in vals)
    if tname == "F16":
        return b"".join(f16(v) for v in vals)
    if tname == "BF16":
        return b"".join(bf16(v) for v in vals)
    out = b""
    for b in range(rows * cols // 32):
        if tname == "Q8_0":
            out += f16(0.01) + bytes((rng.next() % 256) for _ in range(32))
        elif tname == "Q4_0":
            out += f16(0.1) + bytes((rng.next() % 256) for _ in range(16))
        elif tname == "Q4_1":
            out += f16(0.1) + f16(-0.5) + bytes((rng.next() % 256) for _ in range(16))
        elif tname == "Q6_K":
            out += bytes(210 * (cols // 256)) if b == 0 else b""
        else:
            raise ValueError(tname)
    return out


# ---- the tiny llama models ----------------------------------------------------------------

D, HEADS, KV_HEADS, HEAD_DIM, FFN = 32, 2, 1, 16, 32


def gpt2_byte_text(b):
    """GPT-2's byte -> code point map, as text."""
    n = 0
    for x in range(256):
        printable = 33 <= x <= 126 or 161 <= x <= 172 or 174 <= x <= 255
        cp = x if printable else 256 + n
        if not printable:
            n += 1
        if x == b:
            return chr(cp)


def bl(s):
    """Byte-level (GPT-2 alphabet) text of the UTF-8 string s."""
    return "".join(gpt2_byte_text(b) for b in s.encode("utf-8"))


def bpe_vocab():
    toks = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    toks += [bl(" "), bl("\n")] + [chr(c) for c in range(ord("a"), ord("z") + 1)] + list("0123")
    toks += [bl(" t"), "he", bl(" the"), bl(" a"), "ll", bl("日"), bl("🚀"), bl("\n\n")]
    types = [3, 3, 3] + [1] * (len(toks) - 3)
    merges = [bl(" ") + " t", "h e", bl(" t") + " he", bl(" ") + " a", "l l", bl("\n") + " " + bl("\n")]
    return toks, types, merges


def spm_vocab():
    sp = "\u2581"
    toks = ["<unk>", "<s>", "</s>", "<0x0A>", "<0x20>", "<0xE2>", "<0x96>", "<0x81>", "<0xF0>", "<0x9F>",
            sp, sp + "t", "he", sp + "the", "t", "h", "e", "a", sp + "a", "o", "l", "ll", "\u65e5", "\u672c"]
    types = [2, 3, 3] + [6] * 7 + [1] * (len(toks) - 10)
    scores = [0.0] * 10 + [-1.0 - 0.25 * i for i in range(len(toks) - 10)]
    return toks, types, scores


CHATML = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
          "{{ '<|im_start|>system\nYou are a tiny test model.<|im_end|>\n' }}{% endif %}"
          "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
          "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
LLAMA3 = ("{{ '<|begin_of_text|>' }}{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + "
          "'<|end_header_id|>\n\n' + message['content'] + '<|eot_id|>' }}{% endfor %}")


def llama_model(seed, layers=2, tokenizer="bpe", tied=False, llama3_rope=False, arch="llama", extra_kv=(),
                extra_tensors=(), int_types=False, layer_dtypes=None):
    rng = Rng(seed)
    kvs = [("general.architecture", STRING, arch), ("general.name", STRING, "fuzz-seed-%d" % seed)]
    a = arch + "."
    kvs += [(a + "block_count", U32, layers), (a + "context_length", U32, 128), (a + "embedding_length", U32, D),
            (a + "feed_forward_length", U32, FFN)]
    if int_types:
        kvs += [(a + "attention.head_count", I32, HEADS), (a + "attention.head_count_kv", U16, KV_HEADS)]
    else:
        kvs += [(a + "attention.head_count", U32, HEADS), (a + "attention.head_count_kv", U32, KV_HEADS)]
    kvs += [(a + "attention.layer_norm_rms_epsilon", F32, 1e-5), (a + "rope.freq_base", F32, 10000.0),
            (a + "rope.dimension_count", U32, HEAD_DIM)]
    if tokenizer == "bpe":
        toks, types, merges = bpe_vocab()
        kvs += [("tokenizer.ggml.model", STRING, "gpt2"), ("tokenizer.ggml.pre", STRING, "smollm"),
                ("tokenizer.ggml.tokens", ARRAY, (STRING, toks)), ("tokenizer.ggml.token_type", ARRAY, (I32, types)),
                ("tokenizer.ggml.merges", ARRAY, (STRING, merges)), ("tokenizer.ggml.bos_token_id", U32, 1),
                ("tokenizer.ggml.eos_token_id", U32, 2), ("tokenizer.ggml.padding_token_id", U32, 0),
                ("tokenizer.ggml.add_bos_token", BOOL, False), ("tokenizer.chat_template", STRING, CHATML)]
    elif tokenizer == "spm":
        toks, types, scores = spm_vocab()
        kvs += [("tokenizer.ggml.model", STRING, "llama"), ("tokenizer.ggml.tokens", ARRAY, (STRING, toks)),
                ("tokenizer.ggml.scores", ARRAY, (F32, scores)), ("tokenizer.ggml.token_type", ARRAY, (I32, types)),
                ("tokenizer.ggml.bos_token_id", U32, 1), ("tokenizer.ggml.eos_token_id", U32, 2),
                ("tokenizer.ggml.unknown_token_id", U32, 0), ("tokenizer.ggml.add_bos_token", BOOL, True),
                ("tokenizer.ggml.add_space_prefix", BOOL, True), ("tokenizer.chat_template", STRING, LLAMA3)]
    else:
        toks = ["t%d" % i for i in range(8)]
    kvs += list(extra_kv)
    vocab = len(toks)
    q, kv = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
    t = []

    def add(name, tname, rows, cols, ones=False):
        data = tensor_bytes(rng, tname, rows, cols, ones)
        t.append((name, tname, [cols] if rows == 1 and ones else [cols, rows], data))

    add("token_embd.weight", "Q8_0", vocab, D)
    dts = layer_dtypes or [["Q4_1", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q8_0"]] + \
        [["Q4_0"] * 7] * (layers - 1)
    for i in range(layers):
        p = "blk.%d." % i
        dt = dts[min(i, len(dts) - 1)]
        add(p + "attn_norm.weight", "F32", 1, D, ones=True)
        add(p + "attn_q.weight", dt[0], q, D)
        add(p + "attn_k.weight", dt[1], kv, D)
        add(p + "attn_v.weight", dt[2], kv, D)
        add(p + "attn_output.weight", dt[3], D, q)
        add(p + "ffn_norm.weight", "F32", 1, D, ones=True)
        add(p + "ffn_gate.weight", dt[4], FFN, D)
        add(p + "ffn_up.weight", dt[5], FFN, D)
        add(p + "ffn_down.weight", dt[6], D, FFN)
    add("output_norm.weight", "F32", 1, D, ones=True)
    if not tied:
        add("output.weight", "Q4_0", vocab, D)
    if llama3_rope:
        add("rope_freqs.weight", "F32", 1, HEAD_DIM // 2, ones=True)
    for name, tname, rows, cols in extra_tensors:
        add(name, tname, rows, cols)
    return kvs, t


def gguf_seeds():
    seeds = {}
    kvs, t = llama_model(1)
    seeds["bpe-2layer"] = write_gguf(kvs, t)
    kvs, t = llama_model(2, layers=1, tokenizer="spm", tied=True, llama3_rope=True)
    seeds["spm-tied-llama3rope-v2-align64"] = write_gguf(kvs, t, version=2, alignment=64)
    edge = [("test.unicode.\u043a\u043b\u044e\u0447", STRING, "v\u00e4rde \u2713 \U0001F680"), ("test.empty", STRING, ""),
            ("test.u64", U64, 2**63 + 5), ("test.i64", I64, -(2**62)), ("test.f64", F64, 1e-300),
            ("test.bool", BOOL, True), ("test.i8", I8, -7), ("test.u8", U8, 200), ("test.i16", I16, -300),
            ("test.nested", ARRAY, (ARRAY, [(I32, [1, 2]), (I32, [3])])), ("test.f32s", ARRAY, (F32, [0.5, -1.0])),
            ("general.alignment", U32, 64)]
    kvs, t = llama_model(3, layers=1, int_types=True, extra_kv=edge)
    seeds["bpe-edge-metadata"] = write_gguf(kvs, t, alignment=64)
    kvs, t = llama_model(4, layers=1, tokenizer="none",
                         extra_kv=[("llama.rope.scaling.type", STRING, "linear"), ("llama.rope.scaling.factor", F32, 2.0)])
    seeds["notok-rope-linear"] = write_gguf(kvs, t)
    kvs, t = llama_model(5, layers=1, tokenizer="none", extra_tensors=[("test.q6_k", "Q6_K", 1, 256)])
    seeds["unsupported-q6k"] = write_gguf(kvs, t)
    kvs, t = llama_model(6, layers=1, tokenizer="none", arch="qwen2")
    seeds["unsupported-qwen2"] = write_gguf(kvs[:6], t[:2])
    kvs, _ = llama_model(7, layers=1)
    seeds["metadata-only"] = write_gguf(kvs, [])
    return seeds


# ---- safetensors (compressor gates for one .pkv seed) ---------------------------------------

def safetensors(tensors):
    header, data = {}, b""
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((-len(h)) % 8)
    return struct.pack("<Q", len(h)) + h + data


def gates_layer1(rng):
    W, G, kvd = 4, KV_HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
    f32 = lambda n: b"".join(struct.pack("<f", 0.1 * rng.normal()) for _ in range(n))
    f16s = lambda n: b"".join(f16(0.1 * rng.normal()) for _ in range(n))
    out = []
    for b in "kv":
        out.append(("blk.1.cmp_%s_gate.bias" % b, "F32", [W, G], f32(W * G)))
        out.append(("blk.1.cmp_%s_gate.weight" % b, "F16", [G, D], f16s(G * D)))
        out.append(("blk.1.cmp_%s.weight" % b, "F16", [kvd, D], f16s(kvd * D)))
    out.append(("blk.1.cmp_k_norm.weight", "F32", [HEAD_DIM], f32(HEAD_DIM)))
    out.append(("blk.1.attn_sink", "F32", [HEADS], f32(HEADS)))
    return out


# ---- text seeds -------------------------------------------------------------------------------

TOKENIZER_TEXTS = {
    "ascii": "The quick brown fox jumps over the lazy dog. It's 10:30, isn't it? I'll say we've done 42 tasks.",
    "code": "def f(x):\n    return x ** 2  # square\n\n\tif (a && b) { c[i] = 0x1F; }\r\n",
    "digits": "3.14159 2718281828 1,000,000 \u0663\u0664\u0665 \u00bd \u2163 12345678901234567890",
    "whitespace": "  leading\n\n\ntrailing   \t \u00a0nbsp \u3000ideographic   ",
    "unicode": "caf\u00e9 na\u00efve \u00fcber \u65e5\u672c\u8a9e \ud55c\uad6d\uc5b4 \u0440\u0443\u0441\u0441\u043a\u0438\u0439 "
               "\u0627\u0644\u0639\u0631\u0628\u064a\u0629 \u05e2\u05d1\u05e8\u05d9\u05ea \u0939\u093f\u0928\u094d\u0926\u0940",
    "emoji": "\U0001F680\U0001F600 \U0001F468\u200d\U0001F469\u200d\U0001F467 \U0001F1E9\U0001F1EA \u2764\ufe0f "
             "\U0001F44D\U0001F3FD",
    "specials": "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<|endoftext|><|im_st<|im_end|>",
    "control": "".join(chr(c) for c in range(0, 32)) + "\x7f\u0080\u009f",
    "edge-planes": "\U00040000\U0008FFFF\U000E0001\U0010FFFF\ufffd\ufeff\u2581x\u2581\u2581y",
    "long-word": "a" * 300 + " " + "ab" * 100 + " " + "\u00e9" * 80,
}
TOKENIZER_BYTES = {
    "invalid-utf8": b"ok \xff\xfe bad \xc3\x28 \xe2\x82 \xf0\x9f\x98 \xed\xa0\x80 \xc0\xaf \xf4\x90\x80\x80 end",
    "truncated-tail": "tail \U0001F680".encode()[:-1],
    "ids-edges": b"\x00\x00\x01\x00\xff\xbf\x00\xc0\xf0\xff\xf1\xff\xf2\xff\xf3\xff\xf4\xff\xf5\xff",
}

TEMPLATE_TEXTS = {
    "chatml": "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\n{{content}}<|im_end|>\n"
              "<|im_start|>assistant\n",
    "chatml-noslot": "<|im_start|>user\nhello<|im_end|>\n",
    "two-slots": "{{content}} and {{content}}",
    "slot-in-special": "<|im_st{{content}}art|>user\n",
    "slot-only": "{{content}}",
    "plain": "Q: {{content}}\nA:",
    "unicode": "\u65e5\u672c\u8a9e\u3067 {{content}} \U0001F680<|endoftext|>",
    "jinja-chatml-default-system": CHATML,
    "jinja-llama3": LLAMA3 + "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}"
                            "{% endif %}",
    "unknown-family": "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}",
}
TEMPLATE_BYTES = {
    "messages": CHATML.encode() + b"\0system\0Be brief.\0user\0Tell me about {{content}}\0assistant\0Sure.",
    "messages-empty-role": b"<|start_header_id|>\0\0content\0user\0x",
    "invalid-utf8": b"<|im_start|>user\n\xff{{content}}\xc3<|im_end|>",
    "special-split": b"<|im_end{{content}}|>\0user\0<|im_end|>",
}


def write(path, data):
    with open(path, "wb") as f:
        f.write(data)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--phasekv", required=True, help="the phasekv tool (for the .pkv seeds)")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus"))
    a = ap.parse_args()
    dirs = {k: os.path.join(a.out, k) for k in ("gguf", "model_reader", "tokenizer", "template")}
    for d in dirs.values():
        os.makedirs(d, exist_ok=True)

    ggufs = gguf_seeds()
    for name, data in ggufs.items():
        write(os.path.join(dirs["gguf"], name), data)

    tmp = tempfile.mkdtemp()
    try:
        bpe = os.path.join(tmp, "bpe.gguf")
        write(bpe, ggufs["bpe-2layer"])
        spm = os.path.join(tmp, "spm.gguf")
        write(spm, ggufs["spm-tied-llama3rope-v2-align64"])
        gates = os.path.join(tmp, "gates.safetensors")
        write(gates, safetensors(gates_layer1(Rng(9))))
        conversions = {
            "bpe-2layer-full": (bpe, []),
            "bpe-sliding-planted": (bpe, ["--kv", "0:sliding:L=16,sink=0",
                                          "--kv", "1:compressed:W=4,S=2,L=1,gate=planted:K=1,V=3"]),
            "bpe-trained-gates": (bpe, ["--kv", "1:compressed:W=4,S=2,L=1,gate=vector,payload=map,rope=entry,"
                                                "entry_norm=1,sink=1", "--gates", gates]),
            "bpe-uniform-weak": (bpe, ["--kv", "all:compressed:W=8,S=4,L=3,gate=planted:weak=2,5,strength=20"]),
            "spm-tied-llama3rope": (spm, []),
        }
        for name, (src, args) in conversions.items():
            out = os.path.join(tmp, name + ".pkv")
            subprocess.run([a.phasekv, "convert", "--from", "gguf", src, out] + args, check=True,
                           stdout=subprocess.DEVNULL)
            with open(out, "rb") as f:
                data = f.read()
            write(os.path.join(dirs["model_reader"], name), data)
            if name == "bpe-2layer-full":
                for cut in (64, 600, len(data) - 100):
                    write(os.path.join(dirs["model_reader"], "%s-truncated-%d" % (name, cut)), data[:cut])
    finally:
        shutil.rmtree(tmp)

    for name, text in TOKENIZER_TEXTS.items():
        write(os.path.join(dirs["tokenizer"], name), text.encode("utf-8", "surrogatepass"))
    for name, data in TOKENIZER_BYTES.items():
        write(os.path.join(dirs["tokenizer"], name), data)
    for name, text in TEMPLATE_TEXTS.items():
        write(os.path.join(dirs["template"], name), text.encode())
    for name, data in TEMPLATE_BYTES.items():
        write(os.path.join(dirs["template"], name), data)
    for k, d in dirs.items():
        files = os.listdir(d)
        print("%-13s %3d files, %7d bytes" % (k, len(files), sum(os.path.getsize(os.path.join(d, f)) for f in files)))


if __name__ == "__main__":
    sys.exit(main())
