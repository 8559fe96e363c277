#include "context.h"
#include "host_memory.h"


#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <thread>


namespace phasekv {

ContextParams default_context_params() {
  ContextParams p;
  const unsigned hw = std::thread::hardware_concurrency();
  p.n_threads = hw == 0 ? 1 : int(std::min(hw, 64u));
  return p;
}

Context::Context(const Model& m, const ContextParams& p) : model_(m), params_(p) {}

Context::~Context() {
  if (backend_) {
    (void)backend_->synchronize();  // nothing may still write into the arenas
    for (int s = 0; s < kMemorySpaces; ++s)
      if (arena_[s]) backend_->release(MemorySpace(s), arena_[s]);
  }
  backend_.reset();
}

const char* Context::kernels_name() const { return backend_->kernels_name(); }

Status Context::failed_state() const {
  return make_error(StatusCode::kInternal,
                    "the context's %s backend failed earlier; its memory is undefined: call reset() first",
                    backend_->name());
}

Status Context::create(const Model& model, const ContextParams& params, std::unique_ptr<Context>* out) {
  return create(model, params, nullptr, out);
}

Status Context::create(const Model& model, const ContextParams& params, std::unique_ptr<Backend> backend,
                       std::unique_ptr<Context>* out) {
  const ModelConfig& c = model.config();
  if (params.n_ctx == 0) return make_error(StatusCode::kInvalidArgument, "n_ctx = 0 (must be >= 1)");
  if (params.n_ctx > c.max_positions && !params.beyond_trained)
    return make_error(StatusCode::kInvalidArgument, "n_ctx = %u exceeds the model's max_positions = %u",
                      params.n_ctx, c.max_positions);
  if (params.n_batch == 0) return make_error(StatusCode::kInvalidArgument, "n_batch = 0 (must be >= 1)");
  if (params.n_threads < 1 || params.n_threads > 256)
    return make_error(StatusCode::kInvalidArgument, "n_threads = %d must be in [1, 256]", params.n_threads);
  const cpu::KernelTable* table = nullptr;
  cpu::MatmulMode mode = cpu::MatmulMode::Reference;
  {
    const char* env = std::getenv("PHASEKV_KERNELS");
    const char* spec = params.kernels ? params.kernels : env;
    std::string bad;
    if (spec && !cpu::parse_kernel_spec(spec, &mode, &table, &bad))
      return make_error(StatusCode::kInvalidArgument,
                        "%s = '%s': '%s' is not available on this CPU/build (modes: reference, q8; instruction "
                        "sets: %s)",
                        params.kernels ? "kernels" : "PHASEKV_KERNELS", spec, bad.c_str(), cpu::kKernelSetNames);
  }
  if (params.snapshot_slots > 64)
    return make_error(StatusCode::kInvalidArgument, "snapshot_slots = %u must be at most 64", params.snapshot_slots);
  std::unique_ptr<Context> ctx(new Context(model, params));
  ctx->params_.n_batch = std::min(params.n_batch, params.n_ctx);  // a chunk never exceeds the context
  if (backend) {
    ctx->backend_ = std::move(backend);
  } else {
    BackendParams bp;
    bp.kind = params.backend;
    bp.n_threads = params.n_threads;
    bp.cpu_kernels = table;
    bp.cpu_mode = mode;
    bp.device = params.device;
    bp.cuda_weights = params.cuda_weights;
    PKV_RETURN_IF_ERROR(make_backend(bp, &ctx->backend_));
  }
  // Everything this model needs must be supported here, or the context is refused now.
  Backend& be = *ctx->backend_;
  auto need = [&](BackendOp op, DType t, const char* what) -> Status {
    if (!be.supports(op, t))
      return make_error(StatusCode::kUnsupported, "the %s backend does not support %s with %s weights (%s)", be.name(),
                        backend_op_name(op), dtype_name(t), what);
    return Status::Ok();
  };
  PKV_RETURN_IF_ERROR(need(BackendOp::Embed, model.token_embd().dtype, "token_embd.weight"));
  PKV_RETURN_IF_ERROR(need(BackendOp::Matmul, model.output().dtype, "output.weight"));
  for (uint32_t l = 0; l < c.n_layers; ++l) {
    const Model::Layer& L = model.layer(int(l));
    for (const WeightView* w : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down, &L.cmp[0].gate_map,
                                &L.cmp[1].gate_map, &L.cmp[0].payload_map, &L.cmp[1].payload_map})
      if (w->data) PKV_RETURN_IF_ERROR(need(BackendOp::Matmul, w->dtype, "a layer's weight matrix"));
  }
  for (BackendOp op : {BackendOp::RmsNorm, BackendOp::Rope, BackendOp::Attention, BackendOp::Compress,
                       BackendOp::CompressReset, BackendOp::SiluMul, BackendOp::Add, BackendOp::Copy,
                       BackendOp::RingWrite, BackendOp::GoldScore})
    PKV_RETURN_IF_ERROR(need(op, DType::F32, "activations"));
  PlanParams pp;
  pp.n_ctx = params.n_ctx;
  pp.n_batch = ctx->params_.n_batch;
  pp.n_threads = params.n_threads;
  pp.beyond_trained = params.beyond_trained;
  pp.snapshot_slots = params.snapshot_slots;
  pp.backend = ctx->backend_.get();
  PKV_RETURN_IF_ERROR(plan_memory(model.spec(), model.weight_bytes(), pp, &ctx->plan_));
  if (params.memory_budget && ctx->plan_.arena_bytes > params.memory_budget)
    return make_error(StatusCode::kBudgetExceeded, "the context needs %llu bytes, over its memory budget of %llu\n%s",
                      (unsigned long long)ctx->plan_.arena_bytes, (unsigned long long)params.memory_budget,
                      ctx->plan_.itemised().c_str());
  // The arena is zeroed at creation (every page touched): a plan larger than the memory this
  // process can still have would be OOM-killed, maybe taking other processes with it.
  const uint64_t host_bytes = ctx->plan_.space_bytes[int(MemorySpace::Host)] +
                              ctx->plan_.space_bytes[int(MemorySpace::PinnedHost)];
  if (host_bytes > 0) {
    const HostMemory hm = host_memory_available();
    if (hm.known && host_bytes > hm.available)
      return make_error(StatusCode::kOutOfMemory,
                        "the context needs %llu bytes of host memory, more than this process can still have "
                        "(%llu bytes: %s); lower the context length (n_ctx = %u)\n%s",
                        (unsigned long long)host_bytes, (unsigned long long)hm.available, hm.source.c_str(),
                        params.n_ctx, ctx->plan_.itemised().c_str());
  }
  PKV_RETURN_IF_ERROR(ctx->bind_weights());
  PKV_RETURN_IF_ERROR(ctx->plan_and_allocate());
  *out = std::move(ctx);
  return Status::Ok();
}

Status Context::bind_weights() {
  PKV_RETURN_IF_ERROR(model_.weights_for(*backend_, &weights_));
  const WeightMapping& w = *weights_;
  bool ok = true;
  auto tr = [&](const float* p) -> const float* {
    const float* d = static_cast<const float*>(w.translate(p));
    ok &= (p == nullptr) == (d == nullptr);
    return d;
  };
  Status st = Status::Ok();
  // matmul_only: a matrix no other op reads, which the backend may hold in a layout of its own
  // (WeightMapping::view: the CPU backend's R4 copies in the q8 modes).
  auto trw = [&](const WeightView& v, bool matmul_only = false) -> WeightView {
    WeightView r;
    if (st.ok()) st = w.view(v, matmul_only, &r);
    ok &= (v.data == nullptr) == (r.data == nullptr);
    return r;
  };
  const ModelConfig& c = model_.config();
  layers_.assign(c.n_layers, Model::Layer());
  for (uint32_t l = 0; l < c.n_layers; ++l) {
    const Model::Layer& L = model_.layer(int(l));
    Model::Layer& D = layers_[l];
    D.attn_norm = tr(L.attn_norm);
    D.ffn_norm = tr(L.ffn_norm);
    D.wq = trw(L.wq, true);
    D.wk = trw(L.wk, true);
    D.wv = trw(L.wv, true);
    D.wo = trw(L.wo, true);
    D.w_gate = trw(L.w_gate, true);
    D.w_up = trw(L.w_up, true);
    D.w_down = trw(L.w_down, true);
    for (int b = 0; b < 2; ++b) {
      D.cmp[b].gate_bias = tr(L.cmp[b].gate_bias);
      D.cmp[b].gate_map = trw(L.cmp[b].gate_map);
      D.cmp[b].payload_map = trw(L.cmp[b].payload_map);
    }
    D.k_norm = tr(L.k_norm);
    D.sink = tr(L.sink);
    D.bq = tr(L.bq);
    D.bk = tr(L.bk);
    D.bv = tr(L.bv);
    D.q_norm = tr(L.q_norm);
    D.kh_norm = tr(L.kh_norm);
  }
  token_embd_ = trw(model_.token_embd());
  // Only matmul reads output_ (a tied one is also token_embd_, which embed() reads by rows: that
  // view stays in place, and an R4 copy, if the backend makes one, is the output's own).
  output_ = trw(model_.output(), true);
  output_norm_ = tr(model_.output_norm());
  inv_freq_ = tr(model_.rope_inv_freq());
  PKV_RETURN_IF_ERROR(st);
  if (!ok) return make_error(StatusCode::kInternal, "weights: a model tensor lies outside the mapped regions");
  return Status::Ok();
}

Status Context::set_compress_observer(CompressObserver observer, void* user) {
  if (observer && std::strcmp(backend_->name(), "cpu") != 0)
    return make_error(StatusCode::kUnsupported, "the compressor observer needs the CPU backend (this context runs on %s)",
                      backend_->name());
  compress_observer_ = observer;
  compress_observer_user_ = user;
  return Status::Ok();
}

Status Context::plan_and_allocate() {
  const ModelConfig& c = model_.config();
  const MemoryPlan& p = plan_;
  for (int s = 0; s < kMemorySpaces; ++s) {
    if (!p.space_bytes[s]) continue;
    Status st = backend_->allocate(MemorySpace(s), size_t(p.space_bytes[s]), &arena_[s]);
    if (!st.ok())
      return make_error(StatusCode::kOutOfMemory, "cannot allocate the context's %llu bytes of %s memory: %s\n%s",
                        (unsigned long long)p.space_bytes[s], memory_space_name(MemorySpace(s)),
                        st.message().c_str(), p.itemised().c_str());
    // Zero every page now: the first decode must not page-fault its way through the KV memory.
    if (params_.prefault || MemorySpace(s) == MemorySpace::Device)
      PKV_RETURN_IF_ERROR(backend_->zero(MemorySpace(s), arena_[s], size_t(p.space_bytes[s])));
  }
  arena_bytes_ = p.arena_bytes;

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
  uint8_t* at[kMemorySpaces];
  for (int s = 0; s < kMemorySpaces; ++s) at[s] = static_cast<uint8_t*>(arena_[s]);
  uint8_t* workspace = nullptr;
  slots_.assign(p.snapshot_slots, nullptr);
  slot_n_past_.assign(p.snapshot_slots, -1);
  for (const PlanBuffer& b : p.buffers) {
    uint8_t*& here = at[int(b.space)];
    float* f = reinterpret_cast<float*>(here);
    switch (b.role) {
      case PlanBuffer::kKeys: mem_[size_t(b.layer)].k = f; break;
      case PlanBuffer::kValues: mem_[size_t(b.layer)].v = f; break;
      case PlanBuffer::kKeyEntries: mem_[size_t(b.layer)].k_ent = f; break;
      case PlanBuffer::kValueEntries: mem_[size_t(b.layer)].v_ent = f; break;
      case PlanBuffer::kAccumulators: mem_[size_t(b.layer)].acc = f; break;
      case PlanBuffer::kX: x_ = f; break;
      case PlanBuffer::kXn: xn_ = f; break;
      case PlanBuffer::kTmp: tmp_ = f; break;
      case PlanBuffer::kQ: q_ = f; break;
      case PlanBuffer::kAtt: att_ = f; break;
      case PlanBuffer::kGate: gate_ = f; break;
      case PlanBuffer::kUp: up_ = f; break;
      case PlanBuffer::kLogits: logits_ = f; break;
      case PlanBuffer::kChunkK: k_chunk_ = f; break;
      case PlanBuffer::kChunkV: v_chunk_ = f; break;
      case PlanBuffer::kChunkKRaw: k_raw_ = f; break;
      case PlanBuffer::kGateLogitsK: gate_buf_[0] = f; break;
      case PlanBuffer::kGateLogitsV: gate_buf_[1] = f; break;
      case PlanBuffer::kPayloadK: payload_buf_[0] = f; break;
      case PlanBuffer::kPayloadV: payload_buf_[1] = f; break;
      case PlanBuffer::kTokens: tokens_ = reinterpret_cast<int32_t*>(here); break;
      case PlanBuffer::kScore: score_ = reinterpret_cast<ScoreResult*>(here); break;
      case PlanBuffer::kTokensHost: tokens_host_ = reinterpret_cast<int32_t*>(here); break;
      case PlanBuffer::kLogitsHost: logits_host_ = f; break;
      case PlanBuffer::kScoreHost: score_host_ = reinterpret_cast<ScoreResult*>(here); break;
      case PlanBuffer::kSnapshotSlot: slots_[size_t(b.layer)] = here; break;
      case PlanBuffer::kWorkspace: workspace = here; break;
      default: return make_error(StatusCode::kInternal, "memory plan: buffer '%s' has no role", b.name.c_str());
    }
    here += (b.bytes + kPlanAlign - 1) & ~(kPlanAlign - 1);
  }
  for (int s = 0; s < kMemorySpaces; ++s)
    if (uint64_t(at[s] - static_cast<uint8_t*>(arena_[s])) != p.space_bytes[s])
      return make_error(StatusCode::kInternal, "memory plan: the %s layout covers %llu of %llu bytes",
                        memory_space_name(MemorySpace(s)),
                        (unsigned long long)(at[s] - static_cast<uint8_t*>(arena_[s])),
                        (unsigned long long)p.space_bytes[s]);
  // Host views of what crosses the bus: the state buffers themselves when the state is in host memory.
  if (!tokens_host_) tokens_host_ = tokens_;
  if (!logits_host_) logits_host_ = logits_;
  if (!score_host_) score_host_ = score_;
  if (!tokens_ || !logits_ || !score_ || !x_)
    return make_error(StatusCode::kInternal, "memory plan: a required activation buffer is missing");
  reset();
  PKV_RETURN_IF_ERROR(backend_->synchronize());
  WorkspaceQuery wq;
  wq.max_tokens = int(p.n_batch);
  wq.max_k = int(std::max<uint64_t>({c.d_model, uint64_t(c.n_heads) * c.head_dim, uint64_t(c.ffn_dim)}));
  wq.n_ctx = int(std::max<uint64_t>(p.max_keys, 1));
  wq.attention_group = int(c.n_heads / c.n_kv_heads);
  wq.head_dim = int(c.head_dim);
  wq.n_threads = params_.n_threads;
  return backend_->bind_workspace(workspace, size_t(p.workspace_bytes), wq);
}

void Context::reset() {
  n_past_ = 0;
  failed_ = false;
  const ModelConfig& c = model_.config();
  for (const LayerMem& M : mem_)
    if (M.acc) backend_->compress_reset(M.acc, int(2 * M.n_acc), int(c.n_kv_heads), int(M.d_g), int(c.head_dim));
}

Status Context::prefill(const int32_t* tokens, size_t n) {
  if (failed_) return failed_state();
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
  backend_->download(logits_host_, logits_, size_t(model_.config().vocab_size) * sizeof(float));
  Status st = backend_->synchronize();
  if (!st.ok()) {
    failed_ = true;
    return st.with_context("prefill");
  }
  return Status::Ok();
}

Status Context::score(int32_t gold, ScoreResult* out) {
  if (failed_) return failed_state();
  const int32_t vocab = int32_t(model_.config().vocab_size);
  if (n_past_ == 0) return make_error(StatusCode::kInvalidArgument, "score: no token has been evaluated yet");
  if (gold < 0 || gold >= vocab)
    return make_error(StatusCode::kInvalidArgument, "score: gold = %d is outside the vocabulary [0, %d)", gold, vocab);
  backend_->gold_score(logits_, vocab, gold, score_);
  backend_->download(score_host_, score_, sizeof(ScoreResult));
  Status st = backend_->synchronize();
  if (!st.ok()) {
    failed_ = true;
    return st.with_context("score");
  }
  *out = *score_host_;
  return Status::Ok();
}

void Context::eval_chunk(const int32_t* tokens, int n) {
  const ModelConfig& c = model_.config();
  const int d = int(c.d_model), hd = int(c.head_dim), nh = int(c.n_heads), nkv = int(c.n_kv_heads);
  const size_t kvd = size_t(nkv) * hd;
  const int pos0 = int(n_past_);
  const bool interleaved = c.rope.style == RopeStyle::Interleaved;
  const float* inv_freq = inv_freq_;
  const int rope_dim = int(c.rope.dim);
  const float pos_scale = model_.rope_pos_scale();
  Backend& be = *backend_;

  if (tokens_host_ != tokens) std::memcpy(tokens_host_, tokens, size_t(n) * sizeof(int32_t));
  be.upload(tokens_, tokens_host_, size_t(n) * sizeof(int32_t));
  be.embed(token_embd_, tokens_, n, x_);
  for (uint32_t l = 0; l < c.n_layers; ++l) {
    const Model::Layer& L = layers_[l];
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
    if (L.bq) {  // qwen2: q/k/v biases, token by token
      for (int t = 0; t < n; ++t) {
        be.add(q_ + size_t(t) * nh * hd, L.bq, size_t(nh) * hd);
        be.add(k_rows + size_t(t) * kvd, L.bk, kvd);
        be.add(v_rows + size_t(t) * kvd, L.bv, kvd);
      }
    }
    if (L.q_norm) {  // qwen3: every head of q and k RMS-normalized (in place) before RoPE
      be.rmsnorm(q_, L.q_norm, c.norm_eps, n * nh, hd, q_);
      be.rmsnorm(k_rows, L.kh_norm, c.norm_eps, n * nkv, hd, k_rows);
    }
    const bool compressed = m.kind == MemoryKind::Compressed;
    const bool rotate_entry = compressed && m.entry_rope == EntryRope::RotateEntry;
    const bool layer_payload = m.payload == PayloadSource::LayerProjection;
    if (rotate_entry && layer_payload) be.copy(k_raw_, k_rows, size_t(n) * kvd * sizeof(float));
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
      if (compress_observer_) compress_observer_(compress_observer_user_, uint32_t(l), ca);
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
      RingWriteArgs rw;
      rw.ring_k = M.k;
      rw.ring_v = M.v;
      rw.k_rows = k_rows;
      rw.v_rows = v_rows;
      rw.n_tokens = n;
      rw.first_pos = pos0;
      rw.ring_rows = int(M.ring_rows);
      rw.kvd = int(kvd);
      be.ring_write(rw);
    }
    float* const o_out[1] = {tmp_};
    be.matmul(&L.wo, o_out, 1, att_, n);
    be.add(x_, tmp_, size_t(n) * d);

    be.rmsnorm(x_, L.ffn_norm, c.norm_eps, n, d, xn_);
    be.matmul_silu(L.w_gate, L.w_up, gate_, up_, gate_, xn_, n);
    float* const down_out[1] = {tmp_};
    be.matmul(&L.w_down, down_out, 1, gate_, n);
    be.add(x_, tmp_, size_t(n) * d);
  }
  // Logits of the last token only.
  be.rmsnorm(x_ + size_t(n - 1) * d, output_norm_, c.norm_eps, 1, d, xn_);
  float* const lo[1] = {logits_};
  be.matmul(&output_, lo, 1, xn_, 1);
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
  if (failed_) return failed_state();
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
#define PKV_SAVE(ptr, floats)                                                  \
  do {                                                                         \
    if ((floats) > 0) backend_->download(out, ptr, (floats) * sizeof(float));  \
    out += (floats) * sizeof(float);                                           \
  } while (0)
  PKV_SNAPSHOT_PIECES(PKV_SAVE);
#undef PKV_SAVE
  PKV_RETURN_IF_ERROR(backend_->synchronize());
  if (written) *written = need;
  return Status::Ok();
}

Status Context::restore(const void* buffer, size_t size) {
  if (failed_) return failed_state();
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
#define PKV_LOAD(ptr, floats)                                                            \
  do {                                                                                   \
    if ((floats) > 0) backend_->upload(const_cast<float*>(ptr), in, (floats) * sizeof(float)); \
    in += (floats) * sizeof(float);                                                      \
  } while (0)
  PKV_SNAPSHOT_PIECES(PKV_LOAD);
#undef PKV_LOAD
  backend_->download(logits_host_, logits_, size_t(model_.config().vocab_size) * sizeof(float));
  Status st = backend_->synchronize();
  if (!st.ok()) {
    failed_ = true;
    return st.with_context("restore");
  }
  n_past_ = h.n_past;
  return Status::Ok();
}

Status Context::save_slot(uint32_t slot) {
  if (failed_) return failed_state();
  if (slot >= slots_.size())
    return make_error(StatusCode::kInvalidArgument, "save_slot: slot %u, the context has %zu snapshot slots", slot,
                      slots_.size());
  uint8_t* out = slots_[slot];
  const uint32_t n_past = n_past_;
#define PKV_SLOT_SAVE(ptr, floats)                                   \
  do {                                                               \
    if ((floats) > 0) backend_->copy(out, ptr, (floats) * sizeof(float)); \
    out += (floats) * sizeof(float);                                 \
  } while (0)
  PKV_SNAPSHOT_PIECES(PKV_SLOT_SAVE);
#undef PKV_SLOT_SAVE
  slot_n_past_[slot] = -1;  // valid only once the copies have run
  Status st = backend_->synchronize();
  if (!st.ok()) {
    failed_ = true;
    return st.with_context("save_slot");
  }
  slot_n_past_[slot] = n_past_;
  return Status::Ok();
}

Status Context::load_slot(uint32_t slot) {
  if (failed_) return failed_state();
  if (slot >= slots_.size())
    return make_error(StatusCode::kInvalidArgument, "load_slot: slot %u, the context has %zu snapshot slots", slot,
                      slots_.size());
  if (slot_n_past_[slot] < 0) return make_error(StatusCode::kInvalidArgument, "load_slot: slot %u was never saved", slot);
  const uint8_t* in = slots_[slot];
  const uint32_t n_past = uint32_t(slot_n_past_[slot]);
#define PKV_SLOT_LOAD(ptr, floats)                                                      \
  do {                                                                                  \
    if ((floats) > 0) backend_->copy(const_cast<float*>(ptr), in, (floats) * sizeof(float)); \
    in += (floats) * sizeof(float);                                                     \
  } while (0)
  PKV_SNAPSHOT_PIECES(PKV_SLOT_LOAD);
#undef PKV_SLOT_LOAD
  backend_->download(logits_host_, logits_, size_t(model_.config().vocab_size) * sizeof(float));
  Status st = backend_->synchronize();
  if (!st.ok()) {
    failed_ = true;
    return st.with_context("load_slot");
  }
  n_past_ = n_past;
  return Status::Ok();
}

}  // namespace phasekv
