#include "context.h"

#include <mimalloc.h>

#include <algorithm>
#include <cmath>
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
  if (params.n_ctx > c.max_positions)
    return make_error(StatusCode::kInvalidArgument, "n_ctx = %u exceeds the model's max_positions = %u",
                      params.n_ctx, c.max_positions);
  if (params.n_batch == 0) return make_error(StatusCode::kInvalidArgument, "n_batch = 0 (must be >= 1)");
  if (params.n_threads < 1 || params.n_threads > 256)
    return make_error(StatusCode::kInvalidArgument, "n_threads = %d must be in [1, 256]", params.n_threads);
  for (uint32_t i = 0; i < c.n_layers; ++i) {
    const AttentionMemory& m = model.spec().layers[i];
    if (m.kind != MemoryKind::Full)
      return make_error(StatusCode::kUnsupported,
                        "layer %u has a %s memory (%s); this version runs full-attention layers only", i,
                        memory_kind_name(m.kind), m.describe().c_str());
  }
  const cpu::KernelTable* table = nullptr;
  if (params.kernels) {
    table = cpu::kernels_by_name(params.kernels);
    if (!table)
      return make_error(StatusCode::kInvalidArgument, "kernels = '%s' is not available on this CPU/build",
                        params.kernels);
  }
  std::unique_ptr<Context> ctx(new Context(model, params));
  ctx->params_.n_batch = std::min(params.n_batch, params.n_ctx);  // a chunk never exceeds the context
  ctx->backend_.reset(new CpuBackend(params.n_threads, table));
  PKV_RETURN_IF_ERROR(ctx->plan_and_allocate());
  *out = std::move(ctx);
  return Status::Ok();
}

Status Context::plan_and_allocate() {
  const ModelConfig& c = model_.config();
  const uint64_t B = params_.n_batch, T = params_.n_ctx;
  const uint64_t d = c.d_model, qd = uint64_t(c.n_heads) * c.head_dim, kvd = uint64_t(c.n_kv_heads) * c.head_dim;
  WorkspaceQuery wq;
  wq.max_tokens = int(B);
  wq.max_k = int(std::max<uint64_t>({d, qd, uint64_t(c.ffn_dim)}));
  wq.n_ctx = int(T);
  wq.n_threads = params_.n_threads;

  struct Slot {
    float** ptr;
    uint64_t floats;
  } slots[] = {
      {&k_cache_, uint64_t(c.n_layers) * T * kvd}, {&v_cache_, uint64_t(c.n_layers) * T * kvd},
      {&x_, B * d}, {&xn_, B * d}, {&q_, B * qd}, {&att_, B * qd}, {&tmp_, B * d},
      {&gate_, B * c.ffn_dim}, {&up_, B * c.ffn_dim}, {&logits_, c.vocab_size},
  };
  auto align = [](uint64_t b) { return (b + 63) & ~uint64_t(63); };
  uint64_t total = 0;
  for (const Slot& s : slots) total += align(s.floats * sizeof(float));
  const uint64_t ws = align(backend_->workspace_bytes(wq));
  total += ws;
  arena_ = mi_malloc_aligned(size_t(total), 64);
  if (!arena_)
    return make_error(StatusCode::kOutOfMemory, "cannot allocate the context's %llu bytes (n_ctx %u, n_batch %u)",
                      (unsigned long long)total, params_.n_ctx, params_.n_batch);
  arena_bytes_ = total;
  uint8_t* p = static_cast<uint8_t*>(arena_);
  for (const Slot& s : slots) {
    *s.ptr = reinterpret_cast<float*>(p);
    p += align(s.floats * sizeof(float));
  }
  return backend_->bind_workspace(p, size_t(ws), wq);
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
  Backend& be = *backend_;

  be.embed(model_.token_embd(), tokens, n, x_);
  for (uint32_t l = 0; l < c.n_layers; ++l) {
    const Model::Layer& L = model_.layer(int(l));
    float* k_rows = k_cache_ + (size_t(l) * params_.n_ctx + size_t(pos0)) * kvd;  // [n, kvd]
    float* v_rows = v_cache_ + (size_t(l) * params_.n_ctx + size_t(pos0)) * kvd;

    be.rmsnorm(x_, L.attn_norm, c.norm_eps, n, d, xn_);
    const WeightView qkv[3] = {L.wq, L.wk, L.wv};
    float* const qkv_out[3] = {q_, k_rows, v_rows};  // K and V land in the cache directly
    be.matmul(qkv, qkv_out, 3, xn_, n);
    be.rope(q_, n, nh, hd, pos0, model_.rope_inv_freq(), int(c.rope.dim), interleaved, model_.rope_pos_scale());
    be.rope(k_rows, n, nkv, hd, pos0, model_.rope_inv_freq(), int(c.rope.dim), interleaved, model_.rope_pos_scale());

    AttentionArgs a;
    a.q = q_;
    a.k_cache = k_cache_ + size_t(l) * params_.n_ctx * kvd;
    a.v_cache = v_cache_ + size_t(l) * params_.n_ctx * kvd;
    a.out = att_;
    a.n_tokens = n;
    a.first_pos = pos0;
    a.n_heads = nh;
    a.n_kv_heads = nkv;
    a.head_dim = hd;
    a.scale = 1.0f / std::sqrt(float(hd));
    be.attention(a);
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

}  // namespace phasekv
