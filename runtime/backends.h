// Choosing and making a backend (the one place the runtime names backend types): the CPU
// backend always; the CUDA backend when the build has it (PHASEKV_CUDA) and a device is present.
#pragma once

#include <memory>
#include <string>

#include "backend.h"
#include "cpu_kernels.h"

namespace phasekv {

enum class BackendKind : uint8_t {
  Cpu = 0,
  Cuda = 1,
  Auto = 2,  // CUDA when this build has it and a device is present, else the CPU
};
const char* backend_kind_name(BackendKind k);
// "cpu", "cuda", "auto"; false for anything else.
bool backend_kind_from_name(const char* name, BackendKind* out);

// How the CUDA backend holds a model's weights (DESIGN.md section 5).
enum class CudaWeights : uint8_t {
  Auto = 0,        // device copy on a discrete GPU, mapped host copy on an integrated one (Jetson)
  DeviceCopy = 1,  // one cudaMalloc'd copy of the tensor blob
  MappedHost = 2,  // one copy in cudaHostAlloc(..., Mapped) memory that kernels read over the bus
};
const char* cuda_weights_name(CudaWeights w);
bool cuda_weights_from_name(const char* name, CudaWeights* out);

struct BackendParams {
  BackendKind kind = BackendKind::Cpu;
  int n_threads = 1;                         // CPU worker threads (the CUDA backend ignores it)
  const cpu::KernelTable* cpu_kernels = nullptr;  // nullptr: the best for this CPU
  cpu::MatmulMode cpu_mode = cpu::MatmulMode::Reference;  // the CPU backend's matmul mode
  int device = 0;                            // CUDA device ordinal
  CudaWeights cuda_weights = CudaWeights::Auto;
};

// kUnsupported naming the reason when `kind` is Cuda and the build has no CUDA backend or the
// machine has no usable device; Auto falls back to the CPU then.
Status make_backend(const BackendParams& p, std::unique_ptr<Backend>* out);
// The CPU backend's workspace for `q` with n_threads workers (plans made without a backend).
size_t cpu_workspace_bytes(const WorkspaceQuery& q, int n_threads);
// Whether a CUDA backend can be made here; *why says why not.
bool cuda_backend_available(std::string* why);

}  // namespace phasekv
