// The memory plan of a context (DESIGN.md section 5): the exact bytes of every buffer a context
// owns — each layer's attention memory for n_ctx tokens, the activation scratch of the
// largest prefill chunk and the backend's workspace — plus the mapped weights, computed before
// anything is allocated. The context takes exactly these buffers, in this order, from one
// arena; `phasekv inspect --ctx N` prints the same plan.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model_spec.h"

namespace phasekv {

struct LayerMemoryPlan {
  MemoryKind kind = MemoryKind::Full;
  uint64_t exact_entries = 0;       // exact K,V rows kept: full T, sliding/compressed min(T, L)
  uint64_t compressed_entries = 0;  // compressed entries: floor(T / S)
  uint64_t accumulator_bytes = 0;   // open-window online-softmax state (compressed)
  uint64_t kv_bytes = 0;            // everything above, in bytes
};

// One buffer of the context arena. Buffers start at multiples of kPlanAlign.
struct PlanBuffer {
  enum Role : uint8_t {
    kKeys, kValues,                 // layer: exact rows (full: [T, kvd]; windowed: ring [min(T,L), kvd])
    kKeyEntries, kValueEntries,     // layer: compressed entries [floor(T/S), kvd]
    kAccumulators,                  // layer: [2, ceil(W/S), n_kv, 2*d_g + head_dim]
    kScratch,                       // activations (name says which)
    kWorkspace,                     // the backend's scratch
  };
  std::string name;
  Role role = kScratch;
  int32_t layer = -1;
  uint64_t bytes = 0;
};

struct PlanParams {
  uint32_t n_ctx = 2048;
  uint32_t n_batch = 256;  // capped at n_ctx
  int n_threads = 1;
  bool beyond_trained = false;  // allow n_ctx above the model's max_positions (up to 2^24)
};

struct MemoryPlan {
  uint32_t n_ctx = 0;
  uint32_t n_batch = 0;
  int n_threads = 1;
  uint32_t kv_elem_bytes = 4;       // bytes per cached K/V element (f32 on the CPU reference)
  uint64_t weights_bytes = 0;       // tensor blob (mapped from the file, shared, not in the arena)
  uint64_t kv_bytes_total = 0;      // sum of layers[i].kv_bytes
  uint64_t scratch_bytes = 0;       // activations for one chunk of n_batch tokens
  uint64_t workspace_bytes = 0;     // backend scratch
  uint64_t arena_bytes = 0;         // everything the context allocates (aligned sum of buffers)
  uint64_t max_keys = 0;            // most keys one query sees (sizes the score scratch)
  std::vector<LayerMemoryPlan> layers;
  std::vector<PlanBuffer> buffers;  // arena layout, in order

  // A human-readable table: per-kind KV totals, scratch items, workspace, total.
  std::string itemised() const;
};

constexpr uint64_t kPlanAlign = 64;

// Fails (InvalidArgument) for n_ctx 0 or above config.max_positions, n_batch 0, n_threads < 1.
Status plan_memory(const ModelSpec& spec, uint64_t weights_bytes, const PlanParams& params, MemoryPlan* out);
// The plan with n_batch = min(256, n_ctx) and one thread.
Status plan_memory(const ModelSpec& spec, uint64_t weights_bytes, uint32_t n_ctx, MemoryPlan* out);

}  // namespace phasekv
