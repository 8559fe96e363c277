#include "memory_plan.h"

#include <algorithm>

namespace phasekv {

Status plan_memory(const ModelSpec& spec, uint64_t weights_bytes, uint32_t n_ctx, MemoryPlan* out) {
  const ModelConfig& c = spec.config;
  if (n_ctx == 0) return make_error(StatusCode::kInvalidArgument, "n_ctx = 0 (must be >= 1)");
  if (n_ctx > c.max_positions)
    return make_error(StatusCode::kInvalidArgument, "n_ctx = %u exceeds the model's max_positions = %u", n_ctx,
                      c.max_positions);
  MemoryPlan p;
  p.n_ctx = n_ctx;
  p.weights_bytes = weights_bytes;
  // One K row and one V row per entry: n_kv_heads x head_dim each.
  const uint64_t row = uint64_t(c.n_kv_heads) * c.head_dim * p.kv_elem_bytes * 2;
  for (const AttentionMemory& m : spec.layers) {
    LayerMemoryPlan l;
    l.kind = m.kind;
    switch (m.kind) {
      case MemoryKind::Full:
        l.exact_entries = n_ctx;
        break;
      case MemoryKind::Sliding:
        l.exact_entries = std::min<uint64_t>(n_ctx, m.local);
        break;
      case MemoryKind::Compressed: {
        l.exact_entries = std::min<uint64_t>(n_ctx, m.local);
        l.compressed_entries = n_ctx / m.stride;
        // Per branch and KV head, one online-softmax accumulator per open window
        // (ceil(W/S) windows overlap a token): running max and denominator (d_g each) and a
        // weighted sum (head_dim), all f32.
        const uint64_t d_g = m.gate == GateKind::Vector ? c.head_dim : 1;
        const uint64_t open_windows = (m.window + m.stride - 1) / m.stride;
        const uint64_t branches = m.kv_tied ? 1 : 2;
        l.accumulator_bytes = branches * c.n_kv_heads * open_windows * (2 * d_g + c.head_dim) * 4;
        break;
      }
    }
    // A tied K/V compressor stores one pooled row per entry instead of two.
    const uint64_t entry_row = m.kind == MemoryKind::Compressed && m.kv_tied ? row / 2 : row;
    l.kv_bytes = l.exact_entries * row + l.compressed_entries * entry_row + l.accumulator_bytes;
    p.kv_bytes_total += l.kv_bytes;
    p.layers.push_back(l);
  }
  *out = std::move(p);
  return Status::Ok();
}

}  // namespace phasekv
