// An inference context: the attention memories and activation buffers for one sequence,
// planned (memory_plan.h) and taken in one arena per memory space at creation, plus the backend
// that runs the ops (CPU or CUDA, backends.h). prefill(), decode(), score(), snapshots and
// snapshot slots allocate nothing. Any number of contexts may share one Model.
//
// After a backend failure (a CUDA launch or execution error, reported by prefill with the CUDA
// message) the context's memory is undefined: every call but reset() is refused until reset().
#pragma once

#include <memory>
#include <vector>

#include "backends.h"
#include "memory_plan.h"
#include "model.h"

namespace phasekv {

struct ContextParams {
  uint32_t n_ctx = 2048;   // maximum tokens in the context (<= the model's max_positions)
  uint32_t n_batch = 256;  // prefill chunk: tokens evaluated per forward pass (>= 1; capped at n_ctx)
  int n_threads = 0;       // worker threads (>= 1); 0 is rejected (default_context_params() fills it)
  // CPU kernels: a mode and/or an instruction set, ':'-separated ("q8", "q8x2", "reference", "avx2",
  // "q8:portable"; cpu_kernels.h parse_kernel_spec). nullptr: $PHASEKV_KERNELS, else the
  // reference mode on the best instruction set. q8 = 8-bit activations with integer dot products.
  const char* kernels = nullptr;
  uint64_t memory_budget = 0;     // bytes the context may allocate (its arena); 0 = no limit
  bool prefault = true;           // touch every arena page at creation (no page faults while decoding)
  bool beyond_trained = false;    // allow n_ctx above the model's max_positions (quality is the caller's risk)
  BackendKind backend = BackendKind::Cpu;  // cpu, cuda, or auto (CUDA when a device is present)
  int device = 0;                          // CUDA device ordinal
  CudaWeights cuda_weights = CudaWeights::Auto;  // CUDA: device copy or mapped host copy of the weights
  uint32_t snapshot_slots = 0;    // states save_slot()/load_slot() keep in backend memory (planned)
};

ContextParams default_context_params();

class Context {
 public:
  // Fails with kBudgetExceeded (the itemised plan in the message) when the plan exceeds
  // params.memory_budget, kOutOfMemory when the arena cannot be had.
  static Status create(const Model& model, const ContextParams& params, std::unique_ptr<Context>* out);
  // The same on a backend the caller made (an embedder's own, or a test's): params.backend,
  // device and cuda_weights are ignored; the context owns `backend` from here on.
  static Status create(const Model& model, const ContextParams& params, std::unique_ptr<Backend> backend,
                       std::unique_ptr<Context>* out);
  ~Context();

  // Appends n tokens and evaluates them in chunks of n_batch; afterwards logits() are those
  // of the last token. Input errors (empty, too long for the context, unknown token ids)
  // are reported before anything changes: the context stays as it was.
  Status prefill(const int32_t* tokens, size_t n);
  Status decode(int32_t token) { return prefill(&token, 1); }
  // The last token's logits in host memory: [vocab_size]. With a GPU backend they are copied
  // into a planned pinned buffer at the end of each prefill.
  const float* logits() const { return logits_host_; }
  // NLL, argmax and hit of `gold` over the last logits, computed by the backend where the
  // logits live (nothing vocabulary-sized crosses the bus).
  Status score(int32_t gold, ScoreResult* out);
  uint32_t n_past() const { return n_past_; }
  // Analysis hook (`phasekv inspect --gates`): when set, called after the compressor of every
  // compressed layer ran on a prefill chunk, with that layer's arguments (the chunk's gate
  // logits and the biases, host pointers on the CPU backend; refused on a GPU backend).
  // Off (nullptr) by default; a function pointer, so setting it allocates nothing.
  using CompressObserver = void (*)(void* user, uint32_t layer, const CompressArgs& args);
  Status set_compress_observer(CompressObserver observer, void* user);
  uint32_t n_ctx() const { return params_.n_ctx; }
  void reset();
  const Model& model() const { return model_; }
  const ContextParams& params() const { return params_; }
  const char* kernels_name() const;  // "avx2", "neon", "portable", or the GPU ("cuda sm_90")
  const char* backend_name() const { return backend_->name(); }
  // Where the weights this context reads live, and the mapping's mode ("host", "device copy", ...).
  const WeightMapping& weights() const { return *weights_; }
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
  // The same state kept in one of params.snapshot_slots planned buffers in backend memory (device
  // memory on CUDA): no copy crosses the bus. load_slot() fails for a slot never saved.
  Status save_slot(uint32_t slot);
  Status load_slot(uint32_t slot);

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
  Status bind_weights();
  void eval_chunk(const int32_t* tokens, int n);
  uint64_t layout_hash() const;
  Status failed_state() const;

  const Model& model_;
  ContextParams params_;
  MemoryPlan plan_;
  std::unique_ptr<Backend> backend_;
  std::shared_ptr<WeightMapping> weights_;
  uint32_t n_past_ = 0;
  bool failed_ = false;  // a backend op failed: memory undefined until reset()

  // The model's tensors as the backend reads them (translated through weights_).
  std::vector<Model::Layer> layers_;
  WeightView token_embd_, output_;
  const float* output_norm_ = nullptr;
  const float* inv_freq_ = nullptr;

  // One allocation per memory space holds everything below (kPlanAlign-aligned buffers, in plan order).
  void* arena_[kMemorySpaces] = {nullptr, nullptr, nullptr};
  uint64_t arena_bytes_ = 0;
  std::vector<LayerMem> mem_;
  float* x_ = nullptr;        // [n_batch, d_model] residual stream
  float* xn_ = nullptr;       // [n_batch, d_model] normalised
  float* q_ = nullptr;        // [n_batch, n_heads * head_dim]
  float* att_ = nullptr;      // [n_batch, n_heads * head_dim]
  float* tmp_ = nullptr;      // [n_batch, d_model]
  float* gate_ = nullptr;     // [n_batch, ffn_dim]
  float* up_ = nullptr;       // [n_batch, ffn_dim]
  float* logits_ = nullptr;   // [vocab_size] backend memory
  CompressObserver compress_observer_ = nullptr;
  void* compress_observer_user_ = nullptr;
  float* logits_host_ = nullptr;  // [vocab_size] host (== logits_ when the state is in host memory)
  int32_t* tokens_ = nullptr;       // [n_batch] backend memory
  int32_t* tokens_host_ = nullptr;  // [n_batch] host staging (== tokens_ on the CPU)
  ScoreResult* score_ = nullptr;
  ScoreResult* score_host_ = nullptr;
  std::vector<uint8_t*> slots_;        // [snapshot_slots] saved states
  std::vector<int64_t> slot_n_past_;   // -1: never saved
  float* k_chunk_ = nullptr;  // [n_batch, kvd] K/V rows of the chunk (windowed layers)
  float* v_chunk_ = nullptr;
  float* k_raw_ = nullptr;    // [n_batch, kvd] un-rotated keys (rotate-entry compressors)
  float* gate_buf_[2] = {nullptr, nullptr};     // [n_batch, gate cols] compressor gate logits
  float* payload_buf_[2] = {nullptr, nullptr};  // [n_batch, payload cols] compressor payloads
};

}  // namespace phasekv
