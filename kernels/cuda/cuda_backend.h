// The CUDA backend: every BackendOp as a kernel (one .cu/.cuh pair per op family, launched on
// one stream), the device arena and pinned staging (cuda_memory.cuh), weights resident once per
// model. Kernels are written for correctness first (checked op by op against the CPU backend by
// tests/backend/test_backend_ops.cpp, end to end by tests/cuda/test_cuda_e2e.cpp); speed is the
// next step. Ops never abort: a launch error is remembered and returned by synchronize(), which
// also reports execution errors (an illegal address) with CUDA's message.
//
// Includable from plain C++ (no CUDA headers).
#pragma once

#include <memory>
#include <string>

#include "backend.h"
#include "cuda_memory.cuh"

typedef struct CUstream_st* cudaStream_t;

namespace phasekv {
namespace cuda {

struct CudaBackendParams {
  int device = 0;
  WeightsMode weights = WeightsMode::Auto;  // Auto: MappedHost on an integrated GPU, else DeviceCopy
};

class CudaBackend final : public Backend {
 public:
  // Whether a device is usable here (*why: the driver's or runtime's reason when not).
  static bool available(std::string* why);
  static Status create(const CudaBackendParams& p, std::unique_ptr<CudaBackend>* out);
  ~CudaBackend() override;

  const char* name() const override { return "cuda"; }
  const char* kernels_name() const override { return description_.c_str(); }
  bool integrated() const { return integrated_; }
  bool supports(BackendOp op, DType weight_type) const override;
  size_t workspace_bytes(const WorkspaceQuery& q) const override;
  Status bind_workspace(void* base, size_t bytes, const WorkspaceQuery& q) override;

  MemorySpace state_space() const override { return MemorySpace::Device; }
  MemorySpace weights_space() const override;
  std::string weights_key() const override;
  Status map_weights(const HostRegion* regions, int n_regions, std::shared_ptr<WeightMapping>* out) override;
  Status allocate(MemorySpace space, size_t bytes, void** out) override;
  void release(MemorySpace space, void* p) override;
  Status zero(MemorySpace space, void* p, size_t bytes) override;
  void copy(void* dst, const void* src, size_t bytes) override;
  void upload(void* dst, const void* host_src, size_t bytes) override;
  void download(void* host_dst, const void* src, size_t bytes) override;
  Status synchronize() override;

  void embed(const WeightView& table, const int32_t* tokens, int n, float* out) override;
  void rmsnorm(const float* x, const float* w, float eps, int n, int dim, float* out) override;
  void matmul(const WeightView* w, float* const* y, int n_mats, const float* x, int n) override;
  void rope(float* x, int n, int n_heads, int head_dim, int first_pos, const float* inv_freq, int rope_dim,
            bool interleaved, float pos_scale) override;
  void attention(const AttentionArgs& a) override;
  void compress(const CompressArgs& a) override;
  void compress_reset(float* acc, int n_windows, int n_kv_heads, int d_g, int head_dim) override;
  void silu_mul(const float* g, const float* u, float* out, size_t n) override;
  void add(float* x, const float* y, size_t n) override;
  void ring_write(const RingWriteArgs& a) override;
  void gold_score(const float* logits, int n, int32_t gold, ScoreResult* out) override;

 private:
  CudaBackend() = default;
  void check_launch(const char* op);  // remembers the first launch error
  void fail(const Status& s);

  int device_ = 0;
  bool integrated_ = false;
  WeightsMode weights_ = WeightsMode::DeviceCopy;
  cudaStream_t stream_ = nullptr;
  std::string description_;
  Status error_;  // first failure since the last synchronize()
};

}  // namespace cuda
}  // namespace phasekv
