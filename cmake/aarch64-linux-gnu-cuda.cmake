# Cross-compiling PhaseKV *with the CUDA backend* for 64-bit Arm Linux (Jetson Thor / Orin on
# JetPack 7, whose CUDA 13 is NVIDIA's SBSA stack) from an x86-64 machine: the CPU side exactly
# as cmake/aarch64-linux-gnu.cmake, device code compiled by the host's nvcc with
# aarch64-linux-gnu-g++ as its host compiler, linked against the aarch64 libcudart and
# libcublasLt of the target tree that scripts/cuda-cross.sh assembles from NVIDIA's PyPI wheels
# (scripts/install-deps.sh --cross-cuda).
#
# PHASEKV_CUDA_CROSS_ROOT (cache variable or environment) names that tree; the default is the
# one cuda-cross.sh writes. Its bin/nvcc links to the host nvcc, so nvcc's profile resolves to
# the tree's targets/aarch64-linux (-target-dir) and CMake's CUDA support, which looks for
# targets/aarch64-linux when cross-compiling, finds the same headers and libraries.
include(${CMAKE_CURRENT_LIST_DIR}/aarch64-linux-gnu.cmake)

if(NOT PHASEKV_CUDA_CROSS_ROOT)
  if(DEFINED ENV{PHASEKV_CUDA_CROSS_ROOT})
    set(PHASEKV_CUDA_CROSS_ROOT "$ENV{PHASEKV_CUDA_CROSS_ROOT}")
  elseif(DEFINED ENV{PHASEKV_CACHE})
    set(PHASEKV_CUDA_CROSS_ROOT "$ENV{PHASEKV_CACHE}/cuda-cross/sbsa-13.0")
  else()
    set(PHASEKV_CUDA_CROSS_ROOT "$ENV{HOME}/.cache/phasekv/cuda-cross/sbsa-13.0")
  endif()
endif()
if(NOT EXISTS "${PHASEKV_CUDA_CROSS_ROOT}/targets/aarch64-linux/lib/libcudart.so.13")
  message(FATAL_ERROR "no aarch64 CUDA target tree at PHASEKV_CUDA_CROSS_ROOT=${PHASEKV_CUDA_CROSS_ROOT} "
                      "(run scripts/install-deps.sh --cross-cuda, or set PHASEKV_CUDA_CROSS_ROOT)")
endif()
# Try-compiles run with the toolchain again: hand them the root.
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES PHASEKV_CUDA_CROSS_ROOT)

set(CMAKE_CUDA_COMPILER "${PHASEKV_CUDA_CROSS_ROOT}/bin/nvcc")
set(CMAKE_CUDA_HOST_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_CUDA_FLAGS_INIT "-target-dir aarch64-linux")
set(CUDAToolkit_ROOT "${PHASEKV_CUDA_CROSS_ROOT}")
