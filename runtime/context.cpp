#include "context.h"

#include <mimalloc.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <thread>

#include "cpu_backend.h"

namespace phasekv {

ContextParams default_context_params() {
  ContextParams p;
  const unsigned hw = std::thread::hardware_concurrency();
  p.n_threads = hw == 0 ? 1 : int(std::min(hw, 64u));
  return p;
}

Context::Context(const Model& m, const ContextParams& p) : model_(m), params_(p) {}

Context::~Context() {
  backend_.reset();
  if (arena_) mi_free(arena_);
}

const char* Context::kernels_name() const { return backend_->isa(); }

Status Context::create(const Model& model, const ContextParams& params, std::unique_ptr<Context>* out) {
  const ModelConfig& c = model.config();
  if (params.n_ctx == 0) return make_error(StatusCode::kInvalidArgument, "n_ctx = 0 (must be >= 1)");
  if (params.n_ctx > c.max_positions && !params.beyond_trained)
    return make_error(StatusCode::kInvalidArgument, "n_ctx = %u exceeds the model's max_positions = %u",
                      params.n_ctx, c.max_positions);
  if (params.n_batch == 0) return make_error(StatusCode::kInvalidArgument, "n_batch = 0 (must be >= 1)");
  if (params.n_threads < 1 || params.n_threads > 256)
    return make_error(StatusCode::kInvalidArgument, "n_threads = %d must be in [1, 256]", params.n_threads);
  const cpu::KernelTable* table = nullptr;
  if (params.kernels) {
    table = cpu::kernels_by_name(params.kernels);
    if (!table)
      return make_error(StatusCode::kInvalidArgument, "kernels = '%s' is not available on this CPU/build",
                        params.kernels);
  }
  std::unique_ptr<Context> ctx(new Context(model, params));
  ctx->params_.n_batch = std::min(params.n_batch, params.n_ctx);  // a chunk never exceeds the context
  PlanParams pp;
  pp.n_ctx = params.n_ctx;
  pp.n_batch = ctx->params_.n_batch;
  pp.n_threads = params.n_threads;
  pp.beyond_trained = params.beyond_trained;
  PKV_RETURN_IF_ERROR(plan_memory(model.spec(), model.weight_bytes(), pp, &ctx->plan_));
  if (params.memory_budget && ctx->plan_.arena_bytes > params.memory_budget)
    return make_error(StatusCode::kBudgetExceeded, "the context needs %llu bytes, over its memory budget of %llu\n%s",
                      (unsigned long long)ctx->plan_.arena_bytes, (unsigned long long)params.memory_budget,
                      ctx->plan_.itemised().c_str());
  ctx->backend_.reset(new CpuBackend(params.n_threads, table));
  PKV_RETURN_IF_ERROR(ctx->plan_and_allocate());
  *out = std::move(ctx);
  return Status::Ok();
}

Status Context::plan_and_allocate() {
  const ModelConfig& c = model_.config();
  const MemoryPlan& p = plan_;
  arena_ = mi_malloc_aligned(size_t(p.arena_bytes), size_t(kPlanAlign));
  if (!arena_)
    return make_error(StatusCode::kOutOfMemory, "cannot allocate the context's %llu bytes\n%s",
                      (unsigned long long)p.arena_bytes, p.itemised().c_str());
  arena_bytes_ = p.arena_bytes;
  // Zero every page now: the first decode must not page-fault its way through the KV memory.
  if (params_.prefault) std::memset(arena_, 0, size_t(arena_bytes_));

  mem_.assign(c.n_layers, LayerMem());
  for (uint32_t l = 0; l < c.n_layers; ++l) {
    const AttentionMemory& m = model_.spec().layers[l];
    LayerMem& M = mem_[l];
    if (m.kind != MemoryKind::Full) M.ring_rows = std::min<uint32_t>(params_.n_ctx, m.local);
    if (m.kind == MemoryKind::Compressed) {
      M.n_acc = (m.window + m.stride - 1) / m.stride;
      M.d_g = m.gate == GateKind::Vector ? c.head_dim : 1;
    }
  }
  uint8_t* at = static_cast<uint8_t*>(arena_);
  uint8_t* workspace = nullptr;
  for (const PlanBuffer& b : p.buffers) {
    float* f = reinterpret_cast<float*>(at);
    switch (b.role) {
      case PlanBuffer::kKeys: mem_[size_t(b.layer)].k = f; break;
      case PlanBuffer::kValues: mem_[size_t(b.layer)].v = f; break;
      case PlanBuffer::kKeyEntries: mem_[size_t(b.layer)].k_ent = f; break;
      case PlanBuffer::kValueEntries: mem_[size_t(b.layer)].v_ent = f; break;
      case PlanBuffer::kAccumulators: mem_[size_t(b.layer)].acc = f; break;
      case PlanBuffer::kWorkspace: workspace = at; break;
      case PlanBuffer::kScratch: {
        struct {
          const char* name;
          float** ptr;
        } const named[] = {
            {"x", &x_}, {"xn", &xn_}, {"q", &q_}, {"att", &att_}, {"tmp", &tmp_}, {"gate", &gate_}, {"up", &up_},
            {"logits", &logits_}, {"chunk K", &k_chunk_}, {"chunk V", &v_chunk_}, {"chunk K un-rotated", &k_raw_},
            {"gate logits K", &gate_buf_[0]}, {"gate logits V", &gate_buf_[1]}, {"payload K", &payload_buf_[0]},
            {"payload V", &payload_buf_[1]},
        };
        bool found = false;
        for (const auto& n : named)
          if (b.name == n.name) {
            *n.ptr = f;
            found = true;
          }
        if (!found) return make_error(StatusCode::kInternal, "memory plan: unknown scratch buffer '%s'", b.name.c_str());
        break;
      }
    }
    at += (b.bytes + kPlanAlign - 1) & ~(kPlanAlign - 1);
  }
  if (uint64_t(at - static_cast<uint8_t*>(arena_)) != arena_bytes_)
    return make_error(StatusCode::kInternal, "memory plan: layout covers %llu of %llu bytes",
                      (unsigned long long)(at - static_cast<uint8_t*>(arena_)), (unsigned long long)arena_bytes_);
  reset();
  WorkspaceQuery wq;
  wq.max_tokens = int(p.n_batch);
  wq.max_k = int(std::max<uint64_t>({c.d_model, uint64_t(c.n_heads) * c.head_dim, uint64_t(c.ffn_dim)}));
  wq.n_ctx = int(std::max<uint64_t>(p.max_keys, 1));
  wq.attention_group = int(c.n_heads / c.n_kv_heads);
  wq.n_threads = params_.n_threads;
  return backend_->bind_workspace(workspace, size_t(p.workspace_bytes), wq);
}

void Context::reset() {
  n_past_ = 0;
  const ModelConfig& c = model_.config();
  for (const LayerMem& M : mem_)
    if (M.acc) backend_->compress_reset(M.acc, int(2 * M.n_acc), int(c.n_kv_heads), int(M.d_g), int(c.head_dim));
}

Status Context::prefill(const int32_t* tokens, size_t n) {
  if (n == 0) return make_error(StatusCode::kInvalidArgument, "empty input: no tokens to evaluate");
  if (!tokens) return make_error(StatusCode::kInvalidArgument, "tokens is null");
  if (n > params_.n_ctx - n_past_)
    return make_error(StatusCode::kInvalidArgument,
                      "%zu tokens do not fit: the context holds %u tokens and %u are used (%u free)", n,
                      params_.n_ctx, n_past_, params_.n_ctx - n_past_);
  const int32_t vocab = int32_t(model_.config().vocab_size);
  for (size_t i = 0; i < n; ++i)
    if (tokens[i] < 0 || tokens[i] >= vocab)
      return make_error(StatusCode::kInvalidArgument, "tokens[%zu] = %d is outside the vocabulary [0, %d)", i,
                        tokens[i], vocab);
  for (size_t done = 0; done < n;) {
    const int chunk = int(std::min<size_t>(params_.n_batch, n - done));
    eval_chunk(tokens + done, chunk);
    done += size_t(chunk);
  }
  return Status::Ok();
}

void Context::eval_chunk(const int32_t* tokens, int n) {
  const ModelConfig& c = model_.config();
  const int d = int(c.d_model), hd = int(c.head_dim), nh = int(c.n_heads), nkv = int(c.n_kv_heads);
  const size_t kvd = size_t(nkv) * hd, ffn = c.ffn_dim;
  const int pos0 = int(n_past_);
  const bool interleaved = c.rope.style == RopeStyle::Interleaved;
  const float* inv_freq = model_.rope_inv_freq();
  const int rope_dim = int(c.rope.dim);
  const float pos_scale = model_.rope_pos_scale();
  Backend& be = *backend_;

  be.embed(model_.token_embd(), tokens, n, x_);
  for (uint32_t l = 0; l < c.n_layers; ++l) {
    const Model::Layer& L = model_.layer(int(l));
    const AttentionMemory& m = model_.spec().layers[l];
    LayerMem& M = mem_[l];
    const bool full = m.kind == MemoryKind::Full;
    // Full memories take the chunk's K/V rows in place; windowed ones stage them.
    float* k_rows = full ? M.k + size_t(pos0) * kvd : k_chunk_;  // [n, kvd]
    float* v_rows = full ? M.v + size_t(pos0) * kvd : v_chunk_;

    be.rmsnorm(x_, L.attn_norm, c.norm_eps, n, d, xn_);
    const WeightView qkv[3] = {L.wq, L.wk, L.wv};
    float* const qkv_out[3] = {q_, k_rows, v_rows};
    be.matmul(qkv, qkv_out, 3, xn_, n);
    const bool compressed = m.kind == MemoryKind::Compressed;
    const bool rotate_entry = compressed && m.entry_rope == EntryRope::RotateEntry;
    const bool layer_payload = m.payload == PayloadSource::LayerProjection;
    if (rotate_entry && layer_payload) std::memcpy(k_raw_, k_rows, size_t(n) * kvd * sizeof(float));
    be.rope(q_, n, nh, hd, pos0, inv_freq, rope_dim, interleaved, pos_scale);
    be.rope(k_rows, n, nkv, hd, pos0, inv_freq, rope_dim, interleaved, pos_scale);

    if (compressed) {
      CompressArgs ca;
      ca.n_tokens = n;
      ca.first_pos = pos0;
      ca.window = int(m.window);
      ca.stride = int(m.stride);
      ca.n_kv_heads = nkv;
      ca.head_dim = hd;
      ca.d_g = int(M.d_g);
      // Gate maps and payload maps of both branches in one matmul pass.
      WeightView mats[4];
      float* outs[4];
      int n_mats = 0;
      for (int b = 0; b < 2; ++b) {
        CompressArgs::Branch& cb = ca.b[b];
        const Model::Layer::Branch& lb = L.cmp[b];
        cb.bias = lb.gate_bias;
        if (lb.gate_map.data) {
          mats[n_mats] = lb.gate_map;
          outs[n_mats++] = gate_buf_[b];
          cb.gate = gate_buf_[b];
          cb.gate_stride = lb.gate_map.rows;
          cb.gate_per_offset = m.gate_maps == MapSharing::PerOffset;
        }
        if (!layer_payload) {
          mats[n_mats] = lb.payload_map;
          outs[n_mats++] = payload_buf_[b];
          cb.payload = payload_buf_[b];
          cb.payload_stride = lb.payload_map.rows;
          cb.payload_per_offset = m.payload_maps == MapSharing::PerOffset;
        } else {
          cb.payload = b == 0 ? (rotate_entry ? k_raw_ : k_rows) : v_rows;
          cb.payload_stride = int(kvd);
        }
        cb.acc = M.acc + size_t(b) * M.n_acc * size_t(nkv) * (2 * M.d_g + size_t(hd));
        cb.entries = b == 0 ? M.k_ent : M.v_ent;
      }
      for (int i = 0; i < n_mats; i += 3) be.matmul(mats + i, outs + i, std::min(3, n_mats - i), xn_, n);
      // Mapped keys of the rotate-tokens convention rotate at their token's position (every
      // offset's projection: W * n_kv heads per row when per-offset).
      if (!layer_payload && !rotate_entry)
        be.rope(payload_buf_[0], n, L.cmp[0].payload_map.rows / hd, hd, pos0, inv_freq, rope_dim, interleaved,
                pos_scale);
      ca.rotate_entry = rotate_entry;
      ca.entry_norm = L.k_norm;
      ca.norm_eps = c.norm_eps;
      ca.inv_freq = inv_freq;
      ca.rope_dim = rope_dim;
      ca.interleaved = interleaved;
      ca.pos_scale = pos_scale;
      be.compress(ca);  // entries first: a query sees those its own chunk completed
    }

    AttentionArgs a;
    a.q = q_;
    a.k_cache = M.k;
    a.v_cache = M.v;
    a.out = att_;
    a.n_tokens = n;
    a.first_pos = pos0;
    a.n_heads = nh;
    a.n_kv_heads = nkv;
    a.head_dim = hd;
    a.scale = 1.0f / std::sqrt(float(hd));
    a.sink = L.sink;
    if (!full) {
      a.local = int(m.local);
      a.ring_rows = int(M.ring_rows);
      a.k_chunk = k_rows;
      a.v_chunk = v_rows;
    }
    if (compressed) {
      a.stride = int(m.stride);
      a.k_entries = M.k_ent;
      a.v_entries = M.v_ent;
    }
    be.attention(a);
    // Windowed memories keep the chunk's last tokens in their ring.
    if (!full && M.ring_rows > 0) {
      const int keep = std::min(n, int(M.ring_rows));
      for (int t = n - keep; t < n; ++t) {
        const size_t row = size_t(pos0 + t) % M.ring_rows;
        std::memcpy(M.k + row * kvd, k_rows + size_t(t) * kvd, kvd * sizeof(float));
        std::memcpy(M.v + row * kvd, v_rows + size_t(t) * kvd, kvd * sizeof(float));
      }
    }
    float* const o_out[1] = {tmp_};
    be.matmul(&L.wo, o_out, 1, att_, n);
    be.add(x_, tmp_, size_t(n) * d);

    be.rmsnorm(x_, L.ffn_norm, c.norm_eps, n, d, xn_);
    const WeightView gu[2] = {L.w_gate, L.w_up};
    float* const gu_out[2] = {gate_, up_};
    be.matmul(gu, gu_out, 2, xn_, n);
    be.silu_mul(gate_, up_, gate_, size_t(n) * ffn);
    float* const down_out[1] = {tmp_};
    be.matmul(&L.w_down, down_out, 1, gate_, n);
    be.add(x_, tmp_, size_t(n) * d);
  }
  // Logits of the last token only.
  be.rmsnorm(x_ + size_t(n - 1) * d, model_.output_norm(), c.norm_eps, 1, d, xn_);
  float* const lo[1] = {logits_};
  be.matmul(&model_.output(), lo, 1, xn_, 1);
  n_past_ += uint32_t(n);
}

// ---- snapshots ----------------------------------------------------------------------------

namespace {

constexpr char kSnapMagic[8] = {'P', 'K', 'V', 'S', 'N', 'A', 'P', '1'};

struct SnapHeader {
  char magic[8];
  uint64_t layout;   // hash of the model config and layer memories
  uint32_t n_past;
  uint32_t vocab;
  uint64_t bytes;    // whole snapshot, header included
};

uint64_t fnv(uint64_t h, const void* p, size_t n) {
  const uint8_t* b = static_cast<const uint8_t*>(p);
  for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

}  // namespace

uint64_t Context::layout_hash() const {
  const ModelConfig& c = model_.config();
  uint64_t h = 1469598103934665603ull;
  const uint32_t dims[] = {c.vocab_size, c.d_model, c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim, c.ffn_dim};
  h = fnv(h, dims, sizeof dims);
  for (const AttentionMemory& m : model_.spec().layers) {
    const uint32_t f[] = {uint32_t(m.kind), m.window, m.stride, m.local, uint32_t(m.gate)};
    h = fnv(h, f, sizeof f);
  }
  h = fnv(h, &model_.file().header().blob_size, sizeof(uint64_t));
  return h;
}

// The snapshot walks the same pieces in the same order for size, save and load.
#define PKV_SNAPSHOT_PIECES(VISIT)                                                                   \
  do {                                                                                               \
    const ModelConfig& c_ = model_.config();                                                         \
    const size_t kvd_ = size_t(c_.n_kv_heads) * c_.head_dim;                                         \
    for (size_t l_ = 0; l_ < mem_.size(); ++l_) {                                                    \
      const AttentionMemory& m_ = model_.spec().layers[l_];                                          \
      const LayerMem& M_ = mem_[l_];                                                                 \
      const size_t rows_ = m_.kind == MemoryKind::Full ? n_past : std::min<size_t>(n_past, M_.ring_rows); \
      VISIT(M_.k, rows_ * kvd_);                                                                     \
      VISIT(M_.v, rows_ * kvd_);                                                                     \
      if (m_.kind == MemoryKind::Compressed) {                                                       \
        const size_t ents_ = n_past / m_.stride;                                                     \
        VISIT(M_.k_ent, ents_ * kvd_);                                                               \
        VISIT(M_.v_ent, ents_ * kvd_);                                                               \
        VISIT(M_.acc, size_t(2) * M_.n_acc * c_.n_kv_heads * (2 * M_.d_g + c_.head_dim));            \
      }                                                                                              \
    }                                                                                                \
    VISIT(logits_, size_t(c_.vocab_size));                                                           \
  } while (0)

size_t Context::snapshot_bytes() const {
  size_t total = sizeof(SnapHeader);
  const uint32_t n_past = n_past_;
#define PKV_COUNT(ptr, floats) total += (floats) * sizeof(float)
  PKV_SNAPSHOT_PIECES(PKV_COUNT);
#undef PKV_COUNT
  return total;
}

Status Context::snapshot(void* buffer, size_t capacity, size_t* written) const {
  const size_t need = snapshot_bytes();
  if (!buffer) return make_error(StatusCode::kInvalidArgument, "snapshot: buffer is null");
  if (capacity < need)
    return make_error(StatusCode::kInvalidArgument, "snapshot: the buffer holds %zu bytes, %zu needed", capacity,
                      need);
  SnapHeader h;
  std::memcpy(h.magic, kSnapMagic, 8);
  h.layout = layout_hash();
  h.n_past = n_past_;
  h.vocab = model_.config().vocab_size;
  h.bytes = need;
  uint8_t* out = static_cast<uint8_t*>(buffer);
  std::memcpy(out, &h, sizeof h);
  out += sizeof h;
  const uint32_t n_past = n_past_;
#define PKV_SAVE(ptr, floats)                                     \
  do {                                                            \
    if ((floats) > 0) std::memcpy(out, ptr, (floats) * sizeof(float)); \
    out += (floats) * sizeof(float);                              \
  } while (0)
  PKV_SNAPSHOT_PIECES(PKV_SAVE);
#undef PKV_SAVE
  if (written) *written = need;
  return Status::Ok();
}

Status Context::restore(const void* buffer, size_t size) {
  if (!buffer) return make_error(StatusCode::kInvalidArgument, "restore: buffer is null");
  SnapHeader h;
  if (size < sizeof h) return make_error(StatusCode::kInvalidArgument, "restore: %zu bytes is not a snapshot", size);
  std::memcpy(&h, buffer, sizeof h);
  if (std::memcmp(h.magic, kSnapMagic, 8) != 0)
    return make_error(StatusCode::kInvalidArgument, "restore: not a PhaseKV context snapshot (bad magic)");
  if (h.layout != layout_hash())
    return make_error(StatusCode::kInvalidArgument,
                      "restore: the snapshot was taken with another model or memory layout");
  if (h.n_past > params_.n_ctx)
    return make_error(StatusCode::kInvalidArgument, "restore: the snapshot holds %u tokens; this context holds %u",
                      h.n_past, params_.n_ctx);
  if (h.bytes != size)
    return make_error(StatusCode::kInvalidArgument, "restore: %zu bytes given, the snapshot says %llu", size,
                      (unsigned long long)h.bytes);
  // The size check against this context's own layout, before anything changes.
  {
    size_t total = sizeof(SnapHeader);
    const uint32_t n_past = h.n_past;
#define PKV_COUNT(ptr, floats) total += (floats) * sizeof(float)
    PKV_SNAPSHOT_PIECES(PKV_COUNT);
#undef PKV_COUNT
    if (total != size)
      return make_error(StatusCode::kInvalidArgument, "restore: %zu bytes given, %zu expected for %u tokens", size,
                        total, h.n_past);
  }
  const uint8_t* in = static_cast<const uint8_t*>(buffer) + sizeof h;
  const uint32_t n_past = h.n_past;
#define PKV_LOAD(ptr, floats)                                                  \
  do {                                                                         \
    if ((floats) > 0) std::memcpy(const_cast<float*>(ptr), in, (floats) * sizeof(float)); \
    in += (floats) * sizeof(float);                                            \
  } while (0)
  PKV_SNAPSHOT_PIECES(PKV_LOAD);
#undef PKV_LOAD
  n_past_ = h.n_past;
  return Status::Ok();
}

}  // namespace phasekv
