#!/usr/bin/env bash
# GPU checks for a machine with an NVIDIA GPU and the CUDA toolkit (nvcc), nothing else:
# builds the CUDA op test and the CUDA benchmark straight from the sources with nvcc (device
# code for sm_87 Orin, sm_90 Hopper, sm_110 Thor), then
#   1. lists the GPU and driver,
#   2. runs the op test (every dtype's dequantization bit for bit against the CPU reference),
#      also under compute-sanitizer memcheck when it is installed,
#   3. lists the architectures in the binary's fatbin (cuobjdump, or tests/cuda/check_fatbin.py),
#   4. runs the dequantization benchmark.
# Results (text files) go to $OUT (default /tmp/phasekv-device). Exit code: 0 when every check
# passed. Usage: scripts/device-check.sh  (from the repository root)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/phasekv-device}"
mkdir -p "$OUT"
export PATH="$PATH:/usr/local/cuda/bin"
NVCC="${NVCC:-nvcc}"
B="${PHASEKV_DEVICE_BUILD:-/tmp/phasekv-device-build}"
mkdir -p "$B"
fail=0
log() { echo "== $*" | tee -a "$OUT/summary.txt"; }

log "device-check $(date -u +%FT%TZ) on $(hostname)"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,compute_cap --format=csv 2>&1 | tee "$OUT/gpu.txt"
"$NVCC" --version | tail -2 | tee -a "$OUT/gpu.txt"

ARCHS="-gencode arch=compute_87,code=sm_87 -gencode arch=compute_90,code=sm_90 -gencode arch=compute_110,code=sm_110"
SRC="model_format/dtype.cpp model_format/status.cpp kernels/cuda/cuda_check.cpp kernels/cuda/dequant.cu"
FLAGS="-std=c++17 -O2 -Xcompiler -ffp-contract=off -Imodel_format -Ikernels/cuda"
t0=$(date +%s)
# shellcheck disable=SC2086
if ! "$NVCC" $FLAGS $ARCHS tests/unit/test_cuda_dequant.cpp $SRC -o "$B/phasekv_cuda_tests" > "$OUT/build.txt" 2>&1 ||
   ! "$NVCC" $FLAGS $ARCHS tests/cuda/bench_cuda_dequant.cpp $SRC -o "$B/phasekv_cuda_bench" >> "$OUT/build.txt" 2>&1; then
  log "build FAILED"; cat "$OUT/build.txt"; exit 1
fi
log "build ok in $(( $(date +%s) - t0 )) s"

log "op test: CUDA dequantization vs the CPU reference"
"$B/phasekv_cuda_tests" 2>&1 | tee "$OUT/cuda_tests.txt"
rc=${PIPESTATUS[0]}
log "op test exit $rc"; [ "$rc" -eq 0 ] || fail=1

if command -v compute-sanitizer >/dev/null 2>&1; then
  log "op test under compute-sanitizer memcheck"
  compute-sanitizer --tool memcheck --error-exitcode 9 "$B/phasekv_cuda_tests" > "$OUT/memcheck.txt" 2>&1
  rc=$?
  tail -3 "$OUT/memcheck.txt"
  log "memcheck exit $rc"; [ "$rc" -eq 0 ] || fail=1
fi

log "fatbin architectures"
if command -v cuobjdump >/dev/null 2>&1; then
  cuobjdump --list-elf "$B/phasekv_cuda_tests" 2>&1 | tee "$OUT/fatbin.txt"
fi
python3 tests/cuda/check_fatbin.py --expect 87,90,110 "$B/phasekv_cuda_tests" 2>&1 | tee -a "$OUT/fatbin.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || fail=1

log "benchmark: dequantization to f32 (256 MiB of output per dtype, median of 20)"
"$B/phasekv_cuda_bench" --mib 256 --reps 20 2>&1 | tee "$OUT/cuda_bench.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || fail=1

log "device-check finished: $([ $fail -eq 0 ] && echo PASS || echo FAIL)"
exit $fail
