// The memory plan of a context: how many bytes the weights and each layer's attention memory
// take for a given context length. Computed before anything is allocated, printed by
// `phasekv inspect --ctx N`; the context arenas (a later issue) are sized from it.
#pragma once

#include <cstdint>
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

struct MemoryPlan {
  uint32_t n_ctx = 0;
  uint32_t kv_elem_bytes = 4;       // bytes per cached K/V element (f32 on the CPU reference)
  uint64_t weights_bytes = 0;       // tensor blob (mapped from the file, not copied)
  uint64_t kv_bytes_total = 0;      // sum of layers[i].kv_bytes
  std::vector<LayerMemoryPlan> layers;
};

// Fails (InvalidArgument) for n_ctx 0 or above config.max_positions.
Status plan_memory(const ModelSpec& spec, uint64_t weights_bytes, uint32_t n_ctx, MemoryPlan* out);

}  // namespace phasekv
