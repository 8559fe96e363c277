// The CPU backend: the reference implementation of the backend seam, multi-threaded over a
// fixed thread pool, vectorized through cpu_kernels.h.
#pragma once

#include <memory>

#include "backend.h"
#include "cpu_kernels.h"
#include "thread_pool.h"

namespace phasekv {

struct MatmulJob;  // cpu_backend.cpp

class CpuBackend final : public Backend {
 public:
  // n_threads >= 1. `table` selects the instruction set (nullptr: the best for this CPU); `mode`
  // how quantized weights meet activations (cpu_kernels.h MatmulMode).
  explicit CpuBackend(int n_threads, const cpu::KernelTable* table = nullptr,
                      cpu::MatmulMode mode = cpu::MatmulMode::Reference);
  cpu::MatmulMode mode() const { return mode_; }

  const char* name() const override { return "cpu"; }
  const char* isa() const { return k_.name; }
  const char* kernels_name() const override;
  int n_threads() const { return pool_.size(); }
  bool supports(BackendOp op, DType weight_type) const override;
  size_t workspace_bytes(const WorkspaceQuery& q) const override;
  Status bind_workspace(void* base, size_t bytes, const WorkspaceQuery& q) override;

  // Everything in ordinary host memory; weights read in place from the mapped file.
  MemorySpace state_space() const override { return MemorySpace::Host; }
  MemorySpace weights_space() const override { return MemorySpace::Host; }
  // "cpu": the weights in place; in the q8 modes, the matmul weights that fit a layout the kernels
  // have as copies in it (Q4_0, Q4_1, Q8_0): "cpu-r16" in R16 where it fits (AVX2), "cpu-r4" in R4
  // (`avx512vnni-r4`), "cpu-r16-r4" R16 where it fits, else R4 (AVX-512 VNNI) (cpu_backend.cpp
  // RepackedWeights, cpu_kernels.h WeightLayout). Contexts share a mapping only with the same key.
  std::string weights_key() const override {
    if (!repacks_weights()) return "cpu";
    return has_r16() && has_r4() ? "cpu-r16-r4" : has_r16() ? "cpu-r16" : "cpu-r4";
  }
  bool has_r4() const { return k_.matmul_q8_rows_r4 && k_.matmul_q8x2_rows_r4; }
  bool has_r16() const { return k_.matmul_q8_rows_r16 && k_.matmul_q8x2_rows_r16; }
  bool repacks_weights() const;
  Status map_weights(const HostRegion* regions, int n_regions, std::shared_ptr<WeightMapping>* out) override;
  Status allocate(MemorySpace space, size_t bytes, void** out) override;
  void release(MemorySpace space, void* p) override;
  Status zero(MemorySpace space, void* p, size_t bytes) override;
  void copy(void* dst, const void* src, size_t bytes) override;
  void upload(void* dst, const void* host_src, size_t bytes) override { copy(dst, host_src, bytes); }
  void download(void* host_dst, const void* src, size_t bytes) override { copy(host_dst, src, bytes); }
  Status synchronize() override { return Status::Ok(); }  // every op has finished when it returns

  void embed(const WeightView& table, const int32_t* tokens, int n, float* out) override;
  void rmsnorm(const float* x, const float* w, float eps, int n, int dim, float* out) override;
  void matmul(const WeightView* w, float* const* y, int n_mats, const float* x, int n) override;
  void rope(float* x, int n, int n_heads, int head_dim, int first_pos, const float* inv_freq, int rope_dim,
            bool interleaved, float pos_scale) override;
  void attention(const AttentionArgs& a) override;
  void compress(const CompressArgs& a) override;
  void compress_reset(float* acc, int n_windows, int n_kv_heads, int d_g, int head_dim) override;
  // Scratch for a context's shapes with `n_threads` workers (what workspace_bytes reports).
  static size_t workspace_bytes_for(const WorkspaceQuery& q, int n_threads);
  void silu_mul(const float* g, const float* u, float* out, size_t n) override;
  void matmul_silu(const WeightView& gate, const WeightView& up, float* g, float* u, float* out, const float* x,
                   int n) override;
  void add(float* x, const float* y, size_t n) override;
  void ring_write(const RingWriteArgs& a) override;
  void gold_score(const float* logits, int n, int32_t gold, ScoreResult* out) override;

 private:
  int prepare_matmul(MatmulJob* j, const WeightView* w, float* const* y, int n_mats, const float* x, int n, bool paired);

  const cpu::KernelTable& k_;
  cpu::MatmulMode mode_;
  std::string name_;
  ThreadPool pool_;
  float* scratch_ = nullptr;     // [n_threads, scratch_stride_]
  cpu::BlockQ8x* xq_ = nullptr;  // [max_tokens, max_k / 32] the q8 mode's quantized activations
  cpu::BlockQ8x2* xq2_ = nullptr;  // the same bytes as the q8x2 mode's
  int xq_tokens_ = 0;
  size_t scratch_stride_ = 0;    // floats per thread: 4 * max_k (matmul) or n_ctx (scores)
  // The last position's rope tables (rope()): reused while the position and the frequencies'
  // values (compared, not their address) match.
  struct RopeCache {
    bool valid = false;
    float pos = 0.0f;
    int half = 0;
    float inv_freq[512], cos_t[512], sin_t[512];
  } rope_cache_;
};

}  // namespace phasekv
