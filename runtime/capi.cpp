// The C API over the C++ core (phasekv.h). Catches everything at the boundary.
#include <cstring>
#include <new>
#include <string>

#include "chat_template.h"
#include "context.h"
#include "phasekv.h"
#include "sampler.h"
#include "phase_guard.h"
#include "selftest_report.h"

struct pkv_model {
  std::unique_ptr<phasekv::Model> m;
  std::string path;  // for the self-test's control, which loads the file's full-attention twin
};
struct pkv_context {
  std::unique_ptr<phasekv::Context> c;
};
struct pkv_sampler {
  phasekv::Sampler s;
};
struct pkv_selftest_report {
  phasekv::SelftestReport r;
  std::string digest, control_digest;
  std::vector<double> guard_rows[2][3];  // [unguarded, guarded][accuracy, ci_lo, ci_hi]
};
struct pkv_phase_guard {
  std::unique_ptr<phasekv::PhaseGuard> g;
};
struct pkv_detokenizer {
  explicit pkv_detokenizer(const phasekv::Tokenizer& t) : d(t) {}
  phasekv::StreamDecoder d;
};

namespace {

thread_local std::string g_last_error;

pkv_status fail(const phasekv::Status& s) {
  g_last_error = s.message();
  return static_cast<pkv_status>(static_cast<int>(s.code()));
}
pkv_status fail(pkv_status code, const char* msg) {
  g_last_error = msg;
  return code;
}

template <class F>
pkv_status guarded(F&& f) {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    return fail(PKV_ERR_OUT_OF_MEMORY, "out of memory");
  } catch (const std::exception& e) {
    return fail(PKV_ERR_INTERNAL, e.what());
  } catch (...) {
    return fail(PKV_ERR_INTERNAL, "unknown exception");
  }
}

#define PKV_CHECK_ARG(cond, msg) \
  if (!(cond)) return fail(PKV_ERR_INVALID_ARGUMENT, msg)

// The C messages as the runtime's; a NULL role or content is refused, naming the function.
pkv_status chat_messages(const char* fn, const pkv_chat_message* messages, size_t n,
                         std::vector<phasekv::ChatMessage>* out) {
  for (size_t i = 0; i < n; ++i) {
    if (!messages[i].role || !messages[i].content)
      return fail(phasekv::make_error(phasekv::StatusCode::kInvalidArgument,
                                      "%s: message %zu has a NULL role or content", fn, i));
    out->push_back({messages[i].role, messages[i].content});
  }
  return PKV_OK;
}

// Hands ids to the caller: *n_tokens always, the ids only when they fit in capacity.
pkv_status copy_tokens(const char* fn, const std::vector<int32_t>& ids, int32_t* tokens, size_t capacity,
                       size_t* n_tokens) {
  *n_tokens = ids.size();
  if (ids.size() > capacity || (!tokens && !ids.empty()))
    return fail(phasekv::make_error(phasekv::StatusCode::kInvalidArgument, "%s: capacity is smaller than *n_tokens",
                                    fn));
  if (!ids.empty()) std::memcpy(tokens, ids.data(), ids.size() * sizeof(int32_t));
  return PKV_OK;
}

}  // namespace

extern "C" {

const char* pkv_last_error(void) { return g_last_error.c_str(); }

const char* pkv_status_string(pkv_status s) {
  return phasekv::status_code_name(static_cast<phasekv::StatusCode>(static_cast<int>(s)));
}

const char* pkv_version_string(void) { return PHASEKV_VERSION_STRING; }

int pkv_has_cuda(void) {
#if PHASEKV_HAVE_CUDA
  return 1;
#else
  return 0;
#endif
}

pkv_model_params pkv_model_default_params(void) {
  pkv_model_params p;
  p.use_mmap = 1;
  p.verify = 0;
  return p;
}

pkv_status pkv_model_load(const char* path, pkv_model** out) {
  PKV_CHECK_ARG(path && out, "pkv_model_load: path and out must not be NULL");
  return pkv_model_load_with_params(path, nullptr, out);
}

pkv_status pkv_model_load_with_params(const char* path, const pkv_model_params* params, pkv_model** out) {
  PKV_CHECK_ARG(path && out, "pkv_model_load_with_params: path and out must not be NULL");
  const pkv_model_params p = params ? *params : pkv_model_default_params();
  return guarded([&] {
    std::unique_ptr<pkv_model> m(new pkv_model());
    phasekv::Model::LoadOptions lo;
    lo.mmap = p.use_mmap != 0;
    lo.verify = p.verify != 0;
    phasekv::Status s = phasekv::Model::load(path, lo, &m->m);
    if (!s.ok()) return fail(s);
    m->path = path;
    *out = m.release();
    return PKV_OK;
  });
}

void pkv_model_free(pkv_model* model) { delete model; }
int32_t pkv_model_n_vocab(const pkv_model* m) { return m ? int32_t(m->m->config().vocab_size) : 0; }
uint32_t pkv_model_max_positions(const pkv_model* m) { return m ? m->m->config().max_positions : 0; }
int pkv_token_is_end(const pkv_model* m, int32_t t) {
  if (!m) return 0;
  const phasekv::Tokenizer& tok = m->m->tokenizer();
  return t >= 0 && (t == tok.eos() || t == tok.eot());
}

pkv_status pkv_tokenize(const pkv_model* model, const char* text, size_t text_len, int parse_special, int add_bos,
                        int32_t* tokens, size_t capacity, size_t* n_tokens) {
  PKV_CHECK_ARG(model && (text || text_len == 0) && n_tokens, "pkv_tokenize: model, text and n_tokens are required");
  return guarded([&] {
    const phasekv::Tokenizer& tok = model->m->tokenizer();
    std::vector<int32_t> ids;
    if (add_bos && tok.add_bos() && tok.bos() >= 0) ids.push_back(tok.bos());
    phasekv::Status s = tok.encode(std::string_view(text ? text : "", text_len), parse_special != 0, &ids);
    if (!s.ok()) return fail(s);
    return copy_tokens("pkv_tokenize", ids, tokens, capacity, n_tokens);
  });
}

pkv_status pkv_token_to_bytes(const pkv_model* model, int32_t token, char* buf, size_t capacity, size_t* len) {
  PKV_CHECK_ARG(model && len, "pkv_token_to_bytes: model and len are required");
  return guarded([&] {
    std::string b;
    phasekv::Status s = model->m->tokenizer().token_bytes(token, &b);
    if (!s.ok()) return fail(s);
    *len = b.size();
    if (b.size() > capacity || (!buf && !b.empty()))
      return fail(PKV_ERR_INVALID_ARGUMENT, "pkv_token_to_bytes: capacity is smaller than *len");
    if (!b.empty()) std::memcpy(buf, b.data(), b.size());
    return PKV_OK;
  });
}

pkv_status pkv_detokenizer_init(const pkv_model* model, pkv_detokenizer** out) {
  PKV_CHECK_ARG(model && out, "pkv_detokenizer_init: model and out are required");
  return guarded([&] {
    *out = new pkv_detokenizer(model->m->tokenizer());
    return PKV_OK;
  });
}

void pkv_detokenizer_free(pkv_detokenizer* d) { delete d; }

pkv_status pkv_detokenizer_push(pkv_detokenizer* d, int32_t token, char* buf, size_t capacity, size_t* len) {
  PKV_CHECK_ARG(d && buf && len && capacity > 0, "pkv_detokenizer_push: d, buf, len and capacity are required");
  return guarded([&] {
    std::string text;
    phasekv::Status s = d->d.push(token, &text);
    if (!s.ok()) return fail(s);
    if (text.size() + 1 > capacity) return fail(PKV_ERR_INVALID_ARGUMENT, "pkv_detokenizer_push: buffer too small");
    std::memcpy(buf, text.data(), text.size());
    buf[text.size()] = '\0';
    *len = text.size();
    return PKV_OK;
  });
}

pkv_status pkv_chat_tokenize(const pkv_model* model, const pkv_chat_message* messages, size_t n_messages,
                             int add_generation_prompt, int add_bos, int32_t* tokens, size_t capacity,
                             size_t* n_tokens) {
  PKV_CHECK_ARG(model && (messages || n_messages == 0) && n_tokens, "pkv_chat_tokenize: bad arguments");
  return guarded([&] {
    std::vector<phasekv::ChatMessage> msgs;
    pkv_status st = chat_messages("pkv_chat_tokenize", messages, n_messages, &msgs);
    if (st != PKV_OK) return st;
    const phasekv::Tokenizer& tok = model->m->tokenizer();
    std::vector<int32_t> ids;
    if (add_bos && tok.add_bos() && tok.bos() >= 0) ids.push_back(tok.bos());
    phasekv::Status s =
        phasekv::encode_chat(tok, model->m->spec().chat_template, msgs, add_generation_prompt != 0, &ids);
    if (!s.ok()) return fail(s);
    return copy_tokens("pkv_chat_tokenize", ids, tokens, capacity, n_tokens);
  });
}

pkv_status pkv_chat_apply_template(const pkv_model* model, const pkv_chat_message* messages, size_t n_messages,
                                   int add_generation_prompt, char* buf, size_t capacity, size_t* len) {
  PKV_CHECK_ARG(model && (messages || n_messages == 0) && len, "pkv_chat_apply_template: bad arguments");
  return guarded([&] {
    std::vector<phasekv::ChatMessage> msgs;
    pkv_status st = chat_messages("pkv_chat_apply_template", messages, n_messages, &msgs);
    if (st != PKV_OK) return st;
    std::string out;
    phasekv::Status s =
        phasekv::apply_chat_template(model->m->spec().chat_template, msgs, add_generation_prompt != 0, &out);
    if (!s.ok()) return fail(s);
    *len = out.size();
    if (out.size() + 1 > capacity || !buf)
      return fail(PKV_ERR_INVALID_ARGUMENT, "pkv_chat_apply_template: capacity is smaller than *len + 1");
    std::memcpy(buf, out.c_str(), out.size() + 1);
    return PKV_OK;
  });
}

pkv_context_params pkv_context_default_params(void) {
  const phasekv::ContextParams p = phasekv::default_context_params();
  return pkv_context_params{p.n_ctx, p.n_batch, p.n_threads, p.memory_budget, PKV_BACKEND_CPU, 0};
}

}  // extern "C"

namespace {
pkv_status context_params(const char* fn, const pkv_context_params* params, phasekv::ContextParams* p) {
  p->n_ctx = params->n_ctx;
  p->n_batch = params->n_batch;
  p->n_threads = params->n_threads;
  p->memory_budget = params->memory_budget;
  if (params->backend < PKV_BACKEND_CPU || params->backend > PKV_BACKEND_AUTO)
    return fail(phasekv::make_error(phasekv::StatusCode::kInvalidArgument,
                                    "%s: backend = %d is not a pkv_backend (0 cpu, 1 cuda, 2 auto)", fn,
                                    int(params->backend)));
  p->backend = phasekv::BackendKind(params->backend);
  p->device = params->device;
  return PKV_OK;
}
}  // namespace

extern "C" {

pkv_status pkv_context_init(const pkv_model* model, const pkv_context_params* params, pkv_context** out) {
  PKV_CHECK_ARG(model && params && out, "pkv_context_init: model, params and out are required");
  return guarded([&] {
    phasekv::ContextParams p;
    const pkv_status ps = context_params("pkv_context_init", params, &p);
    if (ps != PKV_OK) return ps;
    std::unique_ptr<pkv_context> c(new pkv_context());
    phasekv::Status s = phasekv::Context::create(*model->m, p, &c->c);
    if (!s.ok()) return fail(s);
    *out = c.release();
    return PKV_OK;
  });
}

void pkv_context_free(pkv_context* ctx) { delete ctx; }

pkv_status pkv_prefill(pkv_context* ctx, const int32_t* tokens, size_t n) {
  PKV_CHECK_ARG(ctx, "pkv_prefill: ctx is NULL");
  return guarded([&] {
    phasekv::Status s = ctx->c->prefill(tokens, n);
    return s.ok() ? PKV_OK : fail(s);
  });
}

pkv_status pkv_decode(pkv_context* ctx, int32_t token) { return pkv_prefill(ctx, &token, 1); }
const float* pkv_logits(const pkv_context* ctx) { return ctx ? ctx->c->logits() : nullptr; }
uint32_t pkv_context_n_past(const pkv_context* ctx) { return ctx ? ctx->c->n_past() : 0; }
void pkv_context_reset(pkv_context* ctx) {
  if (ctx) ctx->c->reset();
}

uint64_t pkv_context_memory_bytes(const pkv_context* ctx) { return ctx ? ctx->c->allocated_bytes() : 0; }

size_t pkv_context_snapshot_size(const pkv_context* ctx) { return ctx ? ctx->c->snapshot_bytes() : 0; }

pkv_status pkv_context_snapshot(const pkv_context* ctx, void* buf, size_t capacity, size_t* written) {
  PKV_CHECK_ARG(ctx && buf, "pkv_context_snapshot: ctx and buf are required");
  return guarded([&] {
    phasekv::Status s = ctx->c->snapshot(buf, capacity, written);
    return s.ok() ? PKV_OK : fail(s);
  });
}

pkv_status pkv_context_restore(pkv_context* ctx, const void* buf, size_t size) {
  PKV_CHECK_ARG(ctx && buf, "pkv_context_restore: ctx and buf are required");
  return guarded([&] {
    phasekv::Status s = ctx->c->restore(buf, size);
    return s.ok() ? PKV_OK : fail(s);
  });
}

pkv_sampler_params pkv_sampler_default_params(void) {
  const phasekv::SamplerParams p;
  return pkv_sampler_params{p.temperature, p.top_k, p.top_p, p.min_p, p.repeat_penalty, p.repeat_last_n, p.seed};
}

pkv_status pkv_sampler_init(const pkv_model* model, const pkv_sampler_params* params, pkv_sampler** out) {
  PKV_CHECK_ARG(model && params && out, "pkv_sampler_init: model, params and out are required");
  return guarded([&] {
    phasekv::SamplerParams p;
    p.temperature = params->temperature;
    p.top_k = params->top_k;
    p.top_p = params->top_p;
    p.min_p = params->min_p;
    p.repeat_penalty = params->repeat_penalty;
    p.repeat_last_n = params->repeat_last_n;
    p.seed = params->seed;
    std::unique_ptr<pkv_sampler> s(new pkv_sampler());
    phasekv::Status st = phasekv::Sampler::create(int32_t(model->m->config().vocab_size), p, &s->s);
    if (!st.ok()) return fail(st);
    *out = s.release();
    return PKV_OK;
  });
}

void pkv_sampler_free(pkv_sampler* s) { delete s; }

pkv_status pkv_sampler_sample_logits(pkv_sampler* s, const float* logits, int32_t* token) {
  PKV_CHECK_ARG(s && logits && token, "pkv_sampler_sample_logits: s, logits and token are required");
  *token = s->s.sample(logits);
  return PKV_OK;
}

pkv_status pkv_sampler_sample(pkv_sampler* s, const pkv_context* ctx, int32_t* token) {
  PKV_CHECK_ARG(s && ctx && token, "pkv_sampler_sample: s, ctx and token are required");
  if (ctx->c->n_past() == 0) return fail(PKV_ERR_INVALID_ARGUMENT, "pkv_sampler_sample: the context has no logits yet");
  *token = s->s.sample(ctx->c->logits());
  return PKV_OK;
}

void pkv_sampler_accept(pkv_sampler* s, int32_t token) {
  if (s) s->s.accept(token);
}

pkv_selftest_params pkv_selftest_default_params(void) {
  const phasekv::SelftestOptions o;
  pkv_selftest_params p;
  std::memset(&p, 0, sizeof p);
  p.template_text = nullptr;
  p.chat = 0;
  p.probe_tokens = o.probe_tokens;
  p.samples = 16;
  p.budget_s = 0;
  p.seed = o.seed;
  p.period = 0;
  p.delta = o.delta;
  p.alpha = o.alpha;
  p.n_threads = phasekv::default_context_params().n_threads;
  p.records = o.records;
  p.backend = PKV_BACKEND_CPU;
  p.device = 0;
  p.progress = nullptr;
  p.progress_user_data = nullptr;
  p.control = 0;
  p.gate_min_acc = -1;
  p.gate_max_gap = -1;
  p.targets = o.targets;
  p.guard = o.guard;
  p.guard_threshold = o.guard_threshold;
  return p;
}

}  // extern "C"

namespace {

pkv_status selftest_options(const char* fn, const pkv_model* model, const pkv_selftest_params* params,
                            phasekv::SelftestOptions* out) {
  phasekv::SelftestOptions o;
  if (params->chat) {
    phasekv::Status s = phasekv::chat_probe_template(*model->m, &o.template_text);
    if (!s.ok()) return fail(s);
    o.template_label = "chat";
  } else if (params->template_text) {
    o.template_text = params->template_text;
    o.template_label = "(caller's template)";
  }
  o.probe_tokens = params->probe_tokens;
  o.records = params->records;
  o.targets = params->targets;
  o.samples = params->samples;
  o.budget_s = params->budget_s;
  o.seed = params->seed;
  o.period = params->period;
  o.delta = params->delta;
  o.alpha = params->alpha;
  o.n_threads = params->n_threads;
  o.guard = params->guard;
  o.guard_threshold = params->guard_threshold;
  if (params->backend < PKV_BACKEND_CPU || params->backend > PKV_BACKEND_AUTO)
    return fail(phasekv::make_error(phasekv::StatusCode::kInvalidArgument,
                                    "%s: backend = %d is not a pkv_backend (0 cpu, 1 cuda, 2 auto)", fn,
                                    int(params->backend)));
  o.backend = phasekv::BackendKind(params->backend);
  o.device = params->device;
  if (params->progress) {
    const pkv_selftest_progress_fn fn_cb = params->progress;
    void* const user = params->progress_user_data;
    o.progress = [fn_cb, user](const phasekv::SelftestProgress& p) {
      pkv_selftest_progress cp;
      cp.done = p.done;
      cp.total = p.total;
      cp.elapsed_s = p.elapsed_s;
      cp.eta_s = p.eta_s;
      cp.phase = p.phase;
      cp.control = p.control ? 1 : 0;
      return fn_cb(&cp, user) == 0;
    };
  }
  *out = std::move(o);
  return PKV_OK;
}

std::string hex64(uint64_t v) {
  char b[17];
  std::snprintf(b, sizeof b, "%016llx", (unsigned long long)v);
  return b;
}

const phasekv::SelftestResult* report_run(const pkv_selftest_report* rep, int32_t control) {
  if (!rep) return nullptr;
  if (control == 0) return &rep->r.run;
  if (control == 1 && rep->r.has_control) return &rep->r.control;
  return nullptr;
}

pkv_status report_protocol(const char* fn, const pkv_selftest_report* rep, int32_t control, int32_t protocol,
                           const phasekv::ProtocolResult** out) {
  const phasekv::SelftestResult* run = report_run(rep, control);
  if (!run)
    return fail(phasekv::make_error(phasekv::StatusCode::kInvalidArgument,
                                    "%s: control = %d: %s", fn, int(control),
                                    !rep ? "the report is NULL" : control == 1 ? "the report has no control run"
                                                                               : "not 0 or 1"));
  if (protocol < 0 || size_t(protocol) >= run->protocols.size())
    return fail(phasekv::make_error(phasekv::StatusCode::kInvalidArgument, "%s: protocol = %d is outside [0, %zu)",
                                    fn, int(protocol), run->protocols.size()));
  *out = &run->protocols[size_t(protocol)];
  return PKV_OK;
}

}  // namespace

extern "C" {

pkv_status pkv_selftest_run(const pkv_model* model, const pkv_selftest_params* params, pkv_selftest_result* out) {
  PKV_CHECK_ARG(model && params && out, "pkv_selftest_run: model, params and out are required");
  return guarded([&] {
    phasekv::SelftestOptions o;
    const pkv_status st = selftest_options("pkv_selftest_run", model, params, &o);
    if (st != PKV_OK) return st;
    phasekv::SelftestResult r;
    phasekv::Status s = phasekv::run_selftest(*model->m, o, &r);
    if (!s.ok()) return fail(s);
    std::memset(out, 0, sizeof *out);
    out->period = r.period;
    out->t0 = r.t0;
    for (int32_t f : r.flagged)
      if (out->n_flagged < PKV_SELFTEST_MAX_RESIDUES) out->flagged[out->n_flagged++] = f;
    for (const phasekv::ProtocolResult& p : r.protocols) {
      const int i = p.protocol == phasekv::Protocol::Outer ? 0 : 1;
      for (uint32_t k = 0; k < r.period && k < PKV_SELFTEST_MAX_RESIDUES; ++k) {
        out->accuracy[i][k] = p.summary.residues[k].accuracy;
        out->ci_lo[i][k] = p.summary.residues[k].accuracy_ci.lo;
        out->ci_hi[i][k] = p.summary.residues[k].accuracy_ci.hi;
      }
      out->mean_accuracy[i] = p.summary.mean_accuracy;
      out->min_accuracy[i] = p.summary.worst.naive_min;
      out->gap[i] = p.summary.gap.gap;
    }
    out->probes = r.probes;
    out->prefill_tokens = r.prefill_tokens;
    out->naive_prefill_tokens = r.naive_prefill_tokens;
    out->seconds = r.seconds;
    return PKV_OK;
  });
}

pkv_status pkv_selftest_run_report(const pkv_model* model, const pkv_selftest_params* params,
                                   pkv_selftest_report** out) {
  PKV_CHECK_ARG(model && params && out, "pkv_selftest_run_report: model, params and out are required");
  *out = nullptr;
  return guarded([&] {
    phasekv::SelftestOptions o;
    const pkv_status st = selftest_options("pkv_selftest_run_report", model, params, &o);
    if (st != PKV_OK) return st;
    std::unique_ptr<phasekv::Model> twin;
    if (params->control) {
      phasekv::Model::LoadOptions lo;
      lo.full_attention = true;
      phasekv::Status s = phasekv::Model::load(model->path, lo, &twin);
      if (!s.ok()) return fail(s.with_context("control"));
    }
    phasekv::SelftestGates gates;
    gates.min_acc = params->gate_min_acc;
    gates.max_gap = params->gate_max_gap;
    std::unique_ptr<pkv_selftest_report> rep(new pkv_selftest_report());
    phasekv::Status s = phasekv::run_selftest_report(*model->m, twin.get(), o, gates, &rep->r);
    if (!s.ok()) return fail(s);
    rep->digest = hex64(rep->r.run.probe_digest);
    const phasekv::GuardResult& g = rep->r.run.guard;
    if (g.requested && g.clusters >= 2)
      for (int side = 0; side < 2; ++side)
        for (const phasekv::selftest::ResidueRow& row : (side ? g.guarded : g.unguarded).residues) {
          rep->guard_rows[side][0].push_back(row.accuracy);
          rep->guard_rows[side][1].push_back(row.accuracy_ci.lo);
          rep->guard_rows[side][2].push_back(row.accuracy_ci.hi);
        }
    if (rep->r.has_control) rep->control_digest = hex64(rep->r.control.probe_digest);
    *out = rep.release();
    return PKV_OK;
  });
}

void pkv_selftest_report_free(pkv_selftest_report* report) { delete report; }

pkv_status pkv_selftest_report_overview(const pkv_selftest_report* report, pkv_selftest_overview* out) {
  PKV_CHECK_ARG(report && out, "pkv_selftest_report_overview: report and out are required");
  const phasekv::SelftestReport& r = report->r;
  const phasekv::SelftestResult& run = r.run;
  std::memset(out, 0, sizeof *out);
  out->period = run.period;
  out->period_source = run.period_source.c_str();
  out->strides = run.strides.data();
  out->n_strides = uint32_t(run.strides.size());
  out->max_local = run.max_local;
  out->min_distance = run.min_distance;
  out->n_layers = r.n_layers;
  out->n_memories = uint32_t(r.memories.size());
  out->t0 = run.t0;
  out->phase = run.period ? run.t0 % run.period : 0;
  out->prefix_tokens = run.prefix_tokens;
  out->suffix_tokens = run.suffix_tokens;
  out->flagged = run.flagged.data();
  out->n_flagged = uint32_t(run.flagged.size());
  out->probe_digest = report->digest.c_str();
  out->kernels = run.kernels.c_str();
  out->samples_per_stage = run.protocols.empty() ? 0 : run.protocols[0].clusters;
  out->targets = run.targets;
  out->n_protocols = int32_t(run.protocols.size());
  out->strongest_residue = r.advice.strongest_residue;
  out->change_needed = r.advice.change_needed ? 1 : 0;
  out->pad_tokens_before_slot = r.advice.pad_tokens_before_slot;
  out->n_advice = uint32_t(r.advice.text.size());
  out->n_complementary = uint32_t(r.advice.complementary.size());
  out->has_control = r.has_control ? 1 : 0;
  out->compression_gap = r.compression_gap;
  out->control_flagged = r.control.flagged.data();
  out->n_control_flagged = uint32_t(r.control.flagged.size());
  out->control_probe_digest = report->control_digest.c_str();
  out->n_control_memories = uint32_t(r.control_memories.size());
  out->pass = r.pass ? 1 : 0;
  out->n_gate_checks = uint32_t(r.checks.size());
  out->min_accuracy = r.min_accuracy;
  out->max_gap = r.max_gap;
  out->probes = r.probes;
  out->prefill_tokens = r.prefill_tokens;
  out->naive_prefill_tokens = r.naive_prefill_tokens;
  out->seconds = r.seconds;
  return PKV_OK;
}

pkv_status pkv_selftest_report_protocol(const pkv_selftest_report* report, int32_t control, int32_t protocol,
                                        pkv_selftest_protocol* out) {
  PKV_CHECK_ARG(out, "pkv_selftest_report_protocol: out is required");
  const phasekv::ProtocolResult* p = nullptr;
  const pkv_status st = report_protocol("pkv_selftest_report_protocol", report, control, protocol, &p);
  if (st != PKV_OK) return st;
  const phasekv::selftest::Summary& s = p->summary;
  std::memset(out, 0, sizeof *out);
  out->name = phasekv::protocol_name(p->protocol);
  out->clusters = p->clusters;
  out->probes = int64_t(2) * p->clusters * s.n_residues;
  out->mean_accuracy = s.mean_accuracy;
  out->mean_ci_lo = s.mean_bootstrap.ci.lo;
  out->mean_ci_hi = s.mean_bootstrap.ci.hi;
  out->min_accuracy = s.worst.naive_min;
  out->argmin = s.worst.naive_argmin;
  out->min_accuracy_split = s.worst.split_min;
  out->deficit = s.worst.naive_deficit;
  out->deficit_split = s.worst.split_deficit;
  out->gap = s.gap.gap;
  out->gap_null = s.gap.expected_null_gap;
  out->sd = s.gap.sd;
  out->gap_rel = s.gap.relative_gap;
  out->cochran_p = s.cochran.p;
  out->mde = s.mde;
  out->icc = s.icc;
  out->mde_empirical = s.mde_empirical;
  out->period_detected = p->period_scan.detected ? 1 : 0;
  out->detected_period = p->period_scan.period;
  out->period_p = p->period_scan.scan_p;
  out->n_period_candidates = uint32_t(p->period_scan.candidates.size());
  out->flagged = p->flagged.data();
  out->n_flagged = uint32_t(p->flagged.size());
  return PKV_OK;
}

pkv_status pkv_selftest_report_residue(const pkv_selftest_report* report, int32_t control, int32_t protocol,
                                       uint32_t residue, pkv_selftest_residue* out) {
  PKV_CHECK_ARG(out, "pkv_selftest_report_residue: out is required");
  const phasekv::ProtocolResult* p = nullptr;
  const pkv_status st = report_protocol("pkv_selftest_report_residue", report, control, protocol, &p);
  if (st != PKV_OK) return st;
  const phasekv::selftest::Summary& s = p->summary;
  if (residue >= uint32_t(s.n_residues))
    return fail(phasekv::make_error(phasekv::StatusCode::kInvalidArgument,
                                    "pkv_selftest_report_residue: residue = %u is outside [0, %d)", residue,
                                    int(s.n_residues)));
  const phasekv::selftest::ResidueRow& row = s.residues[residue];
  out->r = int32_t(residue);
  out->n = s.n_clusters * p->targets;
  out->hits = p->hits[residue];
  out->accuracy = row.accuracy;
  out->ci_lo = row.accuracy_ci.lo;
  out->ci_hi = row.accuracy_ci.hi;
  out->nll = row.nll;
  out->probability = p->probability[residue];
  out->nll_excess = row.nll_excess;
  out->loo_z = row.hit_test.z;
  out->loo_p = row.hit_test.p;
  out->holm_p = row.hit_holm_p;
  out->flagged = std::find(p->flagged.begin(), p->flagged.end(), int32_t(residue)) != p->flagged.end() ? 1 : 0;
  return PKV_OK;
}

pkv_status pkv_selftest_report_period_candidate(const pkv_selftest_report* report, int32_t control, int32_t protocol,
                                                uint32_t index, pkv_selftest_period_candidate* out) {
  PKV_CHECK_ARG(out, "pkv_selftest_report_period_candidate: out is required");
  const phasekv::ProtocolResult* p = nullptr;
  const pkv_status st = report_protocol("pkv_selftest_report_period_candidate", report, control, protocol, &p);
  if (st != PKV_OK) return st;
  if (index >= p->period_scan.candidates.size())
    return fail(phasekv::make_error(phasekv::StatusCode::kInvalidArgument,
                                    "pkv_selftest_report_period_candidate: index = %u is outside [0, %zu)", index,
                                    p->period_scan.candidates.size()));
  const phasekv::selftest::PeriodCandidate& c = p->period_scan.candidates[index];
  out->period = c.period;
  out->power = c.power;
  out->p = c.p;
  return PKV_OK;
}

pkv_status pkv_selftest_report_map(const pkv_selftest_report* report, uint32_t offset, pkv_selftest_map_entry* out) {
  PKV_CHECK_ARG(report && out, "pkv_selftest_report_map: report and out are required");
  if (offset >= report->r.map.size())
    return fail(phasekv::make_error(phasekv::StatusCode::kInvalidArgument,
                                    "pkv_selftest_report_map: offset = %u is outside [0, %zu)", offset,
                                    report->r.map.size()));
  const phasekv::TemplateMapRow& m = report->r.map[offset];
  out->offset = m.offset;
  out->residue = m.residue;
  out->weak = m.weak ? 1 : 0;
  out->accuracy = m.accuracy;
  return PKV_OK;
}

pkv_status pkv_selftest_report_complementary(const pkv_selftest_report* report, uint32_t index,
                                             pkv_selftest_complementary* out) {
  PKV_CHECK_ARG(report && out, "pkv_selftest_report_complementary: report and out are required");
  const auto& c = report->r.advice.complementary;
  if (index >= c.size())
    return fail(phasekv::make_error(phasekv::StatusCode::kInvalidArgument,
                                    "pkv_selftest_report_complementary: index = %u is outside [0, %zu)", index,
                                    c.size()));
  out->weak_residue = c[index].weak_residue;
  out->copy_offset = c[index].copy_offset;
  return PKV_OK;
}

pkv_status pkv_selftest_report_gate_check(const pkv_selftest_report* report, uint32_t index,
                                          pkv_selftest_gate_check* out) {
  PKV_CHECK_ARG(report && out, "pkv_selftest_report_gate_check: report and out are required");
  const auto& c = report->r.checks;
  if (index >= c.size())
    return fail(phasekv::make_error(phasekv::StatusCode::kInvalidArgument,
                                    "pkv_selftest_report_gate_check: index = %u is outside [0, %zu)", index,
                                    c.size()));
  out->name = c[index].name.c_str();
  out->threshold = c[index].threshold;
  out->value = c[index].value;
  out->pass = c[index].pass ? 1 : 0;
  return PKV_OK;
}

pkv_status pkv_selftest_report_guard(const pkv_selftest_report* report, pkv_selftest_guard* out) {
  PKV_CHECK_ARG(report && out, "pkv_selftest_report_guard: report and out are required");
  std::memset(out, 0, sizeof *out);
  const phasekv::GuardResult& g = report->r.run.guard;
  if (!g.requested) return PKV_OK;
  out->requested = 1;
  out->shift = g.shift;
  out->auto_shift = g.auto_shift ? 1 : 0;
  out->stage1_weak = g.stage1_weak.data();
  out->n_stage1_weak = uint32_t(g.stage1_weak.size());
  out->threshold = g.threshold;
  out->clusters = g.clusters;
  out->triggered = g.triggered;
  out->from_b = g.from_b;
  out->worst_residue = g.worst_residue;
  out->worst_gain = g.worst_gain;
  out->worst_gain_lo = g.worst_gain_ci.lo;
  out->worst_gain_hi = g.worst_gain_ci.hi;
  out->mean_gain = g.mean_gain;
  out->mean_gain_lo = g.mean_gain_ci.lo;
  out->mean_gain_hi = g.mean_gain_ci.hi;
  if (g.clusters >= 2) {
    for (int side = 0; side < 2; ++side) {
      const phasekv::selftest::Summary& sm = side ? g.guarded : g.unguarded;
      pkv_selftest_guard_side& o = side ? out->guarded : out->unguarded;
      o.accuracy = report->guard_rows[side][0].data();
      o.ci_lo = report->guard_rows[side][1].data();
      o.ci_hi = report->guard_rows[side][2].data();
      o.mean_accuracy = sm.mean_accuracy;
      o.mean_ci_lo = sm.mean_bootstrap.ci.lo;
      o.mean_ci_hi = sm.mean_bootstrap.ci.hi;
      o.min_accuracy = sm.worst.naive_min;
      o.argmin = sm.worst.naive_argmin;
      o.gap = sm.gap.gap;
    }
  }
  return PKV_OK;
}

pkv_status pkv_selftest_report_phase_profile(const pkv_selftest_report* report, pkv_phase_profile* out) {
  PKV_CHECK_ARG(report && out, "pkv_selftest_report_phase_profile: report and out are required");
  const phasekv::PhaseProfile p = phasekv::phase_profile(report->r);
  std::memset(out, 0, sizeof *out);
  out->period = p.period;
  for (size_t r = 0; r < p.accuracy.size() && r < PKV_SELFTEST_MAX_RESIDUES; ++r) out->accuracy[r] = p.accuracy[r];
  for (size_t i = 0; i < p.weak.size() && i < PKV_SELFTEST_MAX_RESIDUES; ++i) out->weak[i] = p.weak[i];
  out->n_weak = uint32_t(std::min<size_t>(p.weak.size(), PKV_SELFTEST_MAX_RESIDUES));
  out->strongest = p.strongest;
  return PKV_OK;
}

const char* pkv_selftest_report_advice(const pkv_selftest_report* report, uint32_t index) {
  if (!report || index >= report->r.advice.text.size()) return nullptr;
  return report->r.advice.text[index].c_str();
}

const char* pkv_selftest_report_memory(const pkv_selftest_report* report, int32_t control, uint32_t index) {
  if (!report || (control != 0 && control != 1)) return nullptr;
  const auto& m = control ? report->r.control_memories : report->r.memories;
  return index < m.size() ? m[index].c_str() : nullptr;
}

// ---- Phase guard ---------------------------------------------------------------------------

}  // extern "C"

namespace {
pkv_status profile_from_c(const char* fn, const pkv_phase_profile* in, phasekv::PhaseProfile* out) {
  if (in->period < 2 || in->period > PKV_SELFTEST_MAX_RESIDUES || in->n_weak > in->period)
    return fail(phasekv::make_error(phasekv::StatusCode::kInvalidArgument,
                                    "%s: profile period = %u must be in [2, %d] and n_weak = %u at most the period", fn,
                                    in->period, PKV_SELFTEST_MAX_RESIDUES, in->n_weak));
  out->period = in->period;
  out->accuracy.assign(in->accuracy, in->accuracy + in->period);
  out->weak.assign(in->weak, in->weak + in->n_weak);
  out->strongest = in->strongest;
  const phasekv::Status s = phasekv::check_phase_profile(*out);
  return s.ok() ? PKV_OK : fail(s.with_context(fn));
}
}  // namespace

extern "C" {

pkv_status pkv_phase_align_template(const pkv_model* model, const char* template_text, const pkv_phase_profile* profile,
                                    char* buf, size_t capacity, size_t* len, uint32_t* inserted_tokens) {
  PKV_CHECK_ARG(model && template_text && profile && len,
                "pkv_phase_align_template: model, template_text, profile and len are required");
  return guarded([&] {
    phasekv::PhaseProfile p;
    pkv_status st = profile_from_c("pkv_phase_align_template", profile, &p);
    if (st != PKV_OK) return st;
    phasekv::TemplateAlignment a;
    const phasekv::Status s = phasekv::align_template(model->m->tokenizer(), template_text, p, &a);
    if (!s.ok()) return fail(s.with_context("pkv_phase_align_template"));
    *len = a.text.size();
    if (!buf || a.text.size() + 1 > capacity)
      return fail(PKV_ERR_INVALID_ARGUMENT, "pkv_phase_align_template: capacity is smaller than *len + 1");
    std::memcpy(buf, a.text.c_str(), a.text.size() + 1);
    if (inserted_tokens) *inserted_tokens = a.inserted_tokens;
    return PKV_OK;
  });
}

pkv_phase_guard_params pkv_phase_guard_default_params(void) {
  const phasekv::PhaseGuardParams g;
  return pkv_phase_guard_params{g.shift, g.threshold};
}

pkv_status pkv_phase_guard_init(const pkv_model* model, const pkv_context_params* context_params_in,
                                const char* template_text, const pkv_phase_profile* profile,
                                const pkv_phase_guard_params* params, pkv_phase_guard** out) {
  PKV_CHECK_ARG(model && context_params_in && template_text && profile && out,
                "pkv_phase_guard_init: model, context_params, template_text, profile and out are required");
  *out = nullptr;
  return guarded([&] {
    phasekv::ContextParams cp;
    pkv_status st = context_params("pkv_phase_guard_init", context_params_in, &cp);
    if (st != PKV_OK) return st;
    phasekv::PhaseProfile p;
    st = profile_from_c("pkv_phase_guard_init", profile, &p);
    if (st != PKV_OK) return st;
    phasekv::PhaseGuardParams gp;
    if (params) {
      gp.shift = params->shift;
      gp.threshold = params->threshold;
    }
    std::unique_ptr<pkv_phase_guard> g(new pkv_phase_guard());
    const phasekv::Status s = phasekv::PhaseGuard::create(*model->m, cp, template_text, p, gp, &g->g);
    if (!s.ok()) return fail(s.with_context("pkv_phase_guard_init"));
    *out = g.release();
    return PKV_OK;
  });
}

void pkv_phase_guard_free(pkv_phase_guard* guard) { delete guard; }

pkv_status pkv_phase_guard_start(pkv_phase_guard* guard, const int32_t* content, size_t n, int32_t* was_guarded) {
  PKV_CHECK_ARG(guard && (content || n == 0), "pkv_phase_guard_start: guard is required, and content when n > 0");
  return guarded([&] {
    const phasekv::Status s = guard->g->start(content, n);
    if (!s.ok()) return fail(s);
    if (was_guarded) *was_guarded = guard->g->stats().guarded ? 1 : 0;
    return PKV_OK;
  });
}

const float* pkv_phase_guard_logits(const pkv_phase_guard* guard) { return guard ? guard->g->logits() : nullptr; }

pkv_status pkv_phase_guard_accept(pkv_phase_guard* guard, int32_t token) {
  PKV_CHECK_ARG(guard, "pkv_phase_guard_accept: guard is NULL");
  return guarded([&] {
    const phasekv::Status s = guard->g->accept(token);
    return s.ok() ? PKV_OK : fail(s);
  });
}

uint32_t pkv_phase_guard_room(const pkv_phase_guard* guard) { return guard ? guard->g->room() : 0; }

pkv_status pkv_phase_guard_stats_get(const pkv_phase_guard* guard, pkv_phase_guard_stats* out) {
  PKV_CHECK_ARG(guard && out, "pkv_phase_guard_stats_get: guard and out are required");
  const phasekv::PhaseGuardStats& st = guard->g->stats();
  out->guarded = st.guarded ? 1 : 0;
  out->first_top_p = st.first_top_p;
  out->shift = st.shift;
  out->prefill_a = st.prefill_a;
  out->prefill_b = st.prefill_b;
  out->steps = st.steps;
  out->steps_b = st.steps_b;
  return PKV_OK;
}

}  // extern "C"
