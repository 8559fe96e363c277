#!/usr/bin/env bash
# The test command (README; .ci/run calls it). On a fresh Debian 12 machine it installs what
# is missing, fetches the default model, then:
#   1. builds the host configuration (CUDA backend too when nvcc exists: device code for
#      sm_87/sm_90/sm_110 is compiled and linked; GPU tests report "skipped: no CUDA device"
#      without a GPU) and runs every test through ctest;
#   2. builds the CPU configuration under AddressSanitizer + UndefinedBehaviorSanitizer and
#      runs the whole suite again (the bad-file and bad-GGUF cases included);
#   3. cross-compiles for aarch64 (Jetson) and runs the whole test set under qemu-aarch64: with
#      nvcc, the CUDA-enabled JetPack 7 binary (preset jetson-cross-cuda: device code for sm_87
#      and sm_110, linked against NVIDIA's aarch64 CUDA 13 wheels, which install-deps.sh
#      --cross-cuda caches), checked for its architecture, cubins and needed libraries; without
#      nvcc, the CPU-only configuration (preset jetson-cross);
#   4. builds the unit tests under ThreadSanitizer (preset tsan) and runs the threaded ones;
#   5. builds the libFuzzer targets (preset fuzz, clang) and runs each for a short smoke
#      (FUZZ_SECONDS, default 60) on a copy of its seed corpus;
#   with nvcc, also a dry run of scripts/device-check.sh (the GPU machine's own build, from the
#   sources with nvcc and g++, for sm_90; its programs report "skipped"), on a device kit made
#   by scripts/make-device-kit.sh in build/: so the script a lent GPU runs cannot rot unseen.
# PHASEKV_SKIP_CROSS=1 / PHASEKV_SKIP_TSAN=1 / PHASEKV_SKIP_FUZZ=1 leave out steps 3 / 4 / 5.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/cuda/bin"

t0=$(date +%s)
DEPS=(--python --train --cross --fuzz)
if command -v nvcc >/dev/null 2>&1 && [ "${PHASEKV_SKIP_CROSS:-0}" != 1 ]; then DEPS+=(--cross-cuda); fi
scripts/install-deps.sh "${DEPS[@]}"
MODEL=$(scripts/fetch-model.sh)
JOBS=$(nproc)

if command -v nvcc >/dev/null 2>&1; then MAIN=host-cuda; else MAIN=host-cpu; fi
echo "== build: $MAIN"
cmake --preset "$MAIN" -DPHASEKV_TEST_MODEL="$MODEL" >/dev/null
cmake --build --preset "$MAIN" -j "$JOBS"

if [ "$MAIN" = host-cuda ]; then
  echo "== device-check dry run (the GPU machine's build, sm_90)"
  t1=$(date +%s)
  bash scripts/make-device-kit.sh "build/$MAIN" --out build/device-kit > build/device-kit.log 2>&1 ||
    { cat build/device-kit.log; echo "make-device-kit.sh failed" >&2; exit 1; }
  rm -rf build/device-check
  PHASEKV_DEVICE_DRY_RUN=1 PHASEKV_CUDA_ARCH=90 PHASEKV_DEVICE_KIT=build/device-kit \
    PHASEKV_DEVICE_BUILD="$PWD/build/device-check" OUT="$PWD/build/device-check/out" JOBS="$JOBS" \
    bash scripts/device-check.sh 2>&1 | grep '^==' ||
    { cat build/device-check/out/build.txt 2>/dev/null | grep -m 20 error; echo "device-check dry run failed" >&2; exit 1; }
  echo "== device-check dry run: $(( $(date +%s) - t1 )) s"
fi

echo "== build: asan (address + undefined)"
cmake --preset asan -DPHASEKV_TEST_MODEL="$MODEL" >/dev/null
cmake --build --preset asan -j "$JOBS"

if [ "${PHASEKV_SKIP_CROSS:-0}" != 1 ]; then
  if [ "$MAIN" = host-cuda ]; then CROSS=jetson-cross-cuda; else CROSS=jetson-cross; fi
  echo "== build: $CROSS (aarch64, g++-aarch64-linux-gnu)"
  t1=$(date +%s)
  cmake --preset "$CROSS" >/dev/null
  cmake --build --preset "$CROSS" -j "$JOBS"
  echo "== ctest: $CROSS (under qemu-aarch64)"
  ctest --preset "$CROSS" -j "$JOBS"
  echo "== $CROSS: $(( $(date +%s) - t1 )) s"
fi

if [ "${PHASEKV_SKIP_TSAN:-0}" != 1 ]; then
  echo "== build: tsan (ThreadSanitizer, unit tests)"
  t1=$(date +%s)
  cmake --preset tsan >/dev/null
  cmake --build --preset tsan -j "$JOBS"
  echo "== ctest: tsan (the threaded tests)"
  ctest --preset tsan -j "$JOBS"
  echo "== tsan: $(( $(date +%s) - t1 )) s"
fi

if [ "${PHASEKV_SKIP_FUZZ:-0}" != 1 ]; then
  echo "== fuzz smoke (libFuzzer, ${FUZZ_SECONDS:-60} s per target)"
  FUZZ_JOBS="${FUZZ_JOBS:-$JOBS}" scripts/fuzz-smoke.sh "${FUZZ_SECONDS:-60}"
fi
echo "== ctest: asan"
ctest --preset asan -j "$JOBS"
echo "== ctest: $MAIN"
ctest --preset "$MAIN" -j "$JOBS"

echo "== test.sh finished in $(( $(date +%s) - t0 )) s"
