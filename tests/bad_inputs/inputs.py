"""Makes the inputs of the bad-input catalogue (cases.json) from good files by named mutations.

Nothing large is committed: corrupt .pkv and GGUF files are derived at run time from the tiny
fixture (build/*/test_data/tiny.gguf) and from .pkv files the phasekv under test converts from it.
The GGUF and FlatBuffer code here is written from the format descriptions (GGUF spec,
model_format/phasekv.fbs), independently of PhaseKV's C++ readers.

Input specs (one JSON object each):
  {"from": BASE, "ops": [OP, ...]}  a copy of a base file, then mutations in order; BASE is a
                                     name from the runner (tiny_gguf, tiny_pkv, tiny_cmp_pkv, ...)
                                     or "file:PATH" (placeholders allowed)
  {"text": "..."}                    UTF-8 text;  "repeat": N repeats it N times
  {"latin1": "..."}                  bytes: each character U+0000..U+00FF is one byte
  {"hex": "..."}                     bytes
  {"safetensors": [TENSOR, ...]}     a safetensors file (TENSOR: name, dtype, shape, optional
                                     nan_at / data_offsets / fill)
  {"dir": true}                      an (empty) directory
  {"missing": true}                  a path where nothing exists
"""
import json
import os
import struct

# ---- expressions over a file's landmarks ------------------------------------------------------


def _eval(expr, names):
    """Integer offsets in ops may be expressions over names such as size or meta_end."""
    if isinstance(expr, int):
        return expr
    return int(eval(str(expr), {"__builtins__": {}}, dict(names)))  # committed test data only


def _f32(v):
    return float("nan") if v == "nan" else float("inf") if v == "inf" else float(v)


# ---- the .pkv container ----------------------------------------------------------------------

PKV_HEADER = [  # (field, struct format, byte offset) of the 64-byte FileHeader
    ("magic", "8s", 0), ("version", "<I", 8), ("header_size", "<I", 12), ("meta_offset", "<Q", 16),
    ("meta_size", "<Q", 24), ("blob_offset", "<Q", 32), ("blob_size", "<Q", 40), ("reserved0", "<Q", 48),
    ("reserved1", "<Q", 56)]


def pkv_header(b):
    return {name: struct.unpack_from(fmt, b, off)[0] for name, fmt, off in PKV_HEADER}


def pkv_names(b):
    h = pkv_header(b)
    return {"size": len(b), "meta_offset": h["meta_offset"], "meta_size": h["meta_size"],
            "meta_end": h["meta_offset"] + h["meta_size"], "blob_offset": h["blob_offset"],
            "blob_size": h["blob_size"], "blob_end": h["blob_offset"] + h["blob_size"]}


# FlatBuffers schema of model_format/phasekv.fbs: table -> field -> (vtable slot, kind).
# Kinds: struct formats for scalars, "string", "table:T", "vtable:T" (vector of tables),
# "vstring" (vector of strings), "v<fmt>" (vector of scalars).
FB = {
    "Model": {"config": (0, "table:Config"), "layers": (1, "vtable:AttentionMemory"),
              "tensors": (2, "vtable:Tensor"), "tokenizer": (3, "table:Tokenizer"),
              "chat_template": (4, "string"), "provenance": (5, "table:Provenance"),
              "integrity": (6, "table:Integrity")},
    "Config": {"architecture": (0, "string"), "vocab_size": (1, "<I"), "d_model": (2, "<I"),
               "n_layers": (3, "<I"), "n_heads": (4, "<I"), "n_kv_heads": (5, "<I"), "head_dim": (6, "<I"),
               "ffn_dim": (7, "<I"), "norm_eps": (8, "<f"), "rope": (9, "table:Rope"),
               "max_positions": (10, "<I"), "tied_embeddings": (11, "<B"), "bos_id": (12, "<i"),
               "eos_id": (13, "<i"), "pad_id": (14, "<i")},
    "Rope": {"theta": (0, "<f"), "dim": (1, "<I"), "style": (2, "<B"), "scaling": (3, "<B"),
             "factor": (4, "<f"), "original_context": (5, "<I"), "low_freq_factor": (6, "<f"),
             "high_freq_factor": (7, "<f")},
    "AttentionMemory": {"kind": (0, "<B"), "window": (1, "<I"), "stride": (2, "<I"), "local": (3, "<I"),
                        "gate": (4, "<B"), "gate_maps": (5, "<B"), "payload": (6, "<B"),
                        "payload_maps": (7, "<B"), "kv_tied": (8, "<B"), "entry_rope": (9, "<B"),
                        "entry_norm": (10, "<B"), "sink": (11, "<B"), "gap_accepted": (12, "<B"),
                        "selection": (13, "<B"), "top_k": (14, "<I")},
    "Tensor": {"name": (0, "string"), "dtype": (1, "<B"), "shape": (2, "v<Q"), "offset": (3, "<Q"),
               "size": (4, "<Q")},
    "Tokenizer": {"type": (0, "<B"), "model": (1, "string"), "pre": (2, "string"), "tokens": (3, "vstring"),
                  "scores": (4, "v<f"), "token_types": (5, "v<i"), "merges": (6, "vstring"),
                  "bos_id": (7, "<i"), "eos_id": (8, "<i"), "eot_id": (9, "<i"), "pad_id": (10, "<i"),
                  "unk_id": (11, "<i"), "add_bos": (12, "<B"), "add_eos": (13, "<B"),
                  "add_space_prefix": (14, "<B")},
    "Provenance": {"source_file": (0, "string"), "source_format": (1, "string"), "source_name": (2, "string"),
                   "converter": (3, "string")},
    "Integrity": {"blob_hash_algorithm": (0, "<B"), "blob_hash": (1, "v<B")},
}


class FlatBuf:
    """Just enough of a FlatBuffers reader to find a field's bytes and patch them in place."""

    def __init__(self, b, base):
        self.b, self.base = b, base

    def u32(self, p):
        return struct.unpack_from("<I", self.b, p)[0]

    def root(self):
        return self.base + self.u32(self.base), "Model"

    def field_pos(self, table, ttype, field):
        if field not in FB[ttype]:
            raise ValueError("%s has no field '%s'" % (ttype, field))
        slot, kind = FB[ttype][field]
        vt = table - struct.unpack_from("<i", self.b, table)[0]
        vt_size = struct.unpack_from("<H", self.b, vt)[0]
        off = struct.unpack_from("<H", self.b, vt + 4 + 2 * slot)[0] if 4 + 2 * slot < vt_size else 0
        if off == 0:
            raise ValueError("%s.%s is absent (it has its default value): pick a field the file stores"
                             % (ttype, field))
        return table + off, kind

    def deref(self, p):
        return p + self.u32(p)

    def vector(self, table, ttype, field):
        p, kind = self.field_pos(table, ttype, field)
        v = self.deref(p)
        return v + 4, self.u32(v), kind

    def string_at(self, p):  # p: the position of a uoffset to a string
        s = self.deref(p)
        n = self.u32(s)
        return s + 4, n

    def resolve(self, target):
        """'' (the Model), 'config', 'config.rope', 'tokenizer', 'layers[N]', 'tensor:NAME'."""
        t, tt = self.root()
        if target in ("", "model"):
            return t, tt
        if target.startswith("tensor:"):
            name = target[len("tensor:"):].encode()
            start, n, _ = self.vector(t, tt, "tensors")
            for i in range(n):
                e = self.deref(start + 4 * i)
                sp, sn = self.string_at(self.field_pos(e, "Tensor", "name")[0])
                if bytes(self.b[sp:sp + sn]) == name:
                    return e, "Tensor"
            raise ValueError("no tensor '%s' in the file" % name.decode())
        for part in target.split("."):
            if part.endswith("]"):
                field, idx = part[:-1].split("[")
                start, n, kind = self.vector(t, tt, field)
                if int(idx) >= n:
                    raise ValueError("%s has %d entries" % (field, n))
                t, tt = self.deref(start + 4 * int(idx)), kind.split(":")[1]
            else:
                p, kind = self.field_pos(t, tt, part)
                t, tt = self.deref(p), kind.split(":")[1]
        return t, tt


def _pack_scalar(fmt, value, names):
    if fmt == "<f":
        return struct.pack(fmt, _f32(value))
    return struct.pack(fmt, _eval(value, names))


def pkv_op(b, op):
    """One named mutation of a .pkv image (bytearray, changed in place or returned anew)."""
    kind = op["op"]
    if kind == "header":
        for name, fmt, off in PKV_HEADER:
            if name == op["field"]:
                v = op["value"]
                struct.pack_into(fmt, b, off, v.encode() if fmt == "8s" else _eval(v, pkv_names(b)))
                return b
        raise ValueError("unknown header field " + op["field"])
    if kind.startswith("fb_"):
        h = pkv_header(b)
        fb = FlatBuf(b, h["meta_offset"])
        table, ttype = fb.resolve(op.get("target", ""))
        if kind == "fb_set":  # a scalar field
            p, fmt = fb.field_pos(table, ttype, op["field"])
            b[p:p + struct.calcsize(fmt)] = _pack_scalar(fmt, op["value"], pkv_names(b))
        elif kind == "fb_string":  # a string or one string of a vector of strings, same byte length:
            # "value", or "fill" (one character repeated over the old length)
            p, k = fb.field_pos(table, ttype, op["field"])
            if k == "vstring":
                start, n, _ = fb.vector(table, ttype, op["field"])
                p = start + 4 * op["index"]
            sp, sn = fb.string_at(p)
            new = (op["fill"] * sn if "fill" in op else op["value"]).encode()
            if len(new) != sn:
                raise ValueError("fb_string: %r must keep the old length %d" % (new, sn))
            b[sp:sp + sn] = new
        elif kind == "fb_elem":  # one element of a vector of scalars
            start, n, k = fb.vector(table, ttype, op["field"])
            fmt = k[1:]
            if op["index"] >= n:
                raise ValueError("%s has %d elements" % (op["field"], n))
            p = start + struct.calcsize(fmt) * op["index"]
            b[p:p + struct.calcsize(fmt)] = _pack_scalar(fmt, op["value"], pkv_names(b))
        else:
            raise ValueError("unknown op " + kind)
        return b
    if kind == "tensor_f32":  # overwrite values of an F32 tensor in the blob
        h = pkv_header(b)
        fb = FlatBuf(b, h["meta_offset"])
        t, _ = fb.resolve("tensor:" + op["tensor"])
        try:
            off = struct.unpack_from("<Q", b, fb.field_pos(t, "Tensor", "offset")[0])[0]
        except ValueError:
            off = 0  # the default: the first tensor of the blob
        p = h["blob_offset"] + off + 4 * op.get("index", 0)
        for i in range(op.get("count", 1)):
            struct.pack_into("<f", b, p + 4 * i, _f32(op["value"]))
        return b
    return byte_op(b, op, pkv_names(b))


def byte_op(b, op, names):
    kind = op["op"]
    if kind == "truncate":
        return b[:_eval(op["to"], names)]
    if kind == "append":
        return b + bytes.fromhex(op.get("byte", "00")) * op["count"]
    if kind == "poke":
        at = _eval(op["at"], names)
        if "hex" in op:
            data = bytes.fromhex(op["hex"])
        elif "u32" in op:
            data = struct.pack("<I", op["u32"])
        elif "u64" in op:
            data = struct.pack("<Q", _eval(op["u64"], names))
        else:
            raise ValueError("poke needs hex, u32 or u64")
        b[at:at + len(data)] = data
        return b
    raise ValueError("unknown op " + kind)


# ---- GGUF -------------------------------------------------------------------------------------

GT = {"u8": 0, "i8": 1, "u16": 2, "i16": 3, "u32": 4, "i32": 5, "f32": 6, "bool": 7, "string": 8, "array": 9,
      "u64": 10, "i64": 11, "f64": 12}
_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<B", 10: "<Q", 11: "<q", 12: "<d"}


class Gguf:
    """A GGUF file as a list of key/values and tensors (data kept as raw bytes)."""

    def __init__(self, b):
        self.pos = 0
        self.b = b
        assert b[:4] == b"GGUF", "base file is not a GGUF"
        self.pos = 4
        self.version = self._rd("<I")
        n_t, n_kv = self._rd("<Q"), self._rd("<Q")
        self.kv = []  # [key, type id, value, extra] ; value of an array: (elem type, [values])
        for _ in range(n_kv):
            key = self._str()
            t = self._rd("<I")
            self.kv.append([key, t, self._val(t), {}])
        self.tensors = []  # dicts: name, ne, type, offset, data
        for _ in range(n_t):
            name = self._str()
            nd = self._rd("<I")
            ne = [self._rd("<Q") for _ in range(nd)]
            self.tensors.append({"name": name, "ne": ne, "type": self._rd("<I"), "offset": self._rd("<Q")})
        align = self.alignment()
        start = (self.pos + align - 1) // align * align
        ends = sorted(t["offset"] for t in self.tensors) + [len(b) - start]
        for t in self.tensors:
            end = min(e for e in ends if e > t["offset"])
            t["data"] = bytes(b[start + t["offset"]:start + end])

    def alignment(self):
        for k, t, v, _ in self.kv:
            if k == "general.alignment" and t == GT["u32"] and v and v & (v - 1) == 0:
                return v
        return 32

    def _rd(self, fmt):
        v = struct.unpack_from(fmt, self.b, self.pos)[0]
        self.pos += struct.calcsize(fmt)
        return v

    def _str(self):
        n = self._rd("<Q")
        s = bytes(self.b[self.pos:self.pos + n]).decode("utf-8", "surrogateescape")
        self.pos += n
        return s

    def _val(self, t):
        if t == GT["string"]:
            return self._str()
        if t == GT["array"]:
            et, n = self._rd("<I"), self._rd("<Q")
            return (et, [self._val(et) for _ in range(n)])
        return self._rd(_SCALAR[t])

    @staticmethod
    def _enc_str(s):
        e = s.encode("utf-8", "surrogateescape")
        return struct.pack("<Q", len(e)) + e

    @classmethod
    def _enc_val(cls, t, v, extra):
        if t == GT["string"]:
            return cls._enc_str(v)
        if t == GT["array"]:
            et, items = v
            n = extra.get("count", len(items))
            return struct.pack("<IQ", et, n) + b"".join(cls._enc_val(et, x, {}) for x in items)
        return struct.pack(_SCALAR[t], v)

    def serialize(self):
        out = bytearray(b"GGUF")
        out += struct.pack("<IQQ", self.version, len(self.tensors), len(self.kv))
        for key, t, v, extra in self.kv:
            out += self._enc_str(key) + struct.pack("<I", extra.get("type_id", t)) + self._enc_val(t, v, extra)
        align = self.alignment()
        offsets, off = [], 0
        for t in self.tensors:
            off = (off + align - 1) // align * align
            offsets.append(off)
            off += len(t["data"])
        for t, o in zip(self.tensors, offsets):
            out += self._enc_str(t["name"]) + struct.pack("<I", len(t["ne"]))
            out += b"".join(struct.pack("<Q", x) for x in t["ne"]) + struct.pack("<IQ", t["type"], o)
        start = (len(out) + align - 1) // align * align
        out += b"\0" * (start - len(out))
        for t, o in zip(self.tensors, offsets):
            out += b"\0" * (start + o - len(out)) + t["data"]
        return out

    def find_kv(self, key):
        for e in self.kv:
            if e[0] == key:
                return e
        raise ValueError("no metadata key '%s' in the base GGUF" % key)

    def find_tensor(self, name):
        for t in self.tensors:
            if t["name"] == name:
                return t
        raise ValueError("no tensor '%s' in the base GGUF" % name)


def _typed(tname, value):
    """('u32', 5) -> (type id, value); 'array:f32' -> (9, (6, [...]))."""
    if tname.startswith("array:"):
        et = GT[tname.split(":")[1]]
        return GT["array"], (et, [_f32(x) if et in (6, 12) else x for x in value])
    t = GT[tname]
    if t in (6, 12):
        value = _f32(value)
    return t, value


def gguf_op(b, op):
    kind = op["op"]
    if not kind.startswith("gguf_"):
        return byte_op(b, op, {"size": len(b)})
    g = Gguf(b)
    if kind == "gguf_kv_set":  # replace (or add) a key with a value of any type
        t, v = _typed(op["type"], op["value"])
        try:
            e = g.find_kv(op["key"])
            e[1], e[2], e[3] = t, v, {}
        except ValueError:
            g.kv.append([op["key"], t, v, {}])
    elif kind == "gguf_kv_del":
        g.kv.remove(g.find_kv(op["key"]))
    elif kind == "gguf_kv_dup":  # the key written twice
        g.kv.append(list(g.find_kv(op["key"])))
    elif kind == "gguf_kv_raw":  # lie about a key's encoding: its type id, or an array's count
        e = g.find_kv(op["key"])
        e[3] = {k: op[k] for k in ("type_id", "count") if k in op}
    elif kind == "gguf_tensor_del":
        g.tensors.remove(g.find_tensor(op["name"]))
    elif kind == "gguf_tensor_set":  # dimensions (GGUF order, innermost first), GGML type id, name
        t = g.find_tensor(op["name"])
        for k in ("ne", "type"):
            if k in op:
                t[k] = op[k]
        t["name"] = op.get("new_name", t["name"])
    elif kind == "gguf_tensor_add":  # an F32 tensor filled with one value
        n = 1
        for x in op["ne"]:
            n *= x
        g.tensors.append({"name": op["name"], "ne": op["ne"], "type": 0,
                          "data": struct.pack("<%df" % n, *([_f32(op.get("fill", 0.0))] * n))})
    elif kind == "gguf_tensor_poke":  # overwrite bytes of a tensor's data (e.g. a block's f16 scale)
        t = g.find_tensor(op["name"])
        d = bytearray(t["data"])
        raw = bytes.fromhex(op["hex"])
        d[op["at"]:op["at"] + len(raw)] = raw
        t["data"] = bytes(d)
    elif kind == "gguf_tensor_f32":  # overwrite values of an F32 tensor
        t = g.find_tensor(op["name"])
        d = bytearray(t["data"])
        for i in range(op.get("count", 1)):
            struct.pack_into("<f", d, 4 * (op.get("index", 0) + i), _f32(op["value"]))
        t["data"] = bytes(d)
    elif kind == "gguf_tensor_hex":  # overwrite raw bytes of a tensor (f16 / bf16 values, block fields)
        t = g.find_tensor(op["name"])
        d = bytearray(t["data"])
        raw = bytes.fromhex(op["hex"])
        d[op.get("at", 0):op.get("at", 0) + len(raw)] = raw
        t["data"] = bytes(d)
    else:
        raise ValueError("unknown op " + kind)
    return g.serialize()


# ---- safetensors ------------------------------------------------------------------------------

_ST_BYTES = {"F32": 4, "F16": 2, "BF16": 2, "I32": 4, "F64": 8}


def safetensors(tensors):
    header, data = {}, bytearray()
    for t in tensors:
        n = 1
        for x in t["shape"]:
            n *= x
        dt = t["dtype"]
        if dt == "F32":
            vals = [float(t.get("fill", 0.0))] * n
            if "nan_at" in t:
                vals[t["nan_at"]] = float("nan")
            blob = struct.pack("<%df" % n, *vals)
        else:
            blob = b"\0" * (n * _ST_BYTES[dt])
        begin = len(data)
        data += blob
        header[t["name"]] = {"dtype": dt, "shape": t["shape"],
                             "data_offsets": t.get("data_offsets", [begin, len(data)])}
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + bytes(data)


# ---- entry point ------------------------------------------------------------------------------


def make_input(spec, path, bases, subst):
    """Creates `path` from `spec`; bases maps base names to file paths; subst fills placeholders."""
    if spec.get("missing"):
        return
    if spec.get("dir"):
        os.makedirs(path, exist_ok=True)
        return
    if spec.get("fifo"):  # a named pipe nobody writes to: opening it for reading would block
        os.mkfifo(path)
        return
    if "symlink" in spec:  # a symbolic link to a path (placeholders allowed; need not exist)
        os.symlink(subst(spec["symlink"]), path)
        return
    if "hardlink" in spec:  # a second name for an existing file
        os.link(subst(spec["hardlink"]), path)
        return
    if "from" in spec:
        src = spec["from"]
        src = subst(src[5:]) if src.startswith("file:") else bases[src]
        with open(src, "rb") as f:
            b = bytearray(f.read())
        is_gguf = b[:4] == b"GGUF"
        for op in spec.get("ops", []):
            b = bytearray(gguf_op(b, op) if is_gguf else pkv_op(b, op))
    elif "text" in spec:
        b = (spec["text"] * spec.get("repeat", 1)).encode("utf-8")
    elif "latin1" in spec:
        b = (spec["latin1"] * spec.get("repeat", 1)).encode("latin-1")
    elif "hex" in spec:
        b = bytes.fromhex(spec["hex"])
    elif "safetensors" in spec:
        b = safetensors(spec["safetensors"])
    else:
        raise ValueError("input spec has no source: %r" % (spec,))
    with open(path, "wb") as f:
        f.write(b)

