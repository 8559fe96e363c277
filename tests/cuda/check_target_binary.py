#!/usr/bin/env python3
"""Checks that a cross-built binary is one a JetPack 7 Jetson (Thor, or Orin on JetPack 7:
Ubuntu 24.04 for aarch64 with NVIDIA's SBSA CUDA 13) can load: an AArch64 ELF executable
whose dynamic dependencies are all libraries such a system has, and whose glibc / libstdc++
symbol versions are not newer than Ubuntu 24.04's (glibc 2.39, GCC 14's libstdc++).

What a JetPack 7 system has, and where it comes from:
  libc.so.6 libm.so.6 libgcc_s.so.1 libstdc++.so.6 ld-linux-aarch64.so.1   Ubuntu 24.04 base
  libpcre2-8.so.0                    Ubuntu 24.04 base (libpcre2-8-0, required by grep)
  libcrypto.so.3                     Ubuntu 24.04 base (libssl3t64; tools only: SHA-256)
  libcudart.so.13 libcublasLt.so.13  JetPack 7's CUDA 13 (cuda-cudart-13-0, libcublas-13-0)
  libmimalloc.so.2                   Ubuntu 24.04's libmimalloc2.0 (universe), not in a JetPack
                                     image by default; accepted without --strict. PhaseKV's
                                     binaries no longer need it (CI checks them with --strict)

Usage: check_target_binary.py --readelf READELF [--require L1,L2] [--strict] FILE ...
"""
import argparse
import re
import subprocess
import sys

BASE = {"libc.so.6", "libm.so.6", "libgcc_s.so.1", "libstdc++.so.6", "ld-linux-aarch64.so.1",
        "libpthread.so.0", "libdl.so.2", "librt.so.1", "libpcre2-8.so.0", "libcrypto.so.3"}
CUDA = {"libcudart.so.13", "libcublasLt.so.13"}
APT = {"libmimalloc.so.2"}
MAX_VERSION = {"GLIBC": (2, 39), "GLIBCXX": (3, 4, 33), "CXXABI": (1, 3, 15), "GCC": (14, 0)}


def readelf(tool, flags, path):
    r = subprocess.run([tool, *flags, path], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"{tool} {' '.join(flags)} {path}: {r.stderr.strip()}")
    return r.stdout


def check(path, tool, require, strict):
    ok = True
    header = readelf(tool, ["-h", "-W"], path)
    machine = re.search(r"Machine:\s+(.*)", header).group(1).strip()
    elf_class = re.search(r"Class:\s+(.*)", header).group(1).strip()
    if machine != "AArch64" or elf_class != "ELF64":
        print(f"{path}: {elf_class} {machine}, not an ELF64 AArch64 binary")
        return False
    dyn = readelf(tool, ["-d", "-W"], path)
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dyn)
    allowed = BASE | CUDA | (set() if strict else APT)
    stray = [n for n in needed if n not in allowed]
    print(f"{path}: ELF64 AArch64; needs " + ", ".join(needed))
    if stray:
        print("  not on a JetPack 7 system: " + ", ".join(stray))
        ok = False
    for lib in require:
        if lib not in needed:
            print(f"  missing dependency {lib} (the CUDA backend is not linked?)")
            ok = False
    versions = readelf(tool, ["-V", "-W"], path)
    newest = {}
    for name, ver in re.findall(r"Name: (GLIBC|GLIBCXX|CXXABI|GCC)_([0-9.]+)", versions):
        v = tuple(int(x) for x in ver.split("."))
        newest[name] = max(newest.get(name, v), v)
    for name, v in sorted(newest.items()):
        limit = MAX_VERSION[name]
        print(f"  newest {name} symbol version {'.'.join(map(str, v))} (Ubuntu 24.04 has "
              f"{'.'.join(map(str, limit))})")
        if v > limit:
            ok = False
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--readelf", default="readelf")
    ap.add_argument("--require", default="", help="comma-separated libraries that must be needed")
    ap.add_argument("--strict", action="store_true", help="refuse libmimalloc.so.2 as well")
    ap.add_argument("files", nargs="+")
    a = ap.parse_args()
    require = [x for x in a.require.split(",") if x]
    ok = all([check(f, a.readelf, require, a.strict) for f in a.files])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
