#!/usr/bin/env bash
# Assembles an aarch64 (SBSA) CUDA 13 target tree for cross-compiling the CUDA backend from an
# x86-64 machine (preset jetson-cross-cuda), from NVIDIA's PyPI wheels, and prints its root.
# Idempotent: a tree whose stamp names the same wheels is reused. Run by
# `scripts/install-deps.sh --cross-cuda`; needs the host CUDA toolkit (nvcc) and pip.
#
# The root is a toolkit of its own: bin/ and nvvm/ link to the host toolkit's compiler
# (nvcc reads nvcc.profile relative to the path it was started from, so a symlinked bin/nvcc
# uses this root's targets/), and targets/sbsa-linux holds the wheels' aarch64 headers and
# libraries (targets/aarch64-linux links to it: the name CMake's CUDA support looks for when
# cross-compiling). The host compiler is aarch64-linux-gnu-g++; see cmake/aarch64-linux-gnu-cuda.cmake.
#
# Wheels (manylinux_2_17_aarch64), pinned to the components of the host toolkit (its
# dist-info/: nvcc and crt 13.0.88, runtime 13.0.96, CCCL 13.0.85, cuBLAS 13.1.0.3):
#   nvidia-cuda-runtime 13.0.96  libcudart.so.13, libcudart_static.a, the runtime headers
#   nvidia-cuda-crt     13.0.88  crt/ headers nvcc's host-side compile includes
#   nvidia-cuda-cccl    13.0.85  CCCL headers (include/cccl)
#   nvidia-cublas       13.10.0.20  libcublasLt.so.13: the only nvidia-cublas for aarch64 on
#                                the package index here (13.1.0.3 is not); its headers are
#                                replaced by the host toolkit's 13.1 ones, which match the 13.0
#                                runtime headers (13.10's need newer ones); linked by its SONAME
#                                (libcublasLt.so.13, symbols versioned libcublasLt.so.13), so the
#                                binary binds to whatever cuBLAS 13.x the Jetson's JetPack has
# Environment: PHASEKV_CACHE (default ~/.cache/phasekv), CUDA_HOME (default /usr/local/cuda).
set -euo pipefail

CACHE="${PHASEKV_CACHE:-$HOME/.cache/phasekv}"
CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
TREE_REV=4  # bump when the tree's layout changes
WHEELS=(nvidia-cuda-runtime==13.0.96 nvidia-cuda-crt==13.0.88 nvidia-cuda-cccl==13.0.85 nvidia-cublas==13.10.0.20)
ROOT="$CACHE/cuda-cross/sbsa-13.0"
STAMP="$ROOT/.phasekv-wheels"

case "${1:-}" in
  -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
  "") ;;
  *) echo "cuda-cross.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
esac

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$TREE_REV ${WHEELS[*]}" ] \
   && [ -e "$ROOT/targets/sbsa-linux/lib/libcudart.so.13" ] && [ -e "$ROOT/bin/nvcc" ]; then
  echo "[cuda-cross] aarch64 CUDA target tree present: $ROOT" >&2
  echo "$ROOT"
  exit 0
fi

if [ ! -x "$CUDA_HOME/bin/nvcc" ]; then
  echo "cuda-cross.sh: no nvcc in $CUDA_HOME/bin (set CUDA_HOME to the host CUDA 13 toolkit)" >&2
  exit 2
fi
PY=python3
command -v "$PY" >/dev/null || PY=/usr/bin/python3

echo "[cuda-cross] fetching ${WHEELS[*]} (manylinux_2_17_aarch64)" >&2
DL="$CACHE/cuda-cross/wheels"
mkdir -p "$DL"
"$PY" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
  --platform manylinux_2_17_aarch64 --platform manylinux2014_aarch64 --python-version 3.11 \
  -d "$DL" "${WHEELS[@]}" >&2

TMP="$ROOT.tmp.$$"
rm -rf "$TMP"
mkdir -p "$TMP/bin" "$TMP/targets"
trap 'rm -rf "$TMP"' EXIT
for spec in "${WHEELS[@]}"; do
  name="${spec%%==*}"; ver="${spec##*==}"
  whl=$(ls "$DL/${name//-/_}-$ver-"*aarch64*.whl | head -1)
  unzip -qo "$whl" 'nvidia/cu13/include/*' 'nvidia/cu13/lib/*' -d "$TMP/w" 2>/dev/null || \
    unzip -qo "$whl" 'nvidia/cu13/include/*' -d "$TMP/w"
done
mv "$TMP/w/nvidia/cu13" "$TMP/targets/sbsa-linux"
rm -rf "$TMP/w"
ln -s sbsa-linux "$TMP/targets/aarch64-linux"
# The one header of the compiler itself that nvcc's generated host code includes: it belongs
# to the nvcc that runs (the host's, same release), not to a runtime wheel.
cp "$CUDA_HOME/targets/x86_64-linux/include/fatbinary_section.h" "$TMP/targets/sbsa-linux/include/"
# cuBLAS headers of the host toolkit's release (cuBLAS 13.1.0.3, with its 13.0.96 runtime): the
# 13.10 wheel's headers are written against a newer runtime's library_types.h.
# Architecture-independent; the 13.10 library exports every symbol the older headers name.
for h in cublas.h cublas_api.h cublas_v2.h cublasLt.h cublasXt.h; do
  cp "$CUDA_HOME/targets/x86_64-linux/include/$h" "$TMP/targets/sbsa-linux/include/$h"
done
lib="$TMP/targets/sbsa-linux/lib"
for so in libcudart libcublasLt libcublas; do
  [ -e "$lib/$so.so.13" ] && ln -sf "$so.so.13" "$lib/$so.so"
done
# The host compiler toolchain, by link: nvcc finds cicc, ptxas, fatbinary, nvlink and
# libdevice through this root's nvcc.profile ($(_HERE_)/..).
for f in "$CUDA_HOME"/bin/*; do ln -s "$f" "$TMP/bin/$(basename "$f")"; done
rm "$TMP/bin/nvcc.profile"
cp "$CUDA_HOME/bin/nvcc.profile" "$TMP/bin/nvcc.profile"
ln -s "$CUDA_HOME/nvvm" "$TMP/nvvm"
for f in "$lib/libcudart.so.13" "$lib/libcublasLt.so.13" "$TMP/targets/sbsa-linux/include/cuda_runtime.h" \
         "$TMP/targets/sbsa-linux/include/cublasLt.h" "$TMP/targets/sbsa-linux/include/crt/host_config.h"; do
  [ -e "$f" ] || { echo "cuda-cross.sh: the wheels did not provide $f" >&2; exit 1; }
done
file -L "$lib/libcudart.so.13" | grep -q "ARM aarch64" || { echo "cuda-cross.sh: libcudart.so.13 is not aarch64" >&2; exit 1; }
echo "$TREE_REV ${WHEELS[*]}" > "$TMP/.phasekv-wheels"
rm -rf "$ROOT"
mv "$TMP" "$ROOT"
trap - EXIT
rm -rf "$DL"  # ~0.6 GB of wheels, unpacked now
echo "[cuda-cross] aarch64 CUDA target tree: $ROOT ($(du -sh "$ROOT" | cut -f1))" >&2
echo "$ROOT"
