// The on-device phase self-test (DESIGN.md section 6; research/evaluation.md section 5).
//
// Given a model and the deployed prompt template (one {{content}} slot), it builds key:value
// retrieval probes at token level from the model's own vocabulary, sweeps the target through
// every residue r = (token position mod P) with two padding protocols, scores each probe by
// the gold value's probability (teacher forced) and a greedy hit, and reports per-residue
// accuracy with honest error bars, the residues it flags as weak (two-stage test with a
// stated false-alarm rate), and where the template puts content relative to them.
//
// It runs in its own contexts (never a deployed one), plans all memory before the probe loop
// and reuses shared prefixes through snapshots.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "backends.h"
#include "model.h"
#include "selftest_stats.h"

namespace phasekv {

// ---- template ------------------------------------------------------------------------------

constexpr const char* kContentSlot = "{{content}}";

// A template split at its slot and tokenized with the model's tokenizer (specials written
// literally are parsed as specials; BOS is prepended when the tokenizer adds one).
struct ProbeTemplate {
  std::string prefix_text, suffix_text;
  std::vector<int32_t> prefix;  // tokens before the slot: the slot starts at t0 = prefix.size()
  std::vector<int32_t> suffix;  // tokens after the slot
};

// Errors (kInvalidArgument): no slot, more than one slot, a slot inside a special token,
// text that is not UTF-8.
Status parse_template(const Tokenizer& tok, const std::string& text, ProbeTemplate* out);
// The model's own chat template with the probe as the user message (and the generation
// prompt after it), as template text with a slot.
Status chat_probe_template(const Model& model, std::string* text);

// ---- probes ----------------------------------------------------------------------------------

enum class Protocol : uint8_t {
  Outer = 0,       // the whole content shifts by s pad tokens; slack before the query shrinks
  InSequence = 1,  // only the target record shifts: s pads before it, 2P-2-s after it (kept
                   // inside the neighbouring lines, so every record still follows a newline)
};
const char* protocol_name(Protocol p);

// Token material for probes, chosen from the vocabulary and checked to round-trip.
struct ProbeVocab {
  std::vector<int32_t> keys;    // single-token words (" apple")
  std::vector<int32_t> values;  // single-token words, disjoint from keys
  int32_t sep = -1;             // ":"
  int32_t newline = -1;         // "\n"
  int32_t pad = -1;             // neutral padding token that never merges (" -")
  // Filler lines (without their newline): neutral sentences (" The bus was late again."),
  // each checked to keep its ids between newlines and after pads.
  std::vector<std::vector<int32_t>> sentences;
};
// Collects at least `per_side` (and 64) keys and as many values, and the filler sentences
// that survive the round-trip checks (at least 8, one of them at most 3 tokens long).
Status build_probe_vocab(const Tokenizer& tok, size_t per_side, ProbeVocab* out);

// One probe: the ids to evaluate (ending with the answer prefix "<key>:"), the gold value,
// and where the target sits.
struct Probe {
  std::vector<int32_t> ids;
  int32_t gold = -1;
  uint32_t value_pos = 0;   // position of the target's value token
  uint32_t key_pos = 0;     // position of the target's key token
  uint32_t shared = 0;      // leading tokens shared by every probe of its cluster
  int32_t residue = 0;      // value_pos mod P
  int32_t shift = 0;        // s
};

struct ProbeLayout {
  uint32_t period = 8;      // P
  uint32_t length = 512;    // tokens per probe (the query position is length - 1)
  uint32_t records = 16;    // key = value records per probe (fewer when they do not fit)
  uint32_t min_distance = 32;  // the target value lies at least this far before the query
  Protocol protocol = Protocol::InSequence;
};

// How many records a probe of this layout holds: min(layout.records, what fits); the rest of
// the probe is filler sentences. kInvalidArgument, with the arithmetic, when the template, the
// padding and the target's distance from the query leave no room for 8 records.
Status probe_records(const ProbeTemplate& t, const ProbeLayout& layout, uint32_t* n_records);

// The P probes of logical sample `cluster`: shifts s = b..b+P-1 (every residue once), b in
// [0, P) chosen so that shift b puts the target value on residue (cluster mod P). Over any P
// consecutive samples each residue's mean target position is then the same: position(r) =
// base + ((r - cluster) mod P), and the second term sums to P(P-1)/2 for every r.
// Deterministic for (seed, cluster).
Status make_cluster(const ProbeTemplate& t, const ProbeVocab& v, const ProbeLayout& layout, uint64_t seed,
                    int32_t cluster, std::vector<Probe>* out);

// ---- the run -------------------------------------------------------------------------------

struct SelftestProgress {
  int64_t done = 0, total = 0;  // probes
  double elapsed_s = 0, eta_s = 0;
  const char* phase = "";       // "outer stage 1", ...
};

struct SelftestOptions {
  std::string template_text = "{{content}}";
  std::string template_label = "{{content}}";  // for the report: a path, or "chat"
  uint32_t probe_tokens = 512;  // probe length (the context holds exactly one probe)
  uint32_t records = 16;        // key = value records per probe (at least 8), the rest filler
  int32_t samples = 0;          // clusters per stage and protocol; 0: from the budget, else 16
  double budget_s = 0;          // wall-time budget for the whole run; 0: none
  uint64_t seed = 1;
  int32_t period = 0;           // override P; 0: lcm of the compressed strides (or a scan)
  double delta = 0.10;          // practical margin of a weak residue (accuracy)
  double alpha = 0.05;          // false-alarm probability of one run (both protocols together)
  bool outer = true, in_sequence = true;
  int n_threads = 1;
  uint32_t n_batch = 256;
  BackendKind backend = BackendKind::Cpu;  // where the probes run (scored on that backend)
  std::string kernels;                     // CPU kernel spec (ContextParams::kernels); empty: $PHASEKV_KERNELS / reference
  int device = 0;                          // CUDA device ordinal
  // Target-to-query distance; 0: the model's largest local window + P + 4. --control sets the
  // compressed run's value so that the full-attention twin sees exactly the same probes.
  uint32_t min_distance = 0;
  // Build and check every probe (re-tokenization included) and fill probes, probe_digest and
  // the naive token count, but evaluate nothing. Needs samples > 0.
  bool plan_only = false;
  std::function<void(const SelftestProgress&)> progress;  // optional, called after each probe
};

struct ProtocolResult {
  Protocol protocol = Protocol::InSequence;
  int32_t clusters = 0;                 // per stage
  selftest::Observations stage1, stage2;
  selftest::Summary summary;            // both stages pooled
  selftest::Screening screening;        // stage 1
  selftest::Confirmation confirmation;  // stage 2
  selftest::PeriodScan period_scan;     // per-residue curve
  std::vector<int32_t> flagged;
};

struct SelftestResult {
  uint32_t period = 0;
  std::string period_source;            // "strides", "override", "scan"
  std::vector<uint32_t> strides;
  uint32_t max_local = 0;
  uint32_t min_distance = 0;            // as used (see SelftestOptions::min_distance)
  uint64_t probe_digest = 0;            // FNV-1a over every probe's ids in run order
  uint32_t t0 = 0;
  uint32_t prefix_tokens = 0, suffix_tokens = 0;
  std::vector<ProtocolResult> protocols;
  std::vector<int32_t> flagged;         // union over protocols
  int64_t probes = 0;
  int64_t prefill_tokens = 0, naive_prefill_tokens = 0;
  double seconds = 0;
  std::string kernels;
};

// Runs the self-test on `model` in contexts of its own. Errors: bad template, a context too
// small for the probe design, period 1, ... (kInvalidArgument, with the reason).
Status run_selftest(const Model& model, const SelftestOptions& opts, SelftestResult* out);

// The model's phase period: the lcm of its compressed layers' strides (their distinct strides,
// ascending, in *strides), 1 when no layer is compressed. kUnsupported above 4096.
Status phase_period(const ModelSpec& spec, uint32_t* period, std::vector<uint32_t>* strides);

}  // namespace phasekv
