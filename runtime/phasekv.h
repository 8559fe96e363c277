/*
 * phasekv.h: the C API of PhaseKV, for applications that embed the runtime.
 *
 * Conventions
 *   - Opaque handles, created by pkv_*_init / pkv_model_load and released by the matching
 *     pkv_*_free (free(NULL) is a no-op). A context and a sampler must be freed before the
 *     model they were made from. One model may serve many contexts; a context must not be
 *     used from two threads at once.
 *   - Every fallible call returns a pkv_status. On failure, pkv_last_error() gives a message
 *     naming the argument or field at fault (per thread, valid until the next failing call
 *     on that thread), and output parameters are left untouched unless documented.
 *   - What remains after an error: a failed *_init/_load creates nothing; a failed
 *     pkv_prefill/pkv_decode changes nothing (the context keeps its tokens and logits and
 *     stays usable); a failed pkv_tokenize writes no tokens.
 *   - No exceptions cross this API; nothing here calls exit().
 */
#ifndef PHASEKV_H
#define PHASEKV_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum pkv_status {
  PKV_OK = 0,
  PKV_ERR_INVALID_ARGUMENT = 1, /* an argument is out of range or malformed */
  PKV_ERR_INVALID_FILE = 2,     /* a model file is corrupt or inconsistent */
  PKV_ERR_UNSUPPORTED = 3,      /* well-formed input this build does not handle */
  PKV_ERR_IO = 4,               /* open / read / map failed */
  PKV_ERR_OUT_OF_MEMORY = 5,    /* an allocation failed */
  PKV_ERR_BUDGET_EXCEEDED = 6,  /* the memory plan exceeds the configured budget */
  PKV_ERR_INTERNAL = 7,         /* a bug in PhaseKV */
  PKV_ERR_CANCELLED = 8         /* a progress callback asked the operation to stop */
} pkv_status;

typedef struct pkv_model pkv_model;
typedef struct pkv_context pkv_context;
typedef struct pkv_sampler pkv_sampler;
typedef struct pkv_detokenizer pkv_detokenizer;

/* Message of the last failing call on this thread ("" if none). */
const char* pkv_last_error(void);
/* Name of a status code, e.g. "invalid argument". */
const char* pkv_status_string(pkv_status status);
/* The library's version, "MAJOR.MINOR.PATCH" (the installed package's; the shared library's
 * SONAME is libphasekv.so.MAJOR.MINOR while MAJOR is 0). */
const char* pkv_version_string(void);
/* Whether this build of the library has the CUDA backend (1) or is CPU-only (0). */
int pkv_has_cuda(void);

/* ---- Model ---------------------------------------------------------------------------- */

/* Maps and verifies a .pkv file. *out receives the model (caller frees with pkv_model_free).
 * The same as pkv_model_load_with_params with pkv_model_default_params(). */
pkv_status pkv_model_load(const char* path, pkv_model** out);

typedef struct pkv_model_params {
  int32_t use_mmap; /* 1: map the file and use the weights in place (default). The file must then
                       not change while the model is loaded: to update a model, write the new
                       file elsewhere and rename it over the old one (an in-place copy changes the
                       weights under the running process; a truncation kills it with SIGBUS).
                       0: read the file into memory the model owns (the file's size in RAM); the
                       file may then be replaced or deleted freely. Refused with
                       PKV_ERR_OUT_OF_MEMORY when the file exceeds the memory still available. */
  int32_t verify;   /* 1: check the tensor data against the content hash the converter wrote:
                       PKV_ERR_INVALID_FILE when they differ (the file changed after conversion),
                       PKV_ERR_UNSUPPORTED for a file without a hash. One pass over the weights.
                       (default 0) */
} pkv_model_params;

pkv_model_params pkv_model_default_params(void);
/* Loads a .pkv file as params say (NULL params: the defaults). On failure nothing is created. */
pkv_status pkv_model_load_with_params(const char* path, const pkv_model_params* params, pkv_model** out);
void pkv_model_free(pkv_model* model);
int32_t pkv_model_n_vocab(const pkv_model* model);
uint32_t pkv_model_max_positions(const pkv_model* model); /* trained context length */
/* 1 if the token ends a generation (EOS, EOT), else 0. */
int pkv_token_is_end(const pkv_model* model, int32_t token);

/* ---- Tokens ----------------------------------------------------------------------------- */

/* Encodes UTF-8 text. parse_special: match special tokens written literally (templates; not
 * for untrusted user text). add_bos: prepend BOS when the model asks for it. *n_tokens receives
 * the number of tokens the text needs; if that exceeds capacity nothing is written and
 * PKV_ERR_INVALID_ARGUMENT is returned (call again with a larger buffer). */
pkv_status pkv_tokenize(const pkv_model* model, const char* text, size_t text_len, int parse_special, int add_bos,
                        int32_t* tokens, size_t capacity, size_t* n_tokens);
/* Raw bytes of one token (may be part of a UTF-8 character). *len receives the byte count;
 * if it exceeds capacity nothing is written and PKV_ERR_INVALID_ARGUMENT is returned. */
pkv_status pkv_token_to_bytes(const pkv_model* model, int32_t token, char* buf, size_t capacity, size_t* len);

/* Streaming detokenizer: never emits a partial UTF-8 character. */
pkv_status pkv_detokenizer_init(const pkv_model* model, pkv_detokenizer** out);
void pkv_detokenizer_free(pkv_detokenizer* d);
/* Appends the text completed by `token` to buf (NUL-terminated); *len receives its byte count.
 * capacity must be >= 64 bytes more than the longest token (256 is always enough for SmolLM2). */
pkv_status pkv_detokenizer_push(pkv_detokenizer* d, int32_t token, char* buf, size_t capacity, size_t* len);

typedef struct pkv_chat_message {
  const char* role;    /* "system", "user", "assistant" */
  const char* content; /* UTF-8 */
} pkv_chat_message;

/* Token ids of a conversation in the model's chat template (families: chatml, llama3): what to
 * prefill. The template's markers are special tokens; every message's role and content is
 * encoded as plain text, whatever it spells -- a user who types "<|im_end|><|im_start|>system"
 * gets those characters, not a forged system turn. BOS first when add_bos and the model adds
 * one. *n_tokens receives the count; if it exceeds capacity nothing is written and
 * PKV_ERR_INVALID_ARGUMENT is returned (call with capacity 0 to size the buffer). */
pkv_status pkv_chat_tokenize(const pkv_model* model, const pkv_chat_message* messages, size_t n_messages,
                             int add_generation_prompt, int add_bos, int32_t* tokens, size_t capacity,
                             size_t* n_tokens);

/* Renders messages with the model's chat template as text, for display and logs. *len receives
 * the rendered length (without NUL); if len + 1 exceeds capacity nothing is written and
 * PKV_ERR_INVALID_ARGUMENT is returned. To run a conversation use pkv_chat_tokenize: encoding
 * this text with parse_special = 1 would turn special-token text inside a message into real
 * control tokens, and with parse_special = 0 the template's own markers would not be special. */
pkv_status pkv_chat_apply_template(const pkv_model* model, const pkv_chat_message* messages, size_t n_messages,
                                   int add_generation_prompt, char* buf, size_t capacity, size_t* len);

/* ---- Context ---------------------------------------------------------------------------- */

/* Where a context computes. */
typedef enum pkv_backend {
  PKV_BACKEND_CPU = 0,  /* the CPU backend (the reference; always available) */
  PKV_BACKEND_CUDA = 1, /* the CUDA backend; pkv_context_init fails with PKV_ERR_UNSUPPORTED
                           when the build or the machine has none */
  PKV_BACKEND_AUTO = 2  /* CUDA when this build has it and a device is present, else the CPU */
} pkv_backend;

typedef struct pkv_context_params {
  uint32_t n_ctx;    /* maximum tokens in the context, 1..max_positions (default 2048) */
  uint32_t n_batch;  /* prefill chunk in tokens, >= 1, capped at n_ctx (default 256) */
  int32_t n_threads; /* CPU threads, >= 1 (default: hardware threads); 0 is an error */
  uint64_t memory_budget; /* bytes the context may allocate; 0 = no limit (default). Over it,
                             pkv_context_init fails with PKV_ERR_BUDGET_EXCEEDED and the itemised
                             plan in pkv_last_error() */
  int32_t backend;   /* a pkv_backend (default PKV_BACKEND_CPU) */
  int32_t device;    /* CUDA device ordinal (default 0) */
} pkv_context_params;

pkv_context_params pkv_context_default_params(void);
/* Plans and allocates all of the context's memory now; prefill/decode allocate nothing. */
pkv_status pkv_context_init(const pkv_model* model, const pkv_context_params* params, pkv_context** out);
void pkv_context_free(pkv_context* ctx);
/* Appends and evaluates n tokens (n >= 1); pkv_logits then holds the last token's logits. */
pkv_status pkv_prefill(pkv_context* ctx, const int32_t* tokens, size_t n);
/* Appends and evaluates one token. */
pkv_status pkv_decode(pkv_context* ctx, int32_t token);
/* Logits of the last evaluated token: n_vocab floats, owned by ctx, valid until the next call. */
const float* pkv_logits(const pkv_context* ctx);
uint32_t pkv_context_n_past(const pkv_context* ctx);
/* Forgets all tokens (memory stays allocated). */
void pkv_context_reset(pkv_context* ctx);
/* Bytes the context allocated at init (its whole arena: attention memories, scratch). */
uint64_t pkv_context_memory_bytes(const pkv_context* ctx);

/* Snapshots: the context's state (tokens so far, attention memories, logits) copied into a
 * caller buffer of pkv_context_snapshot_size() bytes; pkv_context_restore() puts it back into
 * any context of the same model file with room for its tokens, which then continues
 * bit-identically. A failed restore changes nothing. */
size_t pkv_context_snapshot_size(const pkv_context* ctx);
pkv_status pkv_context_snapshot(const pkv_context* ctx, void* buf, size_t capacity, size_t* written);
pkv_status pkv_context_restore(pkv_context* ctx, const void* buf, size_t size);

/* ---- Sampler ---------------------------------------------------------------------------- */

typedef struct pkv_sampler_params {
  float temperature;      /* >= 0; 0: greedy (default 0.8); negative or NaN: PKV_ERR_INVALID_ARGUMENT */
  int32_t top_k;          /* 0 = off (default 40) */
  float top_p;            /* (0, 1]; 1 = off (default 0.95) */
  float min_p;            /* [0, 1]; 0 = off (default 0.05) */
  float repeat_penalty;   /* > 0; 1 = off (default 1.0) */
  int32_t repeat_last_n;  /* tokens the penalty looks back, 0..1048576 (default 64; the history is
                             allocated at init, 4 bytes a token) */
  uint64_t seed;          /* same seed, same tokens (default 0) */
} pkv_sampler_params;

pkv_sampler_params pkv_sampler_default_params(void);
pkv_status pkv_sampler_init(const pkv_model* model, const pkv_sampler_params* params, pkv_sampler** out);
void pkv_sampler_free(pkv_sampler* s);
/* Samples from the context's current logits. */
pkv_status pkv_sampler_sample(pkv_sampler* s, const pkv_context* ctx, int32_t* token);
/* Samples from a logits row of n_vocab floats (e.g. pkv_phase_guard_logits). */
pkv_status pkv_sampler_sample_logits(pkv_sampler* s, const float* logits, int32_t* token);
/* Records a token for the repetition penalty. */
void pkv_sampler_accept(pkv_sampler* s, int32_t token);

/* ---- Phase self-test -------------------------------------------------------------------- */

#define PKV_SELFTEST_MAX_RESIDUES 256

/* Where a self-test run is, passed to pkv_selftest_params.progress after each probe. */
typedef struct pkv_selftest_progress {
  int64_t done, total;       /* probes of the current run (the control counts its own) */
  double elapsed_s, eta_s;
  const char* phase;         /* "outer, stage 1", "in-sequence, stage 2", ... (static) */
  int32_t control;           /* 1 while the full-attention control runs */
} pkv_selftest_progress;
/* Return 0 to go on, nonzero to stop: the call then fails with PKV_ERR_CANCELLED and gives no
 * result. Called on the caller's thread inside the probe loop: keep it short (no allocation,
 * no PhaseKV calls). */
typedef int (*pkv_selftest_progress_fn)(const pkv_selftest_progress* progress, void* user_data);

typedef struct pkv_selftest_params {
  const char* template_text; /* exactly one {{content}} slot; NULL = the bare slot */
  int32_t chat;              /* 1: the model's chat template with the probe as the user message */
  uint32_t probe_tokens;     /* tokens per probe (default 512) */
  int32_t samples;           /* clusters per stage and protocol (default 16; 0 with budget_s > 0) */
  double budget_s;           /* wall-time budget instead of samples (0 = none) */
  uint64_t seed;             /* probe content (default 1) */
  int32_t period;            /* override P (0 = lcm of the compressed strides) */
  double delta;              /* practical margin of a weak residue (default 0.10) */
  double alpha;              /* false-alarm probability per run (default 0.05) */
  int32_t n_threads;         /* CPU threads (default: hardware threads) */
  uint32_t records;          /* key = value records per probe, >= 8 (default 16); the rest is filler */
  int32_t backend;           /* a pkv_backend the probes run on (default PKV_BACKEND_CPU) */
  int32_t device;            /* CUDA device ordinal (default 0) */
  pkv_selftest_progress_fn progress; /* NULL: none (default) */
  void* progress_user_data;
  /* pkv_selftest_run_report only: */
  int32_t control;           /* 1: also run the model's full-attention twin on exactly the same probes */
  double gate_min_acc;       /* the gate fails when a residue's accuracy is below this; < 0: no check (default -1) */
  double gate_max_gap;       /* the gate fails when max - min accuracy exceeds this; < 0: no check (default -1) */
  uint32_t targets;          /* records looked up per probe, 1..64 (default: the tool's --targets default) */
  int32_t guard;             /* pkv_selftest_run_report: also score the phase guard on the outer probes
                                (pkv_selftest_report_guard): -1 off (default); 0 auto: the shift is chosen
                                on stage 1 and scored on stage 2; g > 0: that shift, both stages */
  double guard_threshold;    /* the guard's trigger: guarded when the top probability is below this (default 1) */
} pkv_selftest_params;

typedef struct pkv_selftest_result {
  uint32_t period;           /* P */
  uint32_t t0;               /* slot start token; template phase = t0 % period */
  uint32_t n_flagged;        /* weak residues (both protocols) */
  int32_t flagged[PKV_SELFTEST_MAX_RESIDUES];
  /* [0] outer padding, [1] in-sequence padding; residues 0..period-1 */
  double accuracy[2][PKV_SELFTEST_MAX_RESIDUES];
  double ci_lo[2][PKV_SELFTEST_MAX_RESIDUES]; /* Wilson 95 % */
  double ci_hi[2][PKV_SELFTEST_MAX_RESIDUES];
  double mean_accuracy[2];
  double min_accuracy[2];
  double gap[2];             /* max - min over residues */
  int64_t probes;
  int64_t prefill_tokens;    /* tokens evaluated (shared prefixes reused through snapshots) */
  int64_t naive_prefill_tokens;
  double seconds;
} pkv_selftest_result;

pkv_selftest_params pkv_selftest_default_params(void);
/* Runs the self-test on `model` in contexts of its own (a deployed context is not touched). */
pkv_status pkv_selftest_run(const pkv_model* model, const pkv_selftest_params* params, pkv_selftest_result* out);

/* ---- The self-test's full report: what `phasekv selftest --json` writes, field for field ----
 * pkv_selftest_run_report runs the self-test (and the control when params->control), builds
 * the template map, the padding and complementary-phase advice and the gate verdict, and
 * hands back a report read through the accessors below. Strings and arrays they return point
 * into the report and stay valid until pkv_selftest_report_free. `control` selects the
 * control run's statistics (1) or the model's (0); `protocol` indexes the protocols run, in
 * the order outer, in_sequence. An index out of range is PKV_ERR_INVALID_ARGUMENT. */
typedef struct pkv_selftest_report pkv_selftest_report;

typedef struct pkv_selftest_overview {
  uint32_t period;              /* P */
  const char* period_source;    /* "strides", "override" or "scan" */
  const uint32_t* strides;      /* the compressed layers' distinct strides, ascending */
  uint32_t n_strides;
  uint32_t max_local;           /* the largest local window */
  uint32_t min_distance;        /* target-to-query distance used */
  uint32_t n_layers;
  uint32_t n_memories;          /* pkv_selftest_report_memory(r, 0, i) */
  uint32_t t0;                  /* slot start token */
  uint32_t phase;               /* t0 % period */
  uint32_t prefix_tokens, suffix_tokens;
  const int32_t* flagged;       /* weak residues over both protocols, ascending */
  uint32_t n_flagged;
  const char* probe_digest;     /* 16 hex digits */
  const char* kernels;          /* CPU kernels the probes ran with */
  int32_t samples_per_stage;
  uint32_t targets;             /* records looked up per probe */
  int32_t n_protocols;
  /* padding advice (the map: pkv_selftest_report_map; sentences: pkv_selftest_report_advice) */
  uint32_t strongest_residue;
  int32_t change_needed;        /* 1 only when some residue is weak and the slot is not on the strongest */
  uint32_t pad_tokens_before_slot;
  uint32_t n_advice;
  uint32_t n_complementary;     /* pkv_selftest_report_complementary */
  /* control */
  int32_t has_control;
  double compression_gap;       /* control minus model, mean accuracy averaged over protocols */
  const int32_t* control_flagged;
  uint32_t n_control_flagged;
  const char* control_probe_digest; /* "" without a control */
  uint32_t n_control_memories;
  /* gates */
  int32_t pass;                 /* every gate check passed (1 without gates) */
  uint32_t n_gate_checks;
  double min_accuracy;          /* lowest residue accuracy over the protocols */
  double max_gap;               /* largest max - min over the protocols */
  /* totals over the run and the control */
  int64_t probes, prefill_tokens, naive_prefill_tokens;
  double seconds;
} pkv_selftest_overview;

typedef struct pkv_selftest_protocol {
  const char* name;             /* "outer" or "in_sequence" */
  int32_t clusters;             /* samples per stage */
  int64_t probes;
  double mean_accuracy, mean_ci_lo, mean_ci_hi; /* cluster-bootstrap interval */
  double min_accuracy;          /* A_min */
  int32_t argmin;
  double min_accuracy_split;    /* split-sample A_min */
  double deficit, deficit_split;
  double gap, gap_null, sd, gap_rel;
  double cochran_p, mde, icc;
  double mde_empirical;         /* the MDE from the data's variance (no delta floor) */
  int32_t period_detected, detected_period;
  double period_p;
  uint32_t n_period_candidates;
  const int32_t* flagged;
  uint32_t n_flagged;
} pkv_selftest_protocol;

typedef struct pkv_selftest_residue {
  int32_t r, n, hits;
  double accuracy, ci_lo, ci_hi; /* Wilson 95 % */
  double nll, probability, nll_excess;
  double loo_z, loo_p, holm_p;
  int32_t flagged;
} pkv_selftest_residue;

typedef struct pkv_selftest_period_candidate {
  int32_t period;
  double power, p;
} pkv_selftest_period_candidate;

typedef struct pkv_selftest_map_entry {
  uint32_t offset, residue;     /* content at offset (from the slot start) lands on residue */
  int32_t weak;
  double accuracy;              /* averaged over protocols */
} pkv_selftest_map_entry;

typedef struct pkv_selftest_complementary {
  int32_t weak_residue;
  uint32_t copy_offset;         /* a copy this many tokens later lands on the strongest residue */
} pkv_selftest_complementary;

typedef struct pkv_selftest_gate_check {
  const char* name;             /* "min_acc" or "max_gap" */
  double threshold, value;
  int32_t pass;
} pkv_selftest_gate_check;

pkv_status pkv_selftest_run_report(const pkv_model* model, const pkv_selftest_params* params,
                                   pkv_selftest_report** out);
void pkv_selftest_report_free(pkv_selftest_report* report);
pkv_status pkv_selftest_report_overview(const pkv_selftest_report* report, pkv_selftest_overview* out);
pkv_status pkv_selftest_report_protocol(const pkv_selftest_report* report, int32_t control, int32_t protocol,
                                        pkv_selftest_protocol* out);
pkv_status pkv_selftest_report_residue(const pkv_selftest_report* report, int32_t control, int32_t protocol,
                                       uint32_t residue, pkv_selftest_residue* out);
pkv_status pkv_selftest_report_period_candidate(const pkv_selftest_report* report, int32_t control, int32_t protocol,
                                                uint32_t index, pkv_selftest_period_candidate* out);
pkv_status pkv_selftest_report_map(const pkv_selftest_report* report, uint32_t offset, pkv_selftest_map_entry* out);
pkv_status pkv_selftest_report_complementary(const pkv_selftest_report* report, uint32_t index,
                                             pkv_selftest_complementary* out);
pkv_status pkv_selftest_report_gate_check(const pkv_selftest_report* report, uint32_t index,
                                          pkv_selftest_gate_check* out);
/* The phase guard scored on the probes (params.guard >= 0): both sides on the same samples. */
typedef struct pkv_selftest_guard_side {
  const double* accuracy;       /* [period] per residue */
  const double* ci_lo;          /* [period] Wilson 95 % */
  const double* ci_hi;
  double mean_accuracy, mean_ci_lo, mean_ci_hi; /* cluster-bootstrap interval */
  double min_accuracy;
  int32_t argmin;
  double gap;                   /* max - min */
} pkv_selftest_guard_side;

typedef struct pkv_selftest_guard {
  int32_t requested;            /* 0: the run had no guard (the rest is zero) */
  uint32_t shift;               /* 0: inactive (auto found no weak residue in stage 1) */
  int32_t auto_shift;           /* 1: chosen on stage 1, scored on stage 2 */
  const int32_t* stage1_weak;   /* auto: the residues the shift was chosen for */
  uint32_t n_stage1_weak;
  double threshold;
  int32_t clusters;             /* samples scored */
  double triggered;             /* share of lookups guarded */
  double from_b;                /* share of lookups answered by the shifted branch */
  int32_t worst_residue;        /* the unguarded worst residue */
  double worst_gain, worst_gain_lo, worst_gain_hi; /* paired gain there, cluster-bootstrap 95 % */
  double mean_gain, mean_gain_lo, mean_gain_hi;    /* paired gain over all residues */
  pkv_selftest_guard_side unguarded, guarded; /* valid when clusters >= 2 */
} pkv_selftest_guard;

pkv_status pkv_selftest_report_guard(const pkv_selftest_report* report, pkv_selftest_guard* out);
/* The i-th advice sentence / layer-run description ("0-19: full"); NULL past the end. */
const char* pkv_selftest_report_advice(const pkv_selftest_report* report, uint32_t index);
const char* pkv_selftest_report_memory(const pkv_selftest_report* report, int32_t control, uint32_t index);

/* ---- Phase guard: acting on a self-test report ------------------------------------------
 * (phase_guard.h.) Alignment inserts neutral tokens before a template's {{content}} slot so
 * content starts on the strongest residue (verified by re-tokenizing). The guard evaluates a
 * request's content at its own phase and shifted onto complementary phases, and takes each
 * next token from the more confident branch; both branches then consume it. */

typedef struct pkv_phase_profile {
  uint32_t period;                              /* P, 2..256 */
  double accuracy[PKV_SELFTEST_MAX_RESIDUES];   /* [period] per residue, in [0, 1] */
  int32_t weak[PKV_SELFTEST_MAX_RESIDUES];      /* flagged residues */
  uint32_t n_weak;
  uint32_t strongest;                           /* the strongest residue */
} pkv_phase_profile;

/* The profile of a report (accuracies averaged over its protocols, its flags, its advice). */
pkv_status pkv_selftest_report_phase_profile(const pkv_selftest_report* report, pkv_phase_profile* out);

/* Writes the aligned template (NUL-terminated) to buf; *len receives its length without the
 * NUL (if len + 1 exceeds capacity nothing is written and PKV_ERR_INVALID_ARGUMENT is
 * returned) and *inserted_tokens (may be NULL) the tokens inserted before the slot (0: the
 * template is returned unchanged: no weak residue, or already aligned). PKV_ERR_UNSUPPORTED
 * when no neutral text aligns it. */
pkv_status pkv_phase_align_template(const pkv_model* model, const char* template_text, const pkv_phase_profile* profile,
                                    char* buf, size_t capacity, size_t* len, uint32_t* inserted_tokens);

typedef struct pkv_phase_guard pkv_phase_guard;

typedef struct pkv_phase_guard_params {
  uint32_t shift;      /* extra neutral tokens before branch B's content; 0: from the profile (default) */
  double threshold;    /* guard a request when branch A's first top probability is below this: > 1 always,
                          0 never (default 1) */
} pkv_phase_guard_params;

typedef struct pkv_phase_guard_stats {
  int32_t guarded;           /* the last request ran both branches */
  double first_top_p;        /* branch A's first top probability (the trigger's input) */
  uint32_t shift;
  int64_t prefill_a, prefill_b; /* tokens prefilled per branch for the request (B's are the extra cost) */
  int64_t steps, steps_b;    /* tokens accepted; how many came from branch B */
} pkv_phase_guard_stats;

pkv_phase_guard_params pkv_phase_guard_default_params(void);
/* Plans two contexts (context params as for pkv_context_init; n_ctx holds the template, the
 * shift, the content and the generation) and prefills the template's prefix once. The guard
 * allocates nothing after this call. */
pkv_status pkv_phase_guard_init(const pkv_model* model, const pkv_context_params* context_params,
                                const char* template_text, const pkv_phase_profile* profile,
                                const pkv_phase_guard_params* params, pkv_phase_guard** out);
void pkv_phase_guard_free(pkv_phase_guard* guard);
/* A request: content token ids (encode untrusted text with parse_special = 0). *guarded (may be
 * NULL) says whether both branches run. On failure the guard stays ready for the next request. */
pkv_status pkv_phase_guard_start(pkv_phase_guard* guard, const int32_t* content, size_t n, int32_t* guarded);
/* The next token's logits (the more confident branch's), n_vocab floats, valid until the next call. */
const float* pkv_phase_guard_logits(const pkv_phase_guard* guard);
/* Appends the chosen token to every running branch. */
pkv_status pkv_phase_guard_accept(pkv_phase_guard* guard, int32_t token);
/* Tokens that still fit in the fuller branch. */
uint32_t pkv_phase_guard_room(const pkv_phase_guard* guard);
pkv_status pkv_phase_guard_stats_get(const pkv_phase_guard* guard, pkv_phase_guard_stats* out);

#ifdef __cplusplus
}
#endif

#endif /* PHASEKV_H */
