// The self-test's report (DESIGN.md section 6, step 6): everything a release gate and a person
// need from a run, computed here once so that the terminal table, the JSON, the HTML page and
// the C API only render it. On top of the run's statistics (selftest.h) it holds the template
// map (content offset -> residue), the padding and complementary-phase advice, the control
// run on the full-attention twin with the gap compression adds, and the gates with their
// verdict.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "selftest.h"

namespace phasekv {

// Release gates; a check is made when its threshold is set (>= 0). Thresholds are accuracies
// in [0, 1]; NaN or above 1 is refused (kInvalidArgument, naming the field).
struct SelftestGates {
  double min_acc = -1;  // fail when some residue's accuracy, in either protocol, is below this
  double max_gap = -1;  // fail when max - min accuracy, in either protocol, exceeds this
};

struct GateCheck {
  std::string name;  // "min_acc", "max_gap"
  double threshold = 0, value = 0;
  bool pass = true;
};

// Content at `offset` tokens from the slot start lands on residue (t0 + offset) mod P.
struct TemplateMapRow {
  uint32_t offset = 0, residue = 0;
  bool weak = false;       // the residue is flagged (either protocol)
  double accuracy = 0.0;   // the residue's accuracy, averaged over the protocols run
};

// A fact on weak residue `weak_residue`, repeated `copy_offset` tokens later, has its copy on
// the strongest residue.
struct ComplementaryPhase {
  int32_t weak_residue = 0;
  uint32_t copy_offset = 0;
};

struct PaddingAdvice {
  // The residue with the highest accuracy averaged over protocols; a tie keeps the slot's own
  // phase (moving the slot would buy nothing).
  uint32_t strongest_residue = 0;
  // Padding helps only when some residue is weak and the slot does not already start on the
  // strongest residue.
  bool change_needed = false;
  uint32_t pad_tokens_before_slot = 0;  // 0 unless change_needed
  std::vector<ComplementaryPhase> complementary;  // one per flagged residue other than the strongest
  // The advice as sentences: one per weak content offset, the padding verdict, then one per
  // complementary phase.
  std::vector<std::string> text;
};

struct SelftestReport {
  std::string template_label;           // SelftestOptions::template_label
  uint32_t n_layers = 0;
  std::vector<std::string> memories;    // the model's layer runs, "0-19: full", "20-29: compressed ..."
  SelftestResult run;
  bool has_control = false;
  std::vector<std::string> control_memories;
  SelftestResult control;               // the full-attention twin, exactly the run's probes
  double compression_gap = 0.0;         // control minus run, mean accuracy averaged over protocols
  std::vector<TemplateMapRow> map;      // [P], by offset
  PaddingAdvice advice;
  SelftestGates gates;
  double min_accuracy = 1.0;            // lowest residue accuracy over the protocols (min_acc's value)
  double max_gap = 0.0;                 // largest max - min over the protocols (max_gap's value)
  std::vector<GateCheck> checks;        // the gates set, min_acc first
  bool pass = true;                     // every check passed (true without gates)
  // Totals over the run and the control.
  double seconds = 0.0;
  int64_t probes = 0, prefill_tokens = 0, naive_prefill_tokens = 0;
};

// A model's memories as runs of equal layers: "0-19: full", "20: compressed W=8 S=8 ...".
std::vector<std::string> memory_runs(const ModelSpec& spec);

// Mean accuracy averaged over the protocols of a run (0 without protocols).
double mean_over_protocols(const SelftestResult& r);

// Builds the report of a finished run (and its control when `control` is non-null, with
// `twin` the model it ran on). Errors: bad gate thresholds, a control with another period.
Status make_selftest_report(const Model& model, const SelftestResult& run, const Model* twin,
                            const SelftestResult* control, const std::string& template_label,
                            const SelftestGates& gates, SelftestReport* out);

// Runs the self-test on `model`, then, when `twin` is non-null (the same file loaded with
// Model::LoadOptions::full_attention), the control on exactly the same probes (the run's
// period, samples and target distance; checked by the probe digest), and builds the report.
// The gates are checked before any probe runs. opts.progress sees the control's probes with
// SelftestProgress::control set; cancelling it cancels the whole report (kCancelled).
Status run_selftest_report(const Model& model, const Model* twin, const SelftestOptions& opts,
                           const SelftestGates& gates, SelftestReport* out);

}  // namespace phasekv
