#!/usr/bin/env bash
# The check of ALL GPU code, on a machine with an NVIDIA GPU, the CUDA toolkit and a C++
# compiler, nothing else. Prepare it here first with scripts/make-device-kit.sh (headers, two
# libraries, the generated schema header and a layer-truncated SmolLM2 in .device-kit/, which
# the device tool carries: `carry: [".device-kit"]`). Then, on the GPU machine:
#   1. builds, for that GPU's architecture only (nvidia-smi's compute capability; override with
#      PHASEKV_CUDA_ARCH=87), the runtime with the CUDA backend and three test programs, with
#      nvcc and the host compiler straight from the sources (16 jobs);
#   2. test_backend_ops: every op x dtype (all thirteen) x shape class on CUDA against the CPU backend;
#   3. the dequantization op test, every dtype bit for bit;
#   4. end to end on the truncated SmolLM2 (4 blocks) with full KV, uniform W8/S4/L64 on layers
#      2-3, value-selecting gates with offset 5 made weak on 2-3 (W8/S8/L16), one-hot planted
#      K=V=5 on 2-3: logits at every position within 1e-3 relative L2 of the CPU backend, 32
#      greedy tokens on five prompts, snapshots and slots, a short self-test (probe_digest and
#      per-probe hits), zero CUDA allocations after creation; the same with weights in mapped
#      pinned host memory (the integrated-GPU path) on the full-KV model;
#   5. the prefill and decode times of both backends on the truncated model (informational:
#      the kernels are the correctness-first ones);
#   6. compute-sanitizer memcheck and racecheck on the op harness (a filtered subset for
#      racecheck) and memcheck on a 64-token decode.
# Results go to $OUT (default /tmp/phasekv-device): summary.txt and one log per step (<= 8 files).
# Exit 0 when every check passed. PHASEKV_DEVICE_DRY_RUN=1 builds for sm_90 without a GPU and
# runs the programs (which report "skipped: no CUDA device").
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/phasekv-device}"
mkdir -p "$OUT"
export PATH="$PATH:/usr/local/cuda/bin"
NVCC="${NVCC:-nvcc}"
CXX="${CXX:-g++}"
KIT="${PHASEKV_DEVICE_KIT:-.device-kit}"
B="${PHASEKV_DEVICE_BUILD:-/tmp/phasekv-device-build}"
JOBS="${JOBS:-$(nproc)}"
DRY="${PHASEKV_DEVICE_DRY_RUN:-0}"
mkdir -p "$B/obj"
fail=0
: > "$OUT/summary.txt"
log() { echo "== $*" | tee -a "$OUT/summary.txt"; }
# step NAME LOGFILE CMD...: runs CMD under a time limit (STEP_LIMIT seconds, default 240: a hung
# kernel must not eat the whole run), appends its last lines and status to the summary.
step() {
  local name=$1 file=$2; shift 2
  local t0; t0=$(date +%s)
  if [ "$(type -t "$1")" = function ]; then "$@"; else timeout -k 5 "${STEP_LIMIT:-240}" "$@"; fi > "$OUT/$file.tmp" 2>&1
  local rc=$?
  cat "$OUT/$file.tmp" >> "$OUT/$file.txt"; rm -f "$OUT/$file.tmp"
  local verdict=FAIL
  [ $rc -eq 0 ] && verdict=ok
  # A skip is a failure on a GPU machine (the device was not seen); only a dry run may skip.
  [ $rc -eq 77 ] && [ "$DRY" = 1 ] && verdict=skipped
  [ $rc -eq 124 ] || [ $rc -eq 137 ] && echo "(killed after ${STEP_LIMIT:-240} s)" >> "$OUT/$file.txt"
  log "$name: $verdict (exit $rc, $(( $(date +%s) - t0 )) s)"
  tail -4 "$OUT/$file.txt" | sed 's/^/     /' | tee -a "$OUT/summary.txt"
  [ "$verdict" = FAIL ] && fail=1
  return 0
}

[ -d "$KIT/include" ] || { log "no $KIT: run scripts/make-device-kit.sh where the packages are, and carry it"; exit 1; }
log "device-check $(date -u +%FT%TZ) on $(hostname)"
nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv 2>&1 | tee -a "$OUT/summary.txt"
"$NVCC" --version | tail -2 | tee -a "$OUT/summary.txt"
ARCH="${PHASEKV_CUDA_ARCH:-$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '. ')}"
[ -n "$ARCH" ] || ARCH=90
log "building for sm_$ARCH with $JOBS jobs"

CUDA_INC="$(cd "$(dirname "$(command -v "$NVCC")")/../include" 2>/dev/null && pwd)"
INC="-I${CUDA_INC:-/usr/local/cuda/include} -Imodel_format -Ikernels -Ikernels/cpu -Ikernels/cuda -Iruntime -Itools -I$KIT/include -I$KIT/generated"
# The version CMakeLists.txt gives the project (capi.cpp's pkv_version_string), by a forced
# include: a quoted -D would not survive the xargs/sh -c below.
VERSION=$(sed -n 's/^project([A-Za-z]* VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
printf '#define PHASEKV_VERSION_STRING "%s"\n' "${VERSION:-0}" > "$B/pkv_version.h"
DEFS="-DPHASEKV_HAVE_CUDA=1 -DPHASEKV_HAVE_AVX2_KERNELS=1 -include $B/pkv_version.h"
CXXFLAGS="-std=c++17 -O2 -ffp-contract=off -fPIC $DEFS $INC"
NVFLAGS="-std=c++17 -O2 -Xcompiler=-ffp-contract=off -gencode arch=compute_$ARCH,code=sm_$ARCH $DEFS $INC"
# The library's sources by glob, so this list cannot fall behind CMakeLists.txt: every
# model_format/ and runtime/ file, the CPU backend without its ISA tables (compiled below with
# their flags; NEON ones are for aarch64), the CUDA backend, and the gates reader.
LIB_CXX="$(echo model_format/*.cpp runtime/*.cpp) kernels/backend.cpp kernels/cpu/cpu_dispatch.cpp
  kernels/cpu/kernels_portable.cpp kernels/cpu/q8_r4.cpp kernels/cpu/thread_pool.cpp kernels/cpu/cpu_backend.cpp
  $(echo kernels/cuda/*.cpp) tools/safetensors.cpp"
LIB_CU="$(echo kernels/cuda/*.cu)"
build() {
  local t0; t0=$(date +%s)
  # shellcheck disable=SC2086
  {
    for f in $LIB_CXX; do echo "$CXX $CXXFLAGS -c $f -o $B/obj/$(echo "$f" | tr / _).o"; done
    echo "$CXX $CXXFLAGS -mavx2 -mfma -mf16c -c kernels/cpu/kernels_avx2.cpp -o $B/obj/kernels_avx2.o"
    echo "$CXX $CXXFLAGS -mavx2 -mfma -mf16c -mavx512f -mavx512bw -mavx512vnni -mavx512vl -c kernels/cpu/kernels_avx512vnni.cpp -o $B/obj/kernels_avx512vnni.o"
    for f in $LIB_CU; do echo "$NVCC $NVFLAGS -c $f -o $B/obj/$(echo "$f" | tr / _).o"; done
    for t in tests/backend/test_backend_ops.cpp tests/cuda/test_cuda_e2e.cpp tests/unit/test_cuda_dequant.cpp; do
      echo "$CXX $CXXFLAGS -I/usr/local/cuda/include -c $t -o $B/$(basename "$t" .cpp).o"
    done
  } | xargs -P "$JOBS" -I{} sh -c '{}' || return 1
  local libs="-L/usr/local/cuda/lib64 -lcudart -L$KIT/lib -lpcre2-8 -Wl,-rpath,$(cd "$KIT/lib" && pwd) -ldl -lpthread"
  # shellcheck disable=SC2086
  "$CXX" -o "$B/phasekv_backend_ops" "$B/test_backend_ops.o" "$B"/obj/*.o $libs &&
  "$CXX" -o "$B/phasekv_cuda_e2e" "$B/test_cuda_e2e.o" "$B"/obj/*.o $libs &&
  "$CXX" -o "$B/phasekv_cuda_tests" "$B/test_cuda_dequant.o" "$B"/obj/*.o $libs || return 1
  echo "built in $(( $(date +%s) - t0 )) s"
}
step "build (sm_$ARCH)" build build
[ -x "$B/phasekv_cuda_e2e" ] || { log "device-check finished: FAIL (build)"; exit 1; }

step "test_backend_ops (every op vs the CPU backend)" backend_ops "$B/phasekv_backend_ops"
step "dequantization op test (bit for bit)" dequant "$B/phasekv_cuda_tests"

G="$KIT/models/smollm2-4l.gguf"
E2E=(--gguf "$G"
     --gguf "$G" --kv "2-3:compressed:W=8,S=4,L=64,gate=uniform"
     --gguf "$G" --kv "2-3:compressed:W=8,S=8,L=16,gate=scalar" --gates "$KIT/models/vg_2-3w5.safetensors"
     --gguf "$G" --kv "2-3:compressed:W=8,S=8,L=16,gate=planted:K=5,V=5")
step "end to end: truncated SmolLM2, 4 memories, GPU vs CPU" e2e "$B/phasekv_cuda_e2e" "${E2E[@]}"
step "end to end: weights in mapped pinned host memory (the Jetson path)" e2e_mapped \
  "$B/phasekv_cuda_e2e" --cuda-weights mapped --gguf "$G" --no-selftest
step "timing: prefill 256 and decode 128 tokens, GPU and CPU (informational)" timing \
  "$B/phasekv_cuda_e2e" --time --gguf "$G"

if command -v compute-sanitizer >/dev/null 2>&1 && [ "$DRY" != 1 ]; then
  STEP_LIMIT=${SAN_LIMIT:-120} step "compute-sanitizer memcheck: op harness" sanitizer \
    compute-sanitizer --tool memcheck --error-exitcode 9 "$B/phasekv_backend_ops"
  STEP_LIMIT=${SAN_LIMIT:-120} step "compute-sanitizer racecheck: op harness (attention, compress, rmsnorm, gold_score)" sanitizer \
    sh -c "for f in 'attention full hd 64 group 3 tokens 7' 'compress scalar W8/S4 shared gate' 'compress rotate-entry W8/S4' 'rmsnorm dim 576 x 7' 'gold_score vocab 1000'; do compute-sanitizer --tool racecheck --error-exitcode 9 $B/phasekv_backend_ops --filter \"\$f\" || exit 9; done"
  STEP_LIMIT=${SAN_LIMIT:-120} step "compute-sanitizer memcheck: 64-token decode" sanitizer \
    compute-sanitizer --tool memcheck --error-exitcode 9 "$B/phasekv_cuda_e2e" --gguf "$G" \
      --kv "2-3:compressed:W=8,S=4,L=64,gate=uniform" --decode-only 64
  STEP_LIMIT=${SAN_LIMIT:-120} step "compute-sanitizer racecheck: 64-token decode" sanitizer \
    compute-sanitizer --tool racecheck --error-exitcode 9 "$B/phasekv_cuda_e2e" --gguf "$G" \
      --kv "2-3:compressed:W=8,S=4,L=64,gate=uniform" --decode-only 64
else
  log "compute-sanitizer: not run ($([ "$DRY" = 1 ] && echo dry run || echo not installed))"
fi

if [ "$DRY" = 1 ]; then
  log "device-check dry run finished: $([ $fail -eq 0 ] && echo "built and ran (nothing ran on a GPU)" || echo FAIL)"
else
  log "device-check finished: $([ $fail -eq 0 ] && echo PASS || echo FAIL)"
fi
exit $fail
