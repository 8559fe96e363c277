#!/usr/bin/env bash
# Prepares what scripts/device-check.sh needs on a GPU machine that has CUDA, a compiler and
# nothing else (no package registry): writes .device-kit/ (git-ignored; carry it to the machine):
#   include/      FlatBuffers, PCRE2, xxHash and nlohmann-json headers (Debian's)
#   lib/          libpcre2-8.a
#   generated/    phasekv_generated.h (flatc output for model_format/phasekv.fbs)
#   models/       SmolLM2-135M-Instruct Q4_1 cut to its first 4 blocks (real weights and
#                 tokenizer, 39 MiB; the full 94 MiB file does not fit the 64 MiB that travels)
#                 and the value-selecting gates for its planted weak-offset retrofit (layers 2-3)
# and checks the truncated model on the CPU first: PhaseKV's CPU backend against the numpy
# reference (tests/reference/llama_ref.py), greedy tokens identical.
# Usage: scripts/make-device-kit.sh [BUILD_DIR] [--gguf SMOLLM2.gguf] [--out DIR]
#   BUILD_DIR: default build/host-cuda, else build/host-cpu
#   --gguf: another SmolLM2-135M GGUF to cut instead of the default Q4_1, e.g. a Q4_K_M made with
#           llama-quantize (its first 4 blocks hold Q5_0, Q8_0, Q6_K and Q4_K tensors). One model
#           only: a second 4-block cut (~38 MiB, the Q8_0 embedding table) would not fit the 64 MiB.
#   --out:  the kit's directory (default .device-kit; .device-kit-* are git-ignored too), for a
#           second kit beside the first: carry it instead and run device-check.sh with
#           PHASEKV_DEVICE_KIT=DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
KIT=.device-kit
B="" SRC=""
while [ $# -gt 0 ]; do
  case "$1" in
    --gguf) SRC="${2:?--gguf needs a file}"; shift 2 ;;
    --out) KIT="${2:?--out needs a directory}"; shift 2 ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    *) B="$1"; shift ;;
  esac
done
if [ -z "$B" ]; then B=build/host-cuda; [ -x "$B/tools/phasekv" ] || B=build/host-cpu; fi
[ -x "$B/tools/phasekv" ] || { echo "make-device-kit: build the tool first (no $B/tools/phasekv)" >&2; exit 1; }
PY="${PHASEKV_PYTHON:-$HOME/.cache/phasekv/venv/bin/python}"
if [ -n "$SRC" ]; then
  [ -f "$SRC" ] || { echo "make-device-kit: --gguf $SRC: no such file" >&2; exit 1; }
  MODEL="$SRC"
else
  MODEL=$(scripts/fetch-model.sh)
fi
rm -rf "$KIT"
mkdir -p "$KIT/include" "$KIT/lib" "$KIT/generated" "$KIT/models"
cp -r /usr/include/flatbuffers /usr/include/nlohmann "$KIT/include/"
cp /usr/include/pcre2.h /usr/include/xxhash.h "$KIT/include/"
MULTI=$(gcc -print-multiarch)
cp "/usr/lib/$MULTI/libpcre2-8.a" "$KIT/lib/"
cp "$B/generated/phasekv_generated.h" "$KIT/generated/"

G="$KIT/models/smollm2-4l.gguf"
"$PY" tests/cuda/truncate_gguf.py "$MODEL" "$G" --layers 4
"$PY" tests/reference/value_gates.py --gguf "$G" --layers 2-3 --window 8 --weak 5 --strength 30 \
  --texts 2 --tokens 600 --out "$KIT/models/vg_2-3w5.safetensors"

echo "== CPU check of the truncated model against the numpy reference"
"$B/tools/phasekv" convert "$G" "$KIT/check.pkv" --force >/dev/null
ok=0
"$PY" tests/cuda/check_truncated.py --gguf "$G" --pkv "$KIT/check.pkv" --phasekv "$B/tools/phasekv" || ok=1
rm -f "$KIT/check.pkv"
[ $ok -eq 0 ] || { echo "make-device-kit: the truncated model disagrees with the reference" >&2; exit 1; }
du -sh "$KIT"
