#!/usr/bin/env python3
"""Lists the GPU architectures whose machine code (cubin) is embedded in an object file, a
static library or a linked executable, and fails unless every expected one is there.

The CUDA toolkit here has no cuobjdump, so this reads the bytes itself: objcopy extracts the
`.nv_fatbin` section of each object; every embedded cubin is an ELF image whose e_flags carry
the SM version (ELF ABI version >= 8, CUDA 12.8+: bits 8..15; older ABI: bits 0..7). A linked
executable's section holds one fat binary per CUDA translation unit, one after another (each
starts with the header magic 0xBA55ED50, u16 version, u16 header size, u64 payload size):
each is checked on its own, so one unit built for fewer architectures is caught.

Usage: check_fatbin.py --objcopy OBJCOPY --expect 87,90,110 FILE.o|FILE.a|EXECUTABLE ...
"""
import argparse
import os
import struct
import subprocess
import sys
import tempfile


def cubin_archs(blob: bytes):
    archs = []
    i = 0
    while True:
        i = blob.find(b"\x7fELF", i)
        if i < 0:
            return archs
        if i + 52 <= len(blob) and blob[i + 4] == 2 and blob[i + 18:i + 20] == struct.pack("<H", 190):
            # 64-bit ELF for EM_CUDA (190)
            abi_version = blob[i + 8]
            flags = struct.unpack_from("<I", blob, i + 48)[0]
            archs.append((flags >> 8) & 0xFF if abi_version >= 8 else flags & 0xFF)
        i += 4


def split_fatbins(blob: bytes):
    """The fat binaries concatenated in one .nv_fatbin section (the whole blob if none parse)."""
    parts, i = [], 0
    while i + 16 <= len(blob):
        magic, _version, header, size = struct.unpack_from("<IHHQ", blob, i)
        if magic != 0xBA55ED50 or header < 16 or i + header + size > len(blob):
            break
        parts.append(blob[i:i + header + size])
        i += header + size
        while i < len(blob) and i % 8:  # padding between units
            i += 1
        while i + 4 <= len(blob) and blob[i:i + 4] == b"\0\0\0\0":
            i += 4
    return parts if parts and i >= len(blob) - 16 else [blob]


def fatbin_sections(path: str, objcopy: str):
    """Yields (member name, .nv_fatbin bytes) for an object or every member of an archive."""
    with tempfile.TemporaryDirectory() as tmp:
        members = [path]
        if path.endswith(".a"):
            subprocess.run(["ar", "x", os.path.abspath(path)], cwd=tmp, check=True)
            members = [os.path.join(tmp, m) for m in sorted(os.listdir(tmp))]
        for m in members:
            out = os.path.join(tmp, "section.bin")
            r = subprocess.run([objcopy, "-O", "binary", "--only-section=.nv_fatbin", m, out],
                               capture_output=True, text=True)
            if r.returncode != 0 or not os.path.exists(out):
                continue
            data = open(out, "rb").read()
            os.remove(out)
            if data:
                yield os.path.basename(m), data


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--objcopy", default="objcopy")
    ap.add_argument("--expect", required=True, help="comma-separated SM versions, e.g. 87,90,110")
    ap.add_argument("files", nargs="+")
    a = ap.parse_args()
    expect = sorted({int(x) for x in a.expect.split(",") if x})
    ok = True
    seen_any = False
    for f in a.files:
        for name, section in fatbin_sections(f, a.objcopy):
            parts = split_fatbins(section)
            for k, blob in enumerate(parts):
                seen_any = True
                archs = sorted(set(cubin_archs(blob)))
                missing = [x for x in expect if x not in archs]
                label = name if len(parts) == 1 else f"{name} fatbin {k + 1}/{len(parts)}"
                print(f"{label}: cubins for " + ", ".join(f"sm_{x}" for x in archs) +
                      (f"  MISSING " + ", ".join(f"sm_{x}" for x in missing) if missing else "  ok"))
                ok &= not missing
    if not seen_any:
        print("no .nv_fatbin section found in " + " ".join(a.files))
        return 1
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
