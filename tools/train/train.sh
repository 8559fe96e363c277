#!/usr/bin/env bash
# Train a grid of small decoders with and without chunked compressed attention, export each to
# PhaseKV, check that PhaseKV computes what the trainer computed, run the phase self-test on
# each, and print one table (docs/VALIDATION.md, "Models trained with compression").
#
# Usage: tools/train/train.sh GRID [--retrain] [--check]
#   GRID      micro   full attention and W4/S4 at the micro size, 250 steps (CI: the plumbing, ~2 min)
#             micro6  the six models below at the micro size (d 64, 2 layers), 5,000 steps, with the
#                     offset heads and the dense-recall share that make them learn retrieval
#                     (docs/VALIDATION.md; ~25 min on 2 cores)
#             wide    the six models of micro6 at d 128 (2 layers, 4 heads of 32), micro6's recipe at
#                     lr 1e-3: 5,000 steps, ~8 min per model alone, ~12 with two at a time (~40 min)
#             wide-gqa  the same with grouped-query attention: 8 query heads of 16 over 4 KV heads
#             small   full attention (seeds 1, 2), W8/S8, W8/S4, W4/S4 with learned scalar gates,
#                     W8/S8 with uniform gates: same size, data and steps (micro6's recipe at the
#                     small size, d 128, 4 layers: ~1 hour per model on 2 cores, not yet run)
#   --retrain train again even when the cache holds a model of the same configuration
#   --check   exit 1 unless: every export matches the trainer's forward (rel L2 <= 1e-4, same
#             greedy tokens), no full-attention model is flagged, and a compressed model's
#             flags, if any, repeat with its stride S
# Environment:
#   PHASEKV_CACHE   cache directory (default ~/.cache/phasekv); models go to $PHASEKV_CACHE/train/GRID
#   PHASEKV_BUILD   build directory with tools/phasekv and libphasekv.so (default build/host-cuda);
#                   PHASEKV_TOOL / PHASEKV_LIB name the two files directly
#   TRAIN_OUT       output directory instead of $PHASEKV_CACHE/train/GRID
#   TRAIN_SAMPLES   self-test samples per stage and protocol (default 24 micro, 48 micro6 and small)
#   TRAIN_MODELS    the models instead of the grid's, as NAME:SEED words (NAME a train.py --model:
#                   full, w8s8, w8s4, w4s4, w8s8-uniform, w8s8-top, ...), e.g. "w8s8:3 w8s8:4" for more seeds of micro6 (use a TRAIN_OUT of
#                   their own: the causal check runs on the first learned-gate model the self-test flags, else
#                   the first learned-gate model)
#   TRAIN_JOBS      training runs at a time (default: nproc)
# Needs the Python venv of scripts/install-deps.sh --python --train (numpy, gguf, jax, optax).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }
GRID=""
RETRAIN=0
CHECK=0
for a in "$@"; do
  case "$a" in
    -h|--help) usage; exit 0 ;;
    --retrain) RETRAIN=1 ;;
    --check) CHECK=1 ;;
    micro|micro6|wide|wide-gqa|small) GRID=$a ;;
    *) echo "train.sh: unknown argument '$a' (GRID is micro, micro6, wide, wide-gqa or small; see --help)" >&2; exit 2 ;;
  esac
done
[ -n "$GRID" ] || { echo "train.sh: GRID (micro, micro6, wide, wide-gqa or small) is required; see --help" >&2; exit 2; }

CACHE=${PHASEKV_CACHE:-$HOME/.cache/phasekv}
PY=${PHASEKV_PYTHON:-$CACHE/venv/bin/python}
BUILD=${PHASEKV_BUILD:-$ROOT/build/host-cuda}
PKV=${PHASEKV_TOOL:-$BUILD/tools/phasekv}
LIB=${PHASEKV_LIB:-$BUILD/libphasekv.so}
OUT=${TRAIN_OUT:-$CACHE/train/$GRID}
for f in "$PKV" "$LIB"; do
  [ -e "$f" ] || { echo "train.sh: $f is missing: build first (cmake --preset host-cuda && cmake --build build/host-cuda)" >&2; exit 2; }
done
"$PY" -c 'import jax, optax, gguf' 2>/dev/null ||
  { echo "train.sh: $PY lacks jax/optax/gguf: run scripts/install-deps.sh --python --train" >&2; exit 2; }

SIX="full:1 full:2 w8s8:1 w8s4:1 w4s4:1 w8s8-uniform:1"
LEARNS=(--steps 5000 --with-replacement --offset-heads --dense 0.5)  # the recipe that learns retrieval
TRAIN_ARGS=()
case "$GRID" in
  micro) MODELS="full:1 w4s4:1"; SIZE=micro; SAMPLES=${TRAIN_SAMPLES:-24}; PERIOD=8 ;;
  micro6) MODELS=$SIX; SIZE=micro; SAMPLES=${TRAIN_SAMPLES:-48}; PERIOD=8; TRAIN_ARGS=("${LEARNS[@]}") ;;
  wide|wide-gqa) MODELS=$SIX; SIZE=$GRID; SAMPLES=${TRAIN_SAMPLES:-48}; PERIOD=8; TRAIN_ARGS=("${LEARNS[@]}") ;;
  # small: micro6's recipe at d 128 (not yet run to the end on this VM: ~1 hour per model)
  small) MODELS=$SIX; SIZE=small; SAMPLES=${TRAIN_SAMPLES:-48}; PERIOD=8; TRAIN_ARGS=("${LEARNS[@]}") ;;
esac
MODELS=${TRAIN_MODELS:-$MODELS}
for m in $MODELS; do  # the shape only: train.py's --model choices judge the name
  [[ $m =~ ^[a-z0-9-]+:[0-9]+$ ]] || { echo "train.sh: TRAIN_MODELS: '$m' is not NAME:SEED, e.g. w8s8:3" >&2; exit 2; }
done
mkdir -p "$OUT"
rm -f "$OUT/causal.txt"
start=$(date +%s)
# Training: one model per core at a time (each single-threaded: the same result as alone). A
# cached model is reused only when it was trained with the same arguments ($d.args).
JOBS=${TRAIN_JOBS:-$(nproc)}
[[ $JOBS =~ ^[1-9][0-9]*$ ]] || { echo "train.sh: TRAIN_JOBS '$JOBS' is not a positive whole number" >&2; exit 2; }
pids=()
names=()
stop_runs() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
fail() {  # a training run failed: stop the others, show its log
  echo "train.sh: training $1 failed; the end of $1.log:" >&2
  tail -n 20 "$1.log" >&2 || true
  stop_runs
  exit 1
}
trap 'stop_runs; exit 130' INT TERM  # interrupted: the training runs go too
for m in $MODELS; do
  name=${m%%:*}
  seed=${m##*:}
  d="$OUT/$name-s$seed"
  stamp="train.py --model $name --size $SIZE --seed $seed ${TRAIN_ARGS[*]}"
  if [ "$RETRAIN" = 1 ] || [ ! -f "$d/train.json" ] || [ "$(cat "$d.args" 2>/dev/null)" != "$stamp" ]; then
    echo "== train $name (seed $seed) -> $d ($d.log)"
    rm -f "$d.args"
    XLA_FLAGS="${XLA_FLAGS:-} --xla_cpu_multi_thread_eigen=false" "$PY" tools/train/train.py --model "$name" \
      --size "$SIZE" --seed "$seed" "${TRAIN_ARGS[@]}" --out "$d" > "$d.log" 2>&1 &
    pids+=("$!")
    names+=("$d")
    echo "$stamp" > "$d.args.pending"  # becomes $d.args once every run has succeeded
    if [ "${#pids[@]}" -ge "$JOBS" ]; then  # wait for the oldest (wait PID finds a job that already ended)
      wait "${pids[0]}" || fail "${names[0]}"
      pids=("${pids[@]:1}")
      names=("${names[@]:1}")
    fi
  else
    echo "== $name (seed $seed): cached in $d (same arguments, $d.args; --retrain to train again)"
  fi
done
for i in "${!pids[@]}"; do
  wait "${pids[$i]}" || fail "${names[$i]}"
done
for m in $MODELS; do
  d="$OUT/${m%%:*}-s${m##*:}"
  [ -f "$d.args.pending" ] && mv "$d.args.pending" "$d.args"
done
trap - INT TERM
# causal_check NAME SEED: shift the model's per-offset gate parameters by K (3 for S > 4, else 1),
# convert and run the self-test again (OUT/causal.txt names the model for summarize.py).
causal_check() {
  local d="$OUT/$1-s$2" kv=() spec S K T
  while read -r spec; do [ -n "$spec" ] && kv+=(--kv "$spec"); done < "$d/kv.txt"
  S=$("$PY" -c 'import json,sys; print([s for s in json.load(open(sys.argv[1]))["config"]["layers"] if s["kind"] == "compressed"][0]["S"])' "$d/train.json")
  K=$(( S > 4 ? 3 : 1 ))
  T=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["config"]["ctx"] // 2)' "$d/train.json")
  "$PY" tools/train/shift_gates.py "$d/gates.safetensors" "$K" "$d/gates_shift$K.safetensors" >/dev/null
  "$PKV" convert --from gguf "$d/model.gguf" "$d/model_shift$K.pkv" "${kv[@]}" --gates "$d/gates_shift$K.safetensors" \
    --force >/dev/null
  "$PKV" selftest -m "$d/model_shift$K.pkv" -c "$T" --records $((T / 8)) --samples "$SAMPLES" --period "$PERIOD" \
    -t "$(nproc)" -q --json "$d/selftest_shift$K.json" > "$d/selftest_shift$K.txt" 2>&1 || true
  echo "$1-s$2 $K" > "$OUT/causal.txt"
  echo "   causal check on $1-s$2: gates shifted by $K -> $d/selftest_shift$K.json"
}
first_gated=""
for m in $MODELS; do
  name=${m%%:*}
  seed=${m##*:}
  d="$OUT/$name-s$seed"
  echo "== $name (seed $seed): $(tail -n 1 "$d.log" 2>/dev/null | cut -c1-160)"
  kv=()
  while read -r spec; do [ -n "$spec" ] && kv+=(--kv "$spec"); done < "$d/kv.txt"
  gates=()
  [ -f "$d/gates.safetensors" ] && gates=(--gates "$d/gates.safetensors")
  "$PKV" convert --from gguf "$d/model.gguf" "$d/model.pkv" "${kv[@]}" "${gates[@]}" --force >/dev/null
  "$PY" tools/train/check_export.py --lib "$LIB" --pkv "$d/model.pkv" --dir "$d" > "$d/check.json" || true
  cat "$d/check.json"
  T=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["config"]["ctx"] // 2)' "$d/train.json")
  # Every model is scored mod the same period (the lcm of the grid's strides), so a full-attention
  # control is read on the same residues and a stride-4 model's pattern can show period 4 in it.
  "$PKV" selftest -m "$d/model.pkv" -c "$T" --records $((T / 8)) --samples "$SAMPLES" --period "$PERIOD" \
    -t "$(nproc)" -q --json "$d/selftest.json" > "$d/selftest.txt" 2>&1 || true
  tail -n 3 "$d/selftest.txt" | sed 's/^/   /'
  if [ -f "$d/gates.safetensors" ] || grep -q compressed "$d/kv.txt"; then
    # Static gate analysis over held-out training-mix text: what the gates alone predict.
    "$PKV" inspect "$d/model.pkv" --gates "$d/calib.txt" --json > "$d/gates.json"
    "$PY" -c 'import json,sys; g=json.load(open(sys.argv[1])); print("   gates predict weak residues:", g["predicted_weak"] or "none")' "$d/gates.json"
  fi
  # The causal check on the first learned-gate model the self-test flagged (none flagged: the first
  # learned-gate model): shift its gates by K offsets and test again; the weak residue should move by K.
  if [ -f "$d/gates.safetensors" ] && [ ! -f "$OUT/causal.txt" ]; then
    [ -n "$first_gated" ] || first_gated="$name $seed"
    if "$PY" -c 'import json,sys; s=json.load(open(sys.argv[1])); sys.exit(0 if any(p.get("flagged") for p in s["protocols"].values()) else 1)' \
      "$d/selftest.json" 2>/dev/null; then
      causal_check "$name" "$seed"
    fi
  fi
done
if [ ! -f "$OUT/causal.txt" ] && [ -n "$first_gated" ]; then
  causal_check $first_gated
fi
echo "== grid $GRID: $(( $(date +%s) - start )) s"
args=("$OUT" --grid "$GRID")
[ "$CHECK" = 1 ] && args+=(--check)
"$PY" tools/train/summarize.py "${args[@]}"
