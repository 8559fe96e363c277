#!/usr/bin/env bash
# Installs what PhaseKV needs to build and test on Debian 12, skipping what is already present.
# Idempotent; run as root (or with sudo available).
# Usage: scripts/install-deps.sh [--python] [--train] [--cross] [--cross-cuda] [--fuzz]
#   --python  also create the Python test venv (gguf, numpy) under $PHASEKV_CACHE/venv
#   --train   --python, plus JAX and optax in that venv (tools/train: the compression-trained models)
#   --cross   also the aarch64 cross compiler, arm64 multiarch libraries and qemu-aarch64
#             (the jetson-cross preset)
#   --cross-cuda  --cross, plus an aarch64 (SBSA) CUDA 13 target tree for the jetson-cross-cuda
#             preset, from NVIDIA's PyPI wheels, under $PHASEKV_CACHE/cuda-cross (scripts/cuda-cross.sh)
#   --fuzz    also clang and libFuzzer (the fuzz preset)
set -euo pipefail

PKGS=(
  cmake g++ make ninja-build pkg-config unzip
  libflatbuffers-dev flatbuffers-compiler   # model-file metadata (schema compiled by flatc at build time)
  libpcre2-dev                              # Unicode classes of the tokenizer's pre-tokenizer regex
  libxxhash-dev                             # XXH3-128 content hash of model files (header only)
  doctest-dev                               # unit tests
  libcli11-dev                              # the phasekv command line
  nlohmann-json3-dev                        # --json output of the tools, safetensors headers
  libssl-dev                                # SHA-256 of model and template in self-test reports (tools only)
  chromium                                  # tests only: screenshots the self-test's HTML report headless
)

WANT_PYTHON=0
WANT_CROSS=0
for arg in "$@"; do
  case "$arg" in
    --python) WANT_PYTHON=1 ;;
    --train) WANT_PYTHON=1; WANT_TRAIN=1 ;;
    --cross) WANT_CROSS=1 ;;
    --cross-cuda) WANT_CROSS=1; WANT_CROSS_CUDA=1 ;;
    --fuzz) WANT_FUZZ=1 ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    *) echo "install-deps.sh: unknown option '$arg' (see --help)" >&2; exit 2 ;;
  esac
done

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
if [ "$WANT_CROSS" = 1 ]; then
  # Cross build for Jetson (aarch64): compiler, emulator, and the :arm64 builds of the libraries
  # the runtime and tools link (header-only packages serve both architectures).
  PKGS+=(g++-aarch64-linux-gnu qemu-user file
         libc6:arm64 libstdc++6:arm64 libflatbuffers-dev:arm64 libpcre2-dev:arm64 libssl-dev:arm64)
  if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    $SUDO dpkg --add-architecture arm64
  fi
fi
if [ "${WANT_FUZZ:-0}" = 1 ]; then
  PKGS+=(clang libclang-rt-14-dev)  # libFuzzer + sanitizer runtimes for clang 14
fi

missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -gt 0 ]; then
  echo "[install-deps] installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  echo "[install-deps] Debian packages present"
fi

if [ "$WANT_PYTHON" = 1 ]; then
  CACHE="${PHASEKV_CACHE:-$HOME/.cache/phasekv}"
  VENV="$CACHE/venv"
  # pyenv's python3 cannot see Debian's python3-* modules, so the test tooling lives in its own venv.
  if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c 'import gguf, numpy, tokenizers, jsonschema' 2>/dev/null; then
    echo "[install-deps] creating Python venv in $VENV"
    mkdir -p "$CACHE"
    PY=python3
    command -v "$PY" >/dev/null || PY=/usr/bin/python3
    "$PY" -m venv "$VENV"
    "$VENV/bin/pip" install -q --disable-pip-version-check "numpy>=1.24" "gguf==0.19.0" "tokenizers==0.23.3" \
      "jsonschema==4.26.0"
  else
    echo "[install-deps] Python venv present: $VENV"
  fi
  # JAX on the CPU (jaxlib ~85 MB): the trainer of tools/train. Not torch: PyPI's torch wheel
  # pulls several GB of CUDA libraries.
  if [ "${WANT_TRAIN:-0}" = 1 ] && ! "$VENV/bin/python" -c 'import jax, optax' 2>/dev/null; then
    echo "[install-deps] installing jax and optax into $VENV"
    "$VENV/bin/pip" install -q --disable-pip-version-check "jax==0.10.2" "jaxlib==0.10.2" "optax==0.2.8"
  fi
fi

if [ "${WANT_CROSS_CUDA:-0}" = 1 ]; then
  "$(dirname "$0")/cuda-cross.sh"
fi
