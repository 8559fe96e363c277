// Device arena, pinned staging and weight residency of the CUDA backend. Every CUDA allocation
// PhaseKV makes goes through these functions, at context creation or at a model's first CUDA
// bind, never inside prefill, decode or the probe loop.
//
// Weights: one copy per model (Model::weights_for), in one of two modes:
//   * device copy (discrete GPUs): one cudaMalloc of the tensor blob and the small host-made
//     tables (converted norms, RoPE frequencies), copied once;
//   * mapped host (integrated GPUs: every Jetson): one cudaHostAlloc(cudaHostAllocMapped)
//     buffer the same data is copied into, read by kernels through its device pointer. This is
//     right by construction: the GPU reads pinned memory CUDA allocated itself, never pages of a
//     file mapping (cudaHostRegister of an mmap is unsupported on some Jetsons, and llama.cpp
//     turned its mmap-on-iGPU path off after corrupt output on Orin: its issue #15034, PR #16308).
#pragma once

#include <memory>

#include "backend.h"

namespace phasekv {
namespace cuda {

enum class WeightsMode : uint8_t { Auto, DeviceCopy, MappedHost };

Status allocate_space(MemorySpace space, size_t bytes, void** out);
void release_space(MemorySpace space, void* p);
// `mode` is DeviceCopy or MappedHost (resolved by the backend).
Status map_weights_cuda(WeightsMode mode, const HostRegion* regions, int n, std::shared_ptr<WeightMapping>* out);

}  // namespace cuda
}  // namespace phasekv
