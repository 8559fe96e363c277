#!/usr/bin/env python3
"""Check that PhaseKV computes what the trainer computed: load MODEL.pkv through the C API
(libphasekv, ctypes), feed the trainer's check sequence token by token, and compare the logits
at every position with the trainer's own forward (check_logits.f32) by relative L2
(||a - b|| / ||b|| over the whole [T, vocab] array). This is the check that the two compressors
(the trainer's batch formulation in JAX, PhaseKV's streaming one in C++) agree.

Usage: check_export.py --lib libphasekv.so --pkv MODEL.pkv --dir TRAIN_OUT [--tol 1e-4]
Exit 0 when rel L2 <= tol and the greedy tokens agree at every position, 1 otherwise.
"""
import argparse
import ctypes
import json
import os
import sys

import numpy as np


class CtxParams(ctypes.Structure):
    _fields_ = [("n_ctx", ctypes.c_uint32), ("n_batch", ctypes.c_uint32), ("n_threads", ctypes.c_int32),
                ("memory_budget", ctypes.c_uint64), ("backend", ctypes.c_int32), ("device", ctypes.c_int32)]


def phasekv_logits(lib_path, pkv, ids, threads=1):
    lib = ctypes.CDLL(lib_path)
    lib.pkv_last_error.restype = ctypes.c_char_p
    lib.pkv_context_default_params.restype = CtxParams
    lib.pkv_logits.restype = ctypes.POINTER(ctypes.c_float)
    lib.pkv_model_n_vocab.restype = ctypes.c_int32

    def ok(st, what):
        if st != 0:
            raise SystemExit(f"check_export: {what}: {lib.pkv_last_error().decode(errors='replace')}")

    m = ctypes.c_void_p()
    ok(lib.pkv_model_load(pkv.encode(), ctypes.byref(m)), f"loading {pkv}")
    nv = lib.pkv_model_n_vocab(m)
    p = lib.pkv_context_default_params()
    p.n_ctx = len(ids)
    p.n_threads = threads
    c = ctypes.c_void_p()
    ok(lib.pkv_context_init(m, ctypes.byref(p), ctypes.byref(c)), "context")
    out = np.empty((len(ids), nv), np.float32)
    for t, tok in enumerate(ids):
        ok(lib.pkv_decode(c, ctypes.c_int32(int(tok))), f"decode at position {t}")
        out[t] = np.ctypeslib.as_array(lib.pkv_logits(c), shape=(nv,))
    lib.pkv_context_free(c)
    lib.pkv_model_free(m)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", required=True, help="path to libphasekv.so")
    ap.add_argument("--pkv", required=True, help="the converted model")
    ap.add_argument("--dir", required=True, help="train.py's output directory (check_ids.json, check_logits.f32)")
    ap.add_argument("--tol", type=float, default=1e-4, help="largest relative L2 accepted (default 1e-4)")
    args = ap.parse_args()
    with open(os.path.join(args.dir, "check_ids.json")) as f:
        ids = json.load(f)
    ref = np.fromfile(os.path.join(args.dir, "check_logits.f32"), "<f4")
    got = phasekv_logits(args.lib, args.pkv, ids)
    if ref.size != got.size:
        raise SystemExit(f"check_export: the trainer wrote {ref.size} logits, PhaseKV gave {got.size}")
    ref = ref.reshape(got.shape)
    rel = float(np.linalg.norm((got - ref).astype(np.float64)) / np.linalg.norm(ref.astype(np.float64)))
    worst_t = int(np.argmax(np.linalg.norm(got - ref, axis=1) / np.linalg.norm(ref, axis=1)))
    greedy_diff = int(np.sum(np.argmax(got, 1) != np.argmax(ref, 1)))
    verdict = rel <= args.tol and greedy_diff == 0
    print(json.dumps({"model": args.pkv, "positions": len(ids), "rel_l2": rel, "worst_position": worst_t,
                      "greedy_differences": greedy_diff, "tol": args.tol, "ok": verdict}))
    sys.exit(0 if verdict else 1)


if __name__ == "__main__":
    main()
