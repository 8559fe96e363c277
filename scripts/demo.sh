#!/usr/bin/env bash
# The main job on the default model (README's first command): installs what is missing,
# builds phasekv, fetches SmolLM2-135M-Instruct Q4_1, converts it to PhaseKV files with full
# and with compressed KV memories, inspects the memory plan, and chats with the model.
# Extra arguments go to `phasekv run` (e.g. -p "your question" -n 200).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
MODEL=$(scripts/fetch-model.sh)
CACHE="${PHASEKV_CACHE:-$HOME/.cache/phasekv}"
cmake --preset host-cpu >/dev/null
cmake --build --preset host-cpu -j "$(nproc)" --target phasekv
PKV=build/host-cpu/tools/phasekv

echo "== convert (full KV)"
$PKV convert --from gguf "$MODEL" "$CACHE/smollm2-135m-full.pkv" --force
echo "== convert (layers 0-1 full, 2-29 compressed W8/S4/L64)"
$PKV convert --from gguf "$MODEL" "$CACHE/smollm2-135m-w8s4.pkv" --force \
  --kv 0-1:full --kv 2-29:compressed:W=8,S=4,L=64,gate=uniform
echo "== inspect"
$PKV inspect "$CACHE/smollm2-135m-w8s4.pkv" --ctx 8192
echo
echo "GGUF $(stat -c %s "$MODEL") bytes; .pkv $(stat -c %s "$CACHE/smollm2-135m-full.pkv") bytes"
echo "== run (chat, full KV)"
if [ $# -gt 0 ]; then
  $PKV run -m "$CACHE/smollm2-135m-full.pkv" --chat "$@"
else
  $PKV run -m "$CACHE/smollm2-135m-full.pkv" --chat -n 96 --seed 1 \
    -p "In two sentences, why do robots need to stay within a fixed memory budget?"
fi
