#include "memory_plan.h"

#include <algorithm>
#include <cstdio>

#include "backends.h"

namespace phasekv {

namespace {

uint64_t align_up(uint64_t b) { return (b + kPlanAlign - 1) & ~(kPlanAlign - 1); }

std::string mib(uint64_t b) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%14llu B  %10.2f MiB", (unsigned long long)b, double(b) / (1 << 20));
  return buf;
}

}  // namespace

Status plan_memory(const ModelSpec& spec, uint64_t weights_bytes, const PlanParams& pp, MemoryPlan* out) {
  const ModelConfig& c = spec.config;
  if (pp.n_ctx == 0) return make_error(StatusCode::kInvalidArgument, "n_ctx = 0 (must be >= 1)");
  if (pp.n_ctx > c.max_positions && !pp.beyond_trained)
    return make_error(StatusCode::kInvalidArgument,
                      "n_ctx = %u exceeds the model's max_positions = %u (allow it explicitly to go beyond the "
                      "trained length)",
                      pp.n_ctx, c.max_positions);
  if (pp.n_ctx > (1u << 24))
    return make_error(StatusCode::kInvalidArgument, "n_ctx = %u exceeds 2^24", pp.n_ctx);
  if (pp.n_batch == 0) return make_error(StatusCode::kInvalidArgument, "n_batch = 0 (must be >= 1)");
  if (pp.n_threads < 1) return make_error(StatusCode::kInvalidArgument, "n_threads = %d (must be >= 1)", pp.n_threads);
  MemoryPlan p;
  p.n_ctx = pp.n_ctx;
  p.n_batch = std::min(pp.n_batch, pp.n_ctx);
  p.n_threads = pp.n_threads;
  p.weights_bytes = weights_bytes;
  const MemorySpace S = pp.backend ? pp.backend->state_space() : MemorySpace::Host;
  p.state_space = S;
  p.weights_space = pp.backend ? pp.backend->weights_space() : MemorySpace::Host;
  p.backend = pp.backend ? pp.backend->name() : "cpu";
  const uint64_t T = p.n_ctx, B = p.n_batch, E = p.kv_elem_bytes;
  const uint64_t hd = c.head_dim, kvd = uint64_t(c.n_kv_heads) * hd, d = c.d_model;
  const uint64_t qd = uint64_t(c.n_heads) * hd, ffn = c.ffn_dim;
  auto add_in = [&](MemorySpace space, const std::string& name, PlanBuffer::Role role, int32_t layer,
                    uint64_t bytes) {
    if (bytes == 0) return;
    PlanBuffer b;
    b.name = name;
    b.role = role;
    b.layer = layer;
    b.bytes = bytes;
    b.space = space;
    p.buffers.push_back(b);
  };
  auto add = [&](const std::string& name, PlanBuffer::Role role, int32_t layer, uint64_t bytes) {
    add_in(S, name, role, layer, bytes);
  };

  // Layer memories.
  bool any_windowed = false, any_raw_keys = false;
  uint64_t gate_cols = 0, payload_cols = 0;
  for (uint32_t l = 0; l < spec.layers.size(); ++l) {
    const AttentionMemory& m = spec.layers[l];
    const std::string ln = "layer " + std::to_string(l) + " ";
    LayerMemoryPlan lp;
    lp.kind = m.kind;
    uint64_t keys = 0;
    switch (m.kind) {
      case MemoryKind::Full:
        lp.exact_entries = T;
        keys = T;
        break;
      case MemoryKind::Sliding:
        lp.exact_entries = std::min<uint64_t>(T, m.local);
        keys = std::min<uint64_t>(T, m.local);
        any_windowed = true;
        break;
      case MemoryKind::Compressed: {
        lp.exact_entries = std::min<uint64_t>(T, m.local);
        lp.compressed_entries = T / m.stride;
        keys = lp.exact_entries + lp.compressed_entries;
        any_windowed = true;
        // Per branch and KV head, one online-softmax accumulator per open window (ceil(W/S)
        // windows overlap a token): running max and denominator (d_g each) and a weighted sum
        // (head_dim), all f32.
        const uint64_t d_g = m.gate == GateKind::Vector ? hd : 1;
        const uint64_t open_windows = (m.window + m.stride - 1) / m.stride;
        lp.accumulator_bytes = 2 * c.n_kv_heads * open_windows * (2 * d_g + hd) * 4;
        if (m.entry_rope == EntryRope::RotateEntry && m.payload == PayloadSource::LayerProjection)
          any_raw_keys = true;
        const uint64_t g = uint64_t(c.n_kv_heads) * d_g;
        if (m.gate != GateKind::Uniform)
          gate_cols = std::max(gate_cols, m.gate_maps == MapSharing::PerOffset ? m.window * g : g);
        if (m.payload == PayloadSource::CompressorMap)
          payload_cols = std::max(payload_cols, m.payload_maps == MapSharing::PerOffset ? m.window * kvd : kvd);
        break;
      }
    }
    p.max_keys = std::max(p.max_keys, keys);
    lp.kv_bytes = (lp.exact_entries + lp.compressed_entries) * kvd * E * 2 + lp.accumulator_bytes;
    add(ln + "K", PlanBuffer::kKeys, int32_t(l), lp.exact_entries * kvd * E);
    add(ln + "V", PlanBuffer::kValues, int32_t(l), lp.exact_entries * kvd * E);
    add(ln + "K entries", PlanBuffer::kKeyEntries, int32_t(l), lp.compressed_entries * kvd * E);
    add(ln + "V entries", PlanBuffer::kValueEntries, int32_t(l), lp.compressed_entries * kvd * E);
    add(ln + "accumulators", PlanBuffer::kAccumulators, int32_t(l), lp.accumulator_bytes);
    p.kv_bytes_total += lp.kv_bytes;
    p.layers.push_back(lp);
  }

  // Activation scratch for one chunk of B tokens (names are what the context binds).
  const size_t first_scratch = p.buffers.size();
  add("x", PlanBuffer::kX, -1, B * d * 4);
  add("xn", PlanBuffer::kXn, -1, B * d * 4);
  add("q", PlanBuffer::kQ, -1, B * qd * 4);
  add("att", PlanBuffer::kAtt, -1, B * qd * 4);
  add("tmp", PlanBuffer::kTmp, -1, B * d * 4);
  add("gate", PlanBuffer::kGate, -1, B * ffn * 4);
  add("up", PlanBuffer::kUp, -1, B * ffn * 4);
  add("logits", PlanBuffer::kLogits, -1, uint64_t(c.vocab_size) * 4);
  if (any_windowed) {
    add("chunk K", PlanBuffer::kChunkK, -1, B * kvd * 4);
    add("chunk V", PlanBuffer::kChunkV, -1, B * kvd * 4);
  }
  if (any_raw_keys) add("chunk K un-rotated", PlanBuffer::kChunkKRaw, -1, B * kvd * 4);
  if (gate_cols) {
    add("gate logits K", PlanBuffer::kGateLogitsK, -1, B * gate_cols * 4);
    add("gate logits V", PlanBuffer::kGateLogitsV, -1, B * gate_cols * 4);
  }
  if (payload_cols) {
    add("payload K", PlanBuffer::kPayloadK, -1, B * payload_cols * 4);
    add("payload V", PlanBuffer::kPayloadV, -1, B * payload_cols * 4);
  }
  add("token ids", PlanBuffer::kTokens, -1, B * 4);
  add("score", PlanBuffer::kScore, -1, sizeof(ScoreResult));
  // A backend whose state is not in host memory stages what crosses the bus in pinned memory.
  if (S != MemorySpace::Host) {
    add_in(MemorySpace::PinnedHost, "token ids (host)", PlanBuffer::kTokensHost, -1, B * 4);
    add_in(MemorySpace::PinnedHost, "logits (host)", PlanBuffer::kLogitsHost, -1, uint64_t(c.vocab_size) * 4);
    add_in(MemorySpace::PinnedHost, "score (host)", PlanBuffer::kScoreHost, -1, sizeof(ScoreResult));
  }
  for (size_t i = first_scratch; i < p.buffers.size(); ++i) p.scratch_bytes += p.buffers[i].bytes;

  // Saved states in backend memory: every layer's memory at n_ctx (its largest) and the logits.
  p.snapshot_slots = pp.snapshot_slots;
  p.snapshot_slot_bytes = p.kv_bytes_total + uint64_t(c.vocab_size) * 4;
  for (uint32_t i = 0; i < pp.snapshot_slots; ++i)
    add("snapshot slot " + std::to_string(i), PlanBuffer::kSnapshotSlot, int32_t(i), p.snapshot_slot_bytes);

  WorkspaceQuery wq;
  wq.max_tokens = int(B);
  wq.max_k = int(std::max<uint64_t>({d, qd, ffn}));
  wq.n_ctx = int(std::max<uint64_t>(p.max_keys, 1));
  wq.attention_group = int(c.n_heads / c.n_kv_heads);
  wq.head_dim = int(c.head_dim);
  wq.n_threads = p.n_threads;
  p.workspace_bytes = pp.backend ? pp.backend->workspace_bytes(wq) : cpu_workspace_bytes(wq, p.n_threads);
  add("backend workspace", PlanBuffer::kWorkspace, -1, p.workspace_bytes);

  for (const PlanBuffer& b : p.buffers) {
    p.arena_bytes += align_up(b.bytes);
    p.space_bytes[int(b.space)] += align_up(b.bytes);
  }
  *out = std::move(p);
  return Status::Ok();
}

Status plan_memory(const ModelSpec& spec, uint64_t weights_bytes, uint32_t n_ctx, MemoryPlan* out) {
  PlanParams pp;
  pp.n_ctx = n_ctx;
  pp.n_batch = std::min<uint32_t>(256, std::max<uint32_t>(n_ctx, 1));
  pp.n_threads = 1;
  return plan_memory(spec, weights_bytes, pp, out);
}

std::string MemoryPlan::itemised() const {
  std::string s;
  char line[160];
  std::snprintf(line, sizeof line, "memory plan (%s backend, n_ctx %u, n_batch %u, %d threads):\n", backend, n_ctx,
                n_batch, n_threads);
  s += line;
  const char* kinds[] = {"full", "sliding", "compressed"};
  for (int k = 0; k < 3; ++k) {
    uint64_t bytes = 0, count = 0;
    for (const LayerMemoryPlan& l : layers)
      if (int(l.kind) == k) {
        bytes += l.kv_bytes;
        ++count;
      }
    if (!count) continue;
    std::snprintf(line, sizeof line, "  KV, %3llu %-10s layers %s\n", (unsigned long long)count, kinds[k],
                  mib(bytes).c_str());
    s += line;
  }
  std::snprintf(line, sizeof line, "  activation scratch          %s\n", mib(scratch_bytes).c_str());
  s += line;
  std::snprintf(line, sizeof line, "  backend workspace           %s\n", mib(workspace_bytes).c_str());
  s += line;
  if (snapshot_slots) {
    std::snprintf(line, sizeof line, "  snapshot slots (%u)          %s\n", snapshot_slots,
                  mib(snapshot_slot_bytes * snapshot_slots).c_str());
    s += line;
  }
  for (int sp = 0; sp < kMemorySpaces; ++sp) {
    if (!space_bytes[sp] || space_bytes[sp] == arena_bytes) continue;
    std::snprintf(line, sizeof line, "    in %-11s memory       %s\n", memory_space_name(MemorySpace(sp)),
                  mib(space_bytes[sp]).c_str());
    s += line;
  }
  std::snprintf(line, sizeof line, "  context arena (total)       %s\n", mib(arena_bytes).c_str());
  s += line;
  const char* wl = weights_space == MemorySpace::Host         ? "  weights (mapped, shared)    %s\n"
                   : weights_space == MemorySpace::Device     ? "  weights on device (shared)  %s\n"
                                                              : "  weights, pinned host copy   %s\n";
  std::snprintf(line, sizeof line, wl, mib(weights_bytes).c_str());
  s += line;
  return s;
}

}  // namespace phasekv
