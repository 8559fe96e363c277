#!/usr/bin/env bash
# CI smoke run of the libFuzzer targets (docs/FUZZING.md): configures and builds build/fuzz
# with clang when needed, then runs each target for SECONDS (default 60) on a copy of its
# committed seed corpus (the committed corpus never grows here), and prints per target the
# executions, executions per second and OK or CRASH. Exits 1 if any target crashed (crash,
# leak, sanitizer report, broken invariant, timeout or out-of-memory), 2 on a setup error.
#
# Usage: scripts/fuzz-smoke.sh [SECONDS]
# Environment:
#   FUZZ_JOBS=N          targets run N at a time (default 1; 2 halves the wall time on 2+ cores)
#   FUZZ_TARGETS="..."   a subset of: model_reader gguf tokenizer template safetensors cli (default all)
#   PHASEKV_FUZZ_MODEL   GGUF or .pkv whose tokenizer fuzz_tokenizer uses (default: the model
#                        scripts/fetch-model.sh caches, fetched when missing)
#   FUZZ_BUILD_DIR       build directory (default build/fuzz)
#   FUZZ_OUT             where logs and crash artifacts go (default $FUZZ_BUILD_DIR/smoke)
# Needs clang and libclang-rt-14-dev (libFuzzer), cmake, ninja and the build dependencies of
# scripts/install-deps.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

SECONDS_PER_TARGET=${1:-60}
case "$SECONDS_PER_TARGET" in ''|*[!0-9]*) echo "usage: $0 [SECONDS]" >&2; exit 2 ;; esac
JOBS=${FUZZ_JOBS:-1}
TARGETS=${FUZZ_TARGETS:-model_reader gguf tokenizer template safetensors cli}
BUILD=${FUZZ_BUILD_DIR:-build/fuzz}
OUT=${FUZZ_OUT:-$BUILD/smoke}

# Per-target input size limit: above the largest seed, small enough to keep executions fast.
max_len() {
  case "$1" in
    model_reader|gguf) echo 32768 ;;
    tokenizer) echo 1024 ;;
    template) echo 2048 ;;
    safetensors) echo 4096 ;;
    cli) echo 512 ;;
    *) echo "unknown fuzz target '$1' (model_reader gguf tokenizer template safetensors cli)" >&2; exit 2 ;;
  esac
}
for t in $TARGETS; do max_len "$t" >/dev/null; done

# ---- build ----------------------------------------------------------------------------------
if [ ! -f "$BUILD/CMakeCache.txt" ]; then
  echo "== configure $BUILD (clang, libFuzzer + ASan + UBSan)"
  CC=clang CXX=clang++ cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPHASEKV_FUZZ=ON \
    -DPHASEKV_CUDA=OFF -DPHASEKV_BUILD_TESTS=OFF -DPHASEKV_BUILD_EXAMPLES=OFF -DPHASEKV_BUILD_TOOLS=OFF >/dev/null
fi
echo "== build $BUILD"
build_targets=""
for t in $TARGETS; do build_targets="$build_targets fuzz_$t"; done
# shellcheck disable=SC2086
cmake --build "$BUILD" -j "$(nproc)" --target $build_targets >/dev/null

# ---- the tokenizer target's model ----------------------------------------------------------
case " $TARGETS " in
  *" tokenizer "*)
    if [ -z "${PHASEKV_FUZZ_MODEL:-}" ]; then
      default_model="${PHASEKV_CACHE:-$HOME/.cache/phasekv}/SmolLM2-135M-Instruct.Q4_1.gguf"
      if [ -f "$default_model" ]; then
        PHASEKV_FUZZ_MODEL=$default_model
      elif ! PHASEKV_FUZZ_MODEL=$(scripts/fetch-model.sh); then
        echo "fuzz-smoke: fuzz_tokenizer needs a model with a byte-level BPE tokenizer; set PHASEKV_FUZZ_MODEL" \
             "or let scripts/fetch-model.sh download the default one" >&2
        exit 2
      fi
    fi
    export PHASEKV_FUZZ_MODEL
    echo "== tokenizer model: $PHASEKV_FUZZ_MODEL"
    ;;
esac

# ---- run ------------------------------------------------------------------------------------
rm -rf "$OUT"
mkdir -p "$OUT"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

run_one() {
  local t=$1 corpus="$WORK/corpus-$1" log="$OUT/$1.log" rc=0
  mkdir -p "$corpus" "$OUT/$t-artifacts"
  cp -R "$ROOT/fuzz/corpus/$t/." "$corpus/"
  ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}" \
  "$BUILD/fuzz/fuzz_$t" "$corpus" -dict="$ROOT/fuzz/$t.dict" -max_len="$(max_len "$t")" \
    -max_total_time="$SECONDS_PER_TARGET" -timeout=25 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$OUT/$t-artifacts/" >"$log" 2>&1 || rc=$?
  echo "$rc" >"$OUT/$t.rc"
}

t0=$(date +%s)
running=0
for t in $TARGETS; do
  echo "== fuzz_$t: ${SECONDS_PER_TARGET}s"
  run_one "$t" &
  running=$((running + 1))
  if [ "$running" -ge "$JOBS" ]; then
    wait -n || true
    running=$((running - 1))
  fi
done
wait || true

# ---- report ---------------------------------------------------------------------------------
failed=0
printf '\n%-18s %12s %10s  %s\n' target executions exec/s result
for t in $TARGETS; do
  log="$OUT/$t.log"
  rc=$(cat "$OUT/$t.rc" 2>/dev/null || echo 1)
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  if [ "$rc" = 0 ] && [ -n "$execs" ]; then
    result=OK
  else
    failed=1
    why=$(grep -m1 -oE 'fuzz invariant failed.*|ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer): .*|runtime error: .*|fuzz: cannot .*' \
          "$log" | cut -c1-160 || true)
    result="CRASH (exit $rc) ${why:-see $log}"
  fi
  printf '%-18s %12s %10s  %s\n' "fuzz_$t" "${execs:-?}" "${rate:-?}" "$result"
done
echo "fuzz-smoke: $(( $(date +%s) - t0 )) s of fuzzing; logs and crash inputs in $OUT"
if [ "$failed" != 0 ]; then
  for t in $TARGETS; do
    for f in "$OUT/$t-artifacts"/*; do
      [ -e "$f" ] && echo "  reproduce: $BUILD/fuzz/fuzz_$t $f"
    done
  done
  exit 1
fi
