// An inference context: the KV memory and activation buffers for one sequence, planned and
// allocated once at creation, plus the backend that runs the ops. prefill() and decode()
// allocate nothing. Any number of contexts may share one Model.
#pragma once

#include <memory>

#include "model.h"

namespace phasekv {

class CpuBackend;

struct ContextParams {
  uint32_t n_ctx = 2048;   // maximum tokens in the context (<= the model's max_positions)
  uint32_t n_batch = 256;  // prefill chunk: tokens evaluated per forward pass (>= 1; capped at n_ctx)
  int n_threads = 0;       // worker threads (>= 1); 0 is rejected (default_context_params() fills it)
  const char* kernels = nullptr;  // CPU instruction set ("avx2", "neon", "portable"); nullptr = best
};

ContextParams default_context_params();

class Context {
 public:
  static Status create(const Model& model, const ContextParams& params, std::unique_ptr<Context>* out);
  ~Context();

  // Appends n tokens and evaluates them in chunks of n_batch; afterwards logits() are those
  // of the last token. Input errors (empty, too long for the context, unknown token ids)
  // are reported before anything changes: the context stays as it was.
  Status prefill(const int32_t* tokens, size_t n);
  Status decode(int32_t token) { return prefill(&token, 1); }
  const float* logits() const { return logits_; }  // [vocab_size]
  uint32_t n_past() const { return n_past_; }
  uint32_t n_ctx() const { return params_.n_ctx; }
  void reset() { n_past_ = 0; }
  const Model& model() const { return model_; }
  const ContextParams& params() const { return params_; }
  const char* kernels_name() const;
  uint64_t planned_bytes() const { return arena_bytes_; }

 private:
  Context(const Model& m, const ContextParams& p);
  Status plan_and_allocate();
  void eval_chunk(const int32_t* tokens, int n);

  const Model& model_;
  ContextParams params_;
  std::unique_ptr<CpuBackend> backend_;
  uint32_t n_past_ = 0;

  // One allocation holds everything below (64-byte aligned sub-buffers).
  void* arena_ = nullptr;
  uint64_t arena_bytes_ = 0;
  float* k_cache_ = nullptr;  // [n_layers, n_ctx, n_kv_heads * head_dim]
  float* v_cache_ = nullptr;  // [n_layers, n_ctx, n_kv_heads * head_dim]
  float* x_ = nullptr;        // [n_batch, d_model] residual stream
  float* xn_ = nullptr;       // [n_batch, d_model] normalised
  float* q_ = nullptr;        // [n_batch, n_heads * head_dim]
  float* att_ = nullptr;      // [n_batch, n_heads * head_dim]
  float* tmp_ = nullptr;      // [n_batch, d_model]
  float* gate_ = nullptr;     // [n_batch, ffn_dim]
  float* up_ = nullptr;       // [n_batch, ffn_dim]
  float* logits_ = nullptr;   // [vocab_size]
};

}  // namespace phasekv
