#include "backends.h"

#include <cstring>

#include "cpu_backend.h"
#if PHASEKV_HAVE_CUDA
#include "cuda_backend.h"
#endif

namespace phasekv {

const char* backend_kind_name(BackendKind k) {
  switch (k) {
    case BackendKind::Cpu: return "cpu";
    case BackendKind::Cuda: return "cuda";
    case BackendKind::Auto: return "auto";
  }
  return "unknown";
}

bool backend_kind_from_name(const char* name, BackendKind* out) {
  if (!name) return false;
  for (BackendKind k : {BackendKind::Cpu, BackendKind::Cuda, BackendKind::Auto})
    if (std::strcmp(name, backend_kind_name(k)) == 0) {
      *out = k;
      return true;
    }
  return false;
}

const char* cuda_weights_name(CudaWeights w) {
  switch (w) {
    case CudaWeights::Auto: return "auto";
    case CudaWeights::DeviceCopy: return "device";
    case CudaWeights::MappedHost: return "mapped";
  }
  return "unknown";
}

bool cuda_weights_from_name(const char* name, CudaWeights* out) {
  if (!name) return false;
  for (CudaWeights w : {CudaWeights::Auto, CudaWeights::DeviceCopy, CudaWeights::MappedHost})
    if (std::strcmp(name, cuda_weights_name(w)) == 0) {
      *out = w;
      return true;
    }
  return false;
}

size_t cpu_workspace_bytes(const WorkspaceQuery& q, int n_threads) {
  return CpuBackend::workspace_bytes_for(q, n_threads);
}

bool cuda_backend_available(std::string* why) {
#if PHASEKV_HAVE_CUDA
  std::string w;
  if (cuda::CudaBackend::available(&w)) return true;
  if (why) *why = "no usable CUDA device (" + w + ")";
  return false;
#else
  if (why) *why = "this build has no CUDA backend (configure with -DPHASEKV_CUDA=ON)";
  return false;
#endif
}

Status make_backend(const BackendParams& p, std::unique_ptr<Backend>* out) {
  BackendKind kind = p.kind;
  std::string why;
  if (kind == BackendKind::Auto) kind = cuda_backend_available(&why) ? BackendKind::Cuda : BackendKind::Cpu;
  switch (kind) {
    case BackendKind::Cpu:
      out->reset(new CpuBackend(p.n_threads, p.cpu_kernels, p.cpu_mode));
      return Status::Ok();
    case BackendKind::Cuda: {
      if (!cuda_backend_available(&why))
        return make_error(StatusCode::kUnsupported, "backend = cuda: %s", why.c_str());
#if PHASEKV_HAVE_CUDA
      cuda::CudaBackendParams cp;
      cp.device = p.device;
      cp.weights = p.cuda_weights == CudaWeights::DeviceCopy   ? cuda::WeightsMode::DeviceCopy
                   : p.cuda_weights == CudaWeights::MappedHost ? cuda::WeightsMode::MappedHost
                                                               : cuda::WeightsMode::Auto;
      std::unique_ptr<cuda::CudaBackend> b;
      PKV_RETURN_IF_ERROR(cuda::CudaBackend::create(cp, &b));
      *out = std::move(b);
      return Status::Ok();
#else
      return make_error(StatusCode::kUnsupported, "backend = cuda: this build has no CUDA backend");
#endif
    }
    case BackendKind::Auto: break;
  }
  return make_error(StatusCode::kInvalidArgument, "backend kind %u is unknown", unsigned(p.kind));
}

}  // namespace phasekv
