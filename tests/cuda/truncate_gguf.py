#!/usr/bin/env python3
"""Writes a layer-truncated copy of a llama-family GGUF: the same metadata (block_count set to N),
the same tokenizer, and the first N blocks' tensors byte for byte. Used to take real SmolLM2
weights to the GPU check machine, where the 94 MiB file does not fit (scripts/make-device-kit.sh).

Usage: truncate_gguf.py IN.gguf OUT.gguf --layers N
"""
import argparse
import sys

import gguf


def field_value(f):
    t = f.types[0]
    if t == gguf.GGUFValueType.ARRAY:
        sub = f.types[-1]
        if sub == gguf.GGUFValueType.STRING:
            return [bytes(f.parts[i]).decode("utf-8", errors="surrogateescape") for i in f.data], sub
        return [f.parts[i].tolist()[0] for i in f.data], sub
    if t == gguf.GGUFValueType.STRING:
        return bytes(f.parts[f.data[0]]).decode("utf-8", errors="surrogateescape"), None
    return f.parts[f.data[0]].tolist()[0], None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--layers", type=int, required=True)
    a = ap.parse_args()
    r = gguf.GGUFReader(a.src)
    arch = field_value(r.fields["general.architecture"])[0]
    total = int(field_value(r.fields[f"{arch}.block_count"])[0])
    if not 1 <= a.layers <= total:
        sys.exit(f"--layers {a.layers}: the model has {total} blocks")
    w = gguf.GGUFWriter(a.dst, arch)
    for name, f in r.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        if name == f"{arch}.block_count":
            w.add_uint32(name, a.layers)
            continue
        val, sub = field_value(f)
        w.add_key_value(name, val, f.types[0], sub_type=sub)
    kept = 0
    for t in r.tensors:
        if t.name.startswith("blk.") and int(t.name.split(".")[1]) >= a.layers:
            continue
        w.add_tensor(t.name, t.data, raw_dtype=t.tensor_type)
        kept += 1
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"{a.dst}: {a.layers} of {total} blocks, {kept} tensors")


if __name__ == "__main__":
    main()
