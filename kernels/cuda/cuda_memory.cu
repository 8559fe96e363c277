#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>

#include "cuda_check.h"
#include "cuda_memory.cuh"

namespace phasekv {
namespace cuda {

namespace {

size_t align256(size_t b) { return (b + 255) & ~size_t(255); }

class CudaWeights final : public WeightMapping {
 public:
  CudaWeights(WeightsMode mode, uint8_t* base, uint8_t* device_view, uint64_t bytes) : mode_kind_(mode), base_(base) {
    mode_ = mode == WeightsMode::DeviceCopy ? "device copy" : "mapped host";
    space_ = mode == WeightsMode::DeviceCopy ? MemorySpace::Device : MemorySpace::PinnedHost;
    bytes_ = bytes;
    view_ = device_view;
  }
  ~CudaWeights() override {
    if (mode_kind_ == WeightsMode::DeviceCopy) cudaFree(base_);
    else cudaFreeHost(base_);
  }
  void add(const uint8_t* host, size_t bytes, size_t at) { regions_.push_back({host, bytes, view_ + at}); }

 private:
  WeightsMode mode_kind_;
  uint8_t* base_;          // what was allocated
  uint8_t* view_ = nullptr;  // the address kernels use
};

}  // namespace

Status allocate_space(MemorySpace space, size_t bytes, void** out) {
  *out = nullptr;
  switch (space) {
    case MemorySpace::Device: PKV_CUDA_CHECK(cudaMalloc(out, bytes)); return Status::Ok();
    case MemorySpace::PinnedHost: PKV_CUDA_CHECK(cudaHostAlloc(out, bytes, cudaHostAllocDefault)); return Status::Ok();
    case MemorySpace::Host:
      *out = std::aligned_alloc(256, align256(bytes));
      if (!*out) return make_error(StatusCode::kOutOfMemory, "cannot allocate %zu bytes of host memory", bytes);
      return Status::Ok();
  }
  return make_error(StatusCode::kInternal, "cuda backend: memory space %u is unknown", unsigned(space));
}

void release_space(MemorySpace space, void* p) {
  if (!p) return;
  switch (space) {
    case MemorySpace::Device: cudaFree(p); return;
    case MemorySpace::PinnedHost: cudaFreeHost(p); return;
    case MemorySpace::Host: std::free(p); return;
  }
}

Status map_weights_cuda(WeightsMode mode, const HostRegion* regions, int n, std::shared_ptr<WeightMapping>* out) {
  size_t total = 0;
  for (int i = 0; i < n; ++i) total += align256(regions[i].bytes);
  uint8_t* base = nullptr;
  uint8_t* view = nullptr;
  if (mode == WeightsMode::DeviceCopy) {
    void* p = nullptr;
    PKV_CUDA_CHECK(cudaMalloc(&p, total));
    base = view = static_cast<uint8_t*>(p);
  } else {
    void* p = nullptr;
    PKV_CUDA_CHECK(cudaHostAlloc(&p, total, cudaHostAllocMapped));
    base = static_cast<uint8_t*>(p);
    void* d = nullptr;
    const cudaError_t e = cudaHostGetDevicePointer(&d, p, 0);
    if (e != cudaSuccess) {
      cudaFreeHost(p);
      return cuda_status(int(e), "cudaHostGetDevicePointer", __FILE__, __LINE__);
    }
    view = static_cast<uint8_t*>(d);
  }
  auto m = std::make_shared<CudaWeights>(mode, base, view, total);
  size_t at = 0;
  for (int i = 0; i < n; ++i) {
    const size_t b = regions[i].bytes;
    if (b) {
      if (mode == WeightsMode::DeviceCopy) {
        PKV_CUDA_CHECK(cudaMemcpy(base + at, regions[i].data, b, cudaMemcpyHostToDevice));
      } else {
        std::memcpy(base + at, regions[i].data, b);  // the file's bytes, read once into pinned memory
      }
    }
    m->add(static_cast<const uint8_t*>(regions[i].data), b, at);
    at += align256(b);
  }
  *out = std::move(m);
  return Status::Ok();
}

}  // namespace cuda
}  // namespace phasekv
