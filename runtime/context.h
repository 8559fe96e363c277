// An inference context: the attention memories and activation buffers for one sequence,
// planned (memory_plan.h) and taken in one arena at creation, plus the backend that runs the
// ops. prefill() and decode() allocate nothing. Any number of contexts may share one Model.
#pragma once

#include <memory>
#include <vector>

#include "memory_plan.h"
#include "model.h"

namespace phasekv {

class CpuBackend;

struct ContextParams {
  uint32_t n_ctx = 2048;   // maximum tokens in the context (<= the model's max_positions)
  uint32_t n_batch = 256;  // prefill chunk: tokens evaluated per forward pass (>= 1; capped at n_ctx)
  int n_threads = 0;       // worker threads (>= 1); 0 is rejected (default_context_params() fills it)
  const char* kernels = nullptr;  // CPU instruction set ("avx2", "neon", "portable"); nullptr = best
  uint64_t memory_budget = 0;     // bytes the context may allocate (its arena); 0 = no limit
  bool prefault = true;           // touch every arena page at creation (no page faults while decoding)
  bool beyond_trained = false;    // allow n_ctx above the model's max_positions (quality is the caller's risk)
};

ContextParams default_context_params();

class Context {
 public:
  // Fails with kBudgetExceeded (the itemised plan in the message) when the plan exceeds
  // params.memory_budget, kOutOfMemory when the arena cannot be had.
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
  void reset();
  const Model& model() const { return model_; }
  const ContextParams& params() const { return params_; }
  const char* kernels_name() const;
  const MemoryPlan& plan() const { return plan_; }
  uint64_t planned_bytes() const { return plan_.arena_bytes; }
  uint64_t allocated_bytes() const { return arena_bytes_; }  // what the arena holds (== planned)

  // Snapshots: the state after n_past tokens (every layer's used memory, the open-window
  // accumulators and the last logits) copied into a caller buffer; restore() makes any
  // context of the same model, memory layout and n_ctx >= the snapshot's n_past continue
  // bit-identically. snapshot_bytes() is the size for the current state.
  size_t snapshot_bytes() const;
  Status snapshot(void* buffer, size_t capacity, size_t* written = nullptr) const;
  Status restore(const void* buffer, size_t size);

 private:
  struct LayerMem {
    float* k = nullptr;      // full: [n_ctx, kvd]; windowed: ring [ring_rows, kvd]
    float* v = nullptr;
    uint32_t ring_rows = 0;  // windowed layers: min(n_ctx, L)
    float* k_ent = nullptr;  // [n_ctx / S, kvd]
    float* v_ent = nullptr;
    float* acc = nullptr;    // [2][n_acc][n_kv][2 d_g + hd]
    uint32_t n_acc = 0;
    uint32_t d_g = 1;
  };

  Context(const Model& m, const ContextParams& p);
  Status plan_and_allocate();
  void eval_chunk(const int32_t* tokens, int n);
  uint64_t layout_hash() const;

  const Model& model_;
  ContextParams params_;
  MemoryPlan plan_;
  std::unique_ptr<CpuBackend> backend_;
  uint32_t n_past_ = 0;

  // One allocation holds everything below (kPlanAlign-aligned buffers, in plan order).
  void* arena_ = nullptr;
  uint64_t arena_bytes_ = 0;
  std::vector<LayerMem> mem_;
  float* x_ = nullptr;        // [n_batch, d_model] residual stream
  float* xn_ = nullptr;       // [n_batch, d_model] normalised
  float* q_ = nullptr;        // [n_batch, n_heads * head_dim]
  float* att_ = nullptr;      // [n_batch, n_heads * head_dim]
  float* tmp_ = nullptr;      // [n_batch, d_model]
  float* gate_ = nullptr;     // [n_batch, ffn_dim]
  float* up_ = nullptr;       // [n_batch, ffn_dim]
  float* logits_ = nullptr;   // [vocab_size]
  float* k_chunk_ = nullptr;  // [n_batch, kvd] K/V rows of the chunk (windowed layers)
  float* v_chunk_ = nullptr;
  float* k_raw_ = nullptr;    // [n_batch, kvd] un-rotated keys (rotate-entry compressors)
  float* gate_buf_[2] = {nullptr, nullptr};     // [n_batch, gate cols] compressor gate logits
  float* payload_buf_[2] = {nullptr, nullptr};  // [n_batch, payload cols] compressor payloads
};

}  // namespace phasekv
