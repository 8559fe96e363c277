// The memory plan of a context (DESIGN.md section 5): the exact bytes of every buffer a context
// owns — each layer's attention memory for n_ctx tokens, the activation scratch of the
// largest prefill chunk and the backend's workspace — plus the mapped weights, computed before
// anything is allocated. Each buffer names its memory space (the backend says where its state
// lives: host for the CPU, device for CUDA, with small pinned host staging buffers for token
// ids, logits and scores); the context takes exactly these buffers, in this order, from one
// arena per space; `phasekv inspect --ctx N [--backend B]` prints the same plan.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend.h"
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
    // Activations of one chunk of B tokens:
    kX, kXn, kTmp,                  // [B, d_model] residual stream, normalised, block output
    kQ, kAtt,                       // [B, n_heads * head_dim]
    kGate, kUp,                     // [B, ffn_dim]
    kLogits,                        // [vocab] (the last token's)
    kChunkK, kChunkV,               // [B, kvd] the chunk's K/V rows (windowed layers)
    kChunkKRaw,                     // [B, kvd] un-rotated keys (rotate-entry compressors)
    kGateLogitsK, kGateLogitsV,     // [B, gate cols] compressor gate logits
    kPayloadK, kPayloadV,           // [B, payload cols] compressor payloads
    kTokens,                        // [B] int32 token ids the embed op reads
    kScore,                         // [1] ScoreResult of the gold-score op
    kTokensHost, kLogitsHost, kScoreHost,  // pinned host staging of the three above (GPU backends)
    kSnapshotSlot,                  // [snapshot_slot_bytes] one saved state in backend memory
    kWorkspace,                     // the backend's scratch
  };
  std::string name;
  Role role = kX;
  MemorySpace space = MemorySpace::Host;
  int32_t layer = -1;
  uint64_t bytes = 0;
};

struct PlanParams {
  uint32_t n_ctx = 2048;
  uint32_t n_batch = 256;  // capped at n_ctx
  int n_threads = 1;
  bool beyond_trained = false;  // allow n_ctx above the model's max_positions (up to 2^24)
  uint32_t snapshot_slots = 0;  // saved states kept in backend memory (the self-test's shared prefixes)
  // The backend the context will run on: where its state lives and how big its workspace is.
  // nullptr: the CPU backend with n_threads workers.
  const Backend* backend = nullptr;
};

struct MemoryPlan {
  uint32_t n_ctx = 0;
  uint32_t n_batch = 0;
  int n_threads = 1;
  uint32_t kv_elem_bytes = 4;       // bytes per cached K/V element (f32 on the CPU reference)
  uint64_t weights_bytes = 0;       // tensor blob (mapped from the file, shared, not in the arena)
  MemorySpace weights_space = MemorySpace::Host;  // host: read in place; device / pinned host: one copy per model
  MemorySpace state_space = MemorySpace::Host;    // where KV, scratch and workspace live
  const char* backend = "cpu";
  uint64_t space_bytes[kMemorySpaces] = {0, 0, 0};  // arena bytes per MemorySpace (aligned sums)
  uint32_t snapshot_slots = 0;
  uint64_t snapshot_slot_bytes = 0; // one saved state: every layer's memory at n_ctx + the logits
  uint64_t kv_bytes_total = 0;      // sum of layers[i].kv_bytes
  uint64_t scratch_bytes = 0;       // activations for one chunk of n_batch tokens
  uint64_t workspace_bytes = 0;     // backend scratch
  uint64_t arena_bytes = 0;         // everything the context allocates, all spaces (aligned sum of buffers)
  uint64_t max_keys = 0;            // most keys one query sees (sizes the score scratch)
  std::vector<LayerMemoryPlan> layers;
  std::vector<PlanBuffer> buffers;  // arena layout, in order

  // A human-readable table: per-kind KV totals, scratch items, workspace, per-space totals.
  std::string itemised() const;
};

constexpr uint64_t kPlanAlign = 64;

// Fails (InvalidArgument) for n_ctx 0 or above config.max_positions, n_batch 0, n_threads < 1.
Status plan_memory(const ModelSpec& spec, uint64_t weights_bytes, const PlanParams& params, MemoryPlan* out);
// The plan with n_batch = min(256, n_ctx) and one thread.
Status plan_memory(const ModelSpec& spec, uint64_t weights_bytes, uint32_t n_ctx, MemoryPlan* out);

}  // namespace phasekv
