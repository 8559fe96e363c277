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
#include "selftest_flags.h"
#include "selftest_period.h"
#include "selftest_probes.h"
#include "selftest_stats.h"

namespace phasekv {

// ---- the run -------------------------------------------------------------------------------

struct SelftestProgress {
  int64_t done = 0, total = 0;  // probes
  double elapsed_s = 0, eta_s = 0;
  const char* phase = "";       // "outer, stage 1", ...
  bool control = false;         // the full-attention twin's run (run_selftest_report)
};

// Records looked up per probe by default (SelftestOptions::targets, --targets, the C API).
// Fewer are used when a probe is too short (SelftestResult::targets says how many).
constexpr uint32_t kDefaultSelftestTargets = 8;

struct SelftestOptions {
  std::string template_text = "{{content}}";
  std::string template_label = "{{content}}";  // for the report: a path, or "chat"
  uint32_t probe_tokens = 512;  // probe length (the context holds exactly one probe)
  uint32_t records = 16;        // key = value records per probe (at least 8), the rest filler
  // Records looked up (scored) per probe, 1..64; at most records - 4 and what the probe length
  // holds are used (1 is the one-target design).
  uint32_t targets = kDefaultSelftestTargets;
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
  // Optional, called after each probe (inside the probe loop: it must not allocate to keep the
  // loop allocation-free). Returning false cancels the run: run_selftest returns kCancelled.
  std::function<bool(const SelftestProgress&)> progress;
  bool control = false;  // reported in SelftestProgress::control
  // The phase guard measured through the probes (phase_guard.h): -1 off; 0 auto: the shift is
  // chosen from stage 1 of the outer protocol (its screening candidates as the weak residues,
  // guard_shift()) and the guard is scored on stage 2 only, so choosing and measuring use
  // disjoint samples; g > 0: that shift, scored on both stages. Needs the outer protocol: a
  // guarded request shifts its whole content, which is what outer padding does.
  int32_t guard = -1;
  double guard_threshold = 1.0;  // the trigger (PhaseGuardParams::threshold)
};

// The guard scored on the probes themselves: each outer probe at shift s is branch A, the same
// sample's probe at shift s + g (its content g tokens later, the same residue class as the
// deployed guard's g pads) is branch B, and every lookup takes the more confident branch's
// answer (only when A's top probability is below the threshold). No extra prefill: both
// branches are probes the run evaluates anyway. A residue's guarded accuracy is that of
// requests whose content sits at that residue.
struct GuardResult {
  bool requested = false;
  uint32_t shift = 0;                 // 0: inactive (auto found no weak residue in stage 1)
  bool auto_shift = false;
  double threshold = 1.0;
  int32_t clusters = 0;               // samples scored (stage 2 for auto, both stages otherwise)
  std::vector<int32_t> stage1_weak;   // auto: the weak residues the shift was chosen for
  selftest::Summary unguarded;        // the same samples without the guard
  selftest::Summary guarded;
  double triggered = 0.0;             // share of lookups the trigger guarded
  double from_b = 0.0;                // share of lookups answered by branch B
  // Paired on the same samples (guarded minus unguarded hits per sample), cluster bootstrap
  // 95 % intervals: at the unguarded worst residue, and over all residues. A gain whose
  // interval lies above 0 is what the guard buys; otherwise its branches fail together.
  int32_t worst_residue = 0;
  double worst_gain = 0.0;
  selftest::Interval worst_gain_ci{0.0, 0.0};
  double mean_gain = 0.0;
  selftest::Interval mean_gain_ci{0.0, 0.0};
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
  int32_t targets = 1;                  // lookups per probe: a residue has 2 * clusters * targets
  // Per residue, both stages pooled: greedy hits among its lookups, and the mean teacher-forced
  // probability of the gold value (exp of the sample's mean NLL, averaged over the samples).
  std::vector<int32_t> hits;
  std::vector<double> probability;
};

struct SelftestResult {
  uint32_t period = 0;
  std::string period_source;            // "strides", "override", "scan"
  std::vector<uint32_t> strides;
  uint32_t max_local = 0;
  uint32_t min_distance = 0;            // as used (see SelftestOptions::min_distance)
  uint32_t targets = 1;                 // records scored per probe (as used)
  uint64_t probe_digest = 0;            // FNV-1a over every probe's ids in run order
  uint32_t t0 = 0;
  uint32_t prefix_tokens = 0, suffix_tokens = 0;
  std::vector<ProtocolResult> protocols;
  std::vector<int32_t> flagged;         // union over protocols
  int64_t probes = 0;
  int64_t prefill_tokens = 0, naive_prefill_tokens = 0;
  double seconds = 0;
  std::string kernels;
  GuardResult guard;                    // SelftestOptions::guard
};

// Runs the self-test on `model` in contexts of its own. Errors: bad template, a context too
// small for the probe design, period 1, ... (kInvalidArgument, with the reason).
Status run_selftest(const Model& model, const SelftestOptions& opts, SelftestResult* out);

// The model's phase period: the lcm of its compressed layers' strides (their distinct strides,
// ascending, in *strides), 1 when no layer is compressed. kUnsupported above 4096.
Status phase_period(const ModelSpec& spec, uint32_t* period, std::vector<uint32_t>* strides);

}  // namespace phasekv
