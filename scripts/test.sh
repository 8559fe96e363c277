#!/usr/bin/env bash
# The test command (README; .ci/run calls it). On a fresh Debian 12 machine it installs what
# is missing, fetches the default model, then:
#   1. builds the host configuration (CUDA backend too when nvcc exists: device code for
#      sm_87/sm_90/sm_110 is compiled and linked; GPU tests report "skipped: no CUDA device"
#      without a GPU) and runs every test through ctest;
#   2. builds the CPU configuration under AddressSanitizer + UndefinedBehaviorSanitizer and
#      runs the whole suite again (the bad-file and bad-GGUF cases included).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/cuda/bin"

t0=$(date +%s)
scripts/install-deps.sh --python
MODEL=$(scripts/fetch-model.sh)
JOBS=$(nproc)

if command -v nvcc >/dev/null 2>&1; then MAIN=host-cuda; else MAIN=host-cpu; fi
echo "== build: $MAIN"
cmake --preset "$MAIN" -DPHASEKV_TEST_MODEL="$MODEL" >/dev/null
cmake --build --preset "$MAIN" -j "$JOBS"

echo "== build: asan (address + undefined)"
cmake --preset asan -DPHASEKV_TEST_MODEL="$MODEL" >/dev/null
cmake --build --preset asan -j "$JOBS"

echo "== ctest: asan"
ctest --preset asan -j "$JOBS"
echo "== ctest: $MAIN"
ctest --preset "$MAIN" -j "$JOBS"
echo "== test.sh finished in $(( $(date +%s) - t0 )) s"
