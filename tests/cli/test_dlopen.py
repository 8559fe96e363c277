#!/usr/bin/env python3
"""libphasekv.so loaded with dlopen into a process that already has libstdc++ (Python's
ctypes after numpy, a plugin host): the library must not bring an allocator that overrides
malloc / operator new there. Until 2026-12-02 it linked Debian's libmimalloc.so.2, whose
exported operator delete freed strings that libstdc++ had allocated with glibc's malloc:
pkv_model_load crashed (SIGSEGV in mi_free) on any model path longer than 15 bytes.

Checks, in a child process (so that a crash is a failure, not the end of the test):
libstdc++ is loaded first (RTLD_LOCAL, as Python loads numpy), then libphasekv.so; a .pkv at a long path loads, a context decodes
tokens whose logits are finite; a missing file gives PKV_ERR_IO and a message naming it;
libphasekv.so does not depend on an allocator library (readelf NEEDED).
"""
import argparse
import os
import subprocess
import sys

CHILD = r"""
import ctypes, sys
ctypes.CDLL("libstdc++.so.6")  # RTLD_LOCAL, as Python loads extension modules
lib = ctypes.CDLL(sys.argv[1])
lib.pkv_last_error.restype = ctypes.c_char_p
lib.pkv_logits.restype = ctypes.POINTER(ctypes.c_float)
lib.pkv_model_n_vocab.restype = ctypes.c_int32
class Params(ctypes.Structure):
    _fields_ = [("n_ctx", ctypes.c_uint32), ("n_batch", ctypes.c_uint32), ("n_threads", ctypes.c_int32),
                ("memory_budget", ctypes.c_uint64), ("backend", ctypes.c_int32), ("device", ctypes.c_int32)]
lib.pkv_context_default_params.restype = Params
missing = (sys.argv[2] + ".missing-file-with-a-long-name").encode()
m = ctypes.c_void_p()
st = lib.pkv_model_load(missing, ctypes.byref(m))
err = lib.pkv_last_error().decode()
assert st == 4 and "missing-file-with-a-long-name" in err, (st, err)
st = lib.pkv_model_load(sys.argv[2].encode(), ctypes.byref(m))
assert st == 0, lib.pkv_last_error()
n = lib.pkv_model_n_vocab(m)
c = ctypes.c_void_p()
p = lib.pkv_context_default_params()
p.n_ctx, p.n_threads = 64, 1
assert lib.pkv_context_init(m, ctypes.byref(p), ctypes.byref(c)) == 0, lib.pkv_last_error()
for tok in (1, 5, 7, 3):
    assert lib.pkv_decode(c, tok) == 0, lib.pkv_last_error()
lg = lib.pkv_logits(c)
vals = [lg[i] for i in range(n)]
assert all(v == v and abs(v) < 1e30 for v in vals), "non-finite logits"
lib.pkv_context_free(c)
lib.pkv_model_free(m)
print("child: ok, %d logits" % n)
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", required=True, help="libphasekv.so")
    ap.add_argument("--phasekv", required=True, help="the phasekv tool (converts the fixture)")
    ap.add_argument("--gguf", required=True, help="a tiny GGUF fixture")
    ap.add_argument("--tmp", required=True)
    ap.add_argument("--readelf", default="readelf")
    a = ap.parse_args()
    out_dir = os.path.join(a.tmp, "dlopen", "a-directory-name-longer-than-sixteen-bytes")
    os.makedirs(out_dir, exist_ok=True)
    pkv = os.path.join(out_dir, "model-for-the-dlopen-test.pkv")
    subprocess.run([a.phasekv, "convert", "--from", "gguf", a.gguf, pkv, "--force"], check=True,
                   stdout=subprocess.DEVNULL)
    needed = subprocess.run([a.readelf, "-d", a.lib], check=True, capture_output=True, text=True).stdout
    bad = [lib for lib in ("mimalloc", "jemalloc", "tcmalloc") if lib in needed]
    if bad:
        print(f"FAIL: {a.lib} depends on {bad}: an allocator that overrides malloc in a process that dlopens it")
        return 1
    r = subprocess.run([sys.executable, "-c", CHILD, a.lib, pkv], capture_output=True, text=True)
    print(r.stdout.strip())
    if r.returncode != 0:
        print(f"FAIL: the child exited with {r.returncode}\n{r.stderr[-3000:]}")
        return 1
    print("dlopen: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
