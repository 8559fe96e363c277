// The self-test's report: template map, advice, control gap and gates (selftest_report.h).
#include "selftest_report.h"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>

namespace phasekv {

namespace {

Status check_gate(const char* name, double v) {
  if (std::isnan(v) || v > 1.0)
    return make_error(StatusCode::kInvalidArgument, "gate %s = %g: a threshold is an accuracy in [0, 1]", name, v);
  return Status::Ok();
}

bool contains(const std::vector<int32_t>& v, int32_t x) { return std::find(v.begin(), v.end(), x) != v.end(); }

std::string sentence(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string sentence(const char* fmt, ...) {
  char line[384];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  return line;
}

}  // namespace

std::vector<std::string> memory_runs(const ModelSpec& spec) {
  std::vector<std::string> out;
  const auto& L = spec.layers;
  for (size_t i = 0; i < L.size();) {
    size_t j = i;
    while (j + 1 < L.size() && L[j + 1] == L[i]) ++j;
    out.push_back((i == j ? std::to_string(i) : std::to_string(i) + "-" + std::to_string(j)) + ": " +
                  L[i].describe());
    i = j + 1;
  }
  return out;
}

double mean_over_protocols(const SelftestResult& r) {
  double m = 0;
  for (const ProtocolResult& p : r.protocols) m += p.summary.mean_accuracy;
  return r.protocols.empty() ? 0 : m / double(r.protocols.size());
}

Status make_selftest_report(const Model& model, const SelftestResult& run, const Model* twin,
                            const SelftestResult* control, const std::string& template_label,
                            const SelftestGates& gates, SelftestReport* out) {
  PKV_RETURN_IF_ERROR(check_gate("min_acc", gates.min_acc));
  PKV_RETURN_IF_ERROR(check_gate("max_gap", gates.max_gap));
  const uint32_t P = run.period;
  if (P < 2 || run.protocols.empty())
    return make_error(StatusCode::kInvalidArgument, "a self-test report needs a finished run (period %u, %zu protocols)",
                      P, run.protocols.size());
  if (control && control->period != P)
    return make_error(StatusCode::kInvalidArgument, "the control's period %u differs from the run's %u", control->period, P);
  SelftestReport r;
  r.template_label = template_label;
  r.n_layers = model.config().n_layers;
  r.memories = memory_runs(model.spec());
  r.run = run;
  if (control) {
    r.has_control = true;
    r.control = *control;
    if (twin) r.control_memories = memory_runs(twin->spec());
    r.compression_gap = mean_over_protocols(*control) - mean_over_protocols(run);
  }

  // Template map: content offset k (from the slot start) lands on residue (t0 + k) mod P.
  std::vector<double> acc(P, 0.0);
  for (const ProtocolResult& p : run.protocols)
    for (uint32_t q = 0; q < P; ++q) acc[q] += p.summary.residues[q].accuracy / double(run.protocols.size());
  PaddingAdvice& a = r.advice;
  const uint32_t phase = run.t0 % P;
  a.strongest_residue = phase;  // a tie keeps the slot's own phase
  for (uint32_t q = 0; q < P; ++q)
    if (acc[q] > acc[a.strongest_residue]) a.strongest_residue = q;
  const uint32_t best = a.strongest_residue;
  for (uint32_t k = 0; k < P; ++k) {
    const uint32_t q = (run.t0 + k) % P;
    TemplateMapRow row;
    row.offset = k;
    row.residue = q;
    row.weak = contains(run.flagged, int32_t(q));
    row.accuracy = acc[q];
    r.map.push_back(row);
    if (row.weak)
      a.text.push_back(sentence(
          "Content tokens at offsets = %u (mod %u) from the slot start land on weak residue %u.", k, P, q));
  }
  a.change_needed = !run.flagged.empty() && best != phase;
  a.pad_tokens_before_slot = a.change_needed ? (best + P - phase) % P : 0;
  const uint32_t pad = a.pad_tokens_before_slot;
  if (run.flagged.empty())
    a.text.push_back(sentence("No residue is weak: the slot (starting at token %u, phase %u) needs no change.", run.t0,
                              phase));
  else if (!a.change_needed)
    a.text.push_back(sentence(
        "The slot starts at token %u, on the strongest residue %u: no padding is needed before it.", run.t0, best));
  else
    a.text.push_back(sentence("The slot starts at token %u (phase %u). Adding %u neutral token%s before the slot "
                              "moves its start to the strongest residue %u.",
                              run.t0, phase, pad, pad == 1 ? "" : "s", best));
  // Complementary phases: a copy of a fact shifted by d tokens moves from residue f to f + d.
  for (int32_t f : run.flagged) {
    const uint32_t d = (best + P - uint32_t(f)) % P;
    if (d == 0) continue;
    a.complementary.push_back({f, d});
    a.text.push_back(sentence("Repeat critical facts at complementary phases: a copy placed %u token%s after a fact "
                              "on weak residue %d lands on the strongest residue %u.",
                              d, d == 1 ? "" : "s", f, best));
  }

  // Gates.
  r.gates = gates;
  for (const ProtocolResult& p : run.protocols) {
    r.min_accuracy = std::min(r.min_accuracy, p.summary.worst.naive_min);
    r.max_gap = std::max(r.max_gap, p.summary.gap.gap);
  }
  if (gates.min_acc >= 0) r.checks.push_back({"min_acc", gates.min_acc, r.min_accuracy, r.min_accuracy >= gates.min_acc});
  if (gates.max_gap >= 0) r.checks.push_back({"max_gap", gates.max_gap, r.max_gap, r.max_gap <= gates.max_gap});
  for (const GateCheck& c : r.checks) r.pass = r.pass && c.pass;

  r.seconds = run.seconds + (control ? control->seconds : 0.0);
  r.probes = run.probes + (control ? control->probes : 0);
  r.prefill_tokens = run.prefill_tokens + (control ? control->prefill_tokens : 0);
  r.naive_prefill_tokens = run.naive_prefill_tokens + (control ? control->naive_prefill_tokens : 0);
  *out = std::move(r);
  return Status::Ok();
}

Status run_selftest_report(const Model& model, const Model* twin, const SelftestOptions& opts,
                           const SelftestGates& gates, SelftestReport* out) {
  // Bad thresholds are refused before minutes of probing.
  PKV_RETURN_IF_ERROR(check_gate("min_acc", gates.min_acc));
  PKV_RETURN_IF_ERROR(check_gate("max_gap", gates.max_gap));
  SelftestOptions o = opts;
  o.control = false;
  SelftestResult run;
  PKV_RETURN_IF_ERROR(run_selftest(model, o, &run));
  SelftestResult ctl;
  if (twin) {
    // Exactly the same probes: the same sweep, samples and target distance (the twin has no
    // local window, so it would otherwise place targets closer to the query).
    SelftestOptions oc = o;
    oc.period = int32_t(run.period);
    oc.samples = run.protocols.empty() ? o.samples : run.protocols[0].clusters;
    oc.budget_s = 0;
    oc.min_distance = run.min_distance;
    oc.control = true;
    Status s = run_selftest(*twin, oc, &ctl);
    if (!s.ok()) return s.with_context("control");
    if (ctl.probe_digest != run.probe_digest)
      return make_error(StatusCode::kInternal, "control: the twin's probes differ from the run's");
  }
  return make_selftest_report(model, run, twin, twin ? &ctl : nullptr, o.template_label, gates, out);
}

}  // namespace phasekv
