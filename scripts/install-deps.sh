#!/usr/bin/env bash
# Installs what PhaseKV needs to build and test on Debian 12, skipping what is already present.
# Idempotent; run as root (or with sudo available). Usage: scripts/install-deps.sh [--python]
#   --python  also create the Python test venv (gguf, numpy) under $PHASEKV_CACHE/venv
set -euo pipefail

PKGS=(
  cmake g++ make ninja-build pkg-config unzip
  libflatbuffers-dev flatbuffers-compiler   # model-file metadata (schema compiled by flatc at build time)
  libmimalloc-dev                           # host arenas
  libpcre2-dev                              # Unicode classes of the tokenizer's pre-tokenizer regex
  doctest-dev                               # unit tests
  libcli11-dev                              # the phasekv command line
  nlohmann-json3-dev                        # --json output of the tools, safetensors headers
  libssl-dev                                # SHA-256 of model and template in self-test reports (tools only)
  chromium                                  # tests only: screenshots the self-test's HTML report headless
)

missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -gt 0 ]; then
  echo "[install-deps] installing: ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  echo "[install-deps] Debian packages present"
fi

if [ "${1:-}" = "--python" ]; then
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
fi
