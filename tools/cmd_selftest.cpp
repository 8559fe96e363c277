// phasekv selftest -m MODEL [--template FILE | --chat] [--ctx N] [--samples N | --budget T]
//                  [--seed S] [--json FILE] [--html FILE] [--control] [--gate-min-acc A] [--gate-max-gap G]
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "file_io.h"
#include "context.h"
#include "selftest_report.h"
#include "selftest_html.h"

namespace phasekv {
namespace tools {

namespace {

// An output path can be written: not a directory or another non-regular file (a FIFO would block,
// a device would be clobbered), and its directory exists and is writable.
using json = nlohmann::json;

volatile std::sig_atomic_t g_interrupted = 0;
void on_sigint(int) { g_interrupted = 1; }
constexpr int kExitGateFailed = 3;

struct SelftestArgs {
  BackendOptions be;
  std::string model;
  std::string template_file;
  bool chat = false;
  uint32_t ctx = 512;
  uint32_t records = 16;
  uint32_t targets = kDefaultSelftestTargets;
  int32_t samples = 0;
  std::string budget;
  uint64_t seed = 1;
  int32_t period = 0;
  std::string protocol = "both";
  double delta = 0.10, alpha = 0.05;
  double gate_min_acc = -1, gate_max_gap = -1;
  bool control = false;
  std::string phase_align;       // --phase-align REPORT.json
  std::string guard;             // --guard auto|SHIFT
  double guard_threshold = 1.0;  // --guard-threshold
  int threads = 0;
  uint32_t batch = 256;
  std::string json_path, html_path;
  bool quiet = false;
};

std::string to_hex(const unsigned char* b, unsigned n) {
  static const char* const kHex = "0123456789abcdef";
  std::string hex;
  for (unsigned i = 0; i < n; ++i) {
    hex += kHex[b[i] >> 4];
    hex += kHex[b[i] & 15];
  }
  return hex;
}

Status sha256_file(const std::string& path, std::string* hex) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return make_error(StatusCode::kIoError, "cannot read '%s' to hash it", path.c_str());
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> md(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  if (!md || EVP_DigestInit_ex(md.get(), EVP_sha256(), nullptr) != 1)
    return make_error(StatusCode::kInternal, "SHA-256 is not available");
  std::vector<char> buf(1 << 20);
  while (f) {
    f.read(buf.data(), std::streamsize(buf.size()));
    if (f.gcount() > 0) EVP_DigestUpdate(md.get(), buf.data(), size_t(f.gcount()));
  }
  unsigned char out[32];
  unsigned int n = 0;
  EVP_DigestFinal_ex(md.get(), out, &n);
  *hex = to_hex(out, n);
  return Status::Ok();
}

std::string sha256_text(const std::string& text) {
  unsigned char out[32];
  unsigned int n = 0;
  EVP_Digest(text.data(), text.size(), out, &n, EVP_sha256(), nullptr);
  return to_hex(out, n);
}

// "90", "90s", "10m", "1h" -> seconds.
bool parse_duration(const std::string& s, double* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || !(v > 0) || !std::isfinite(v)) return false;
  const std::string unit = end;
  if (unit.empty() || unit == "s") *out = v;
  else if (unit == "m" || unit == "min") *out = v * 60;
  else if (unit == "h") *out = v * 3600;
  else return false;
  return std::isfinite(*out);
}

std::string hex64(uint64_t v) {
  char b[17];
  std::snprintf(b, sizeof b, "%016llx", (unsigned long long)v);
  return b;
}

json protocol_json(const ProtocolResult& p) {
  const selftest::Summary& s = p.summary;
  json rows = json::array();
  const int32_t P = s.n_residues;
  for (int32_t r = 0; r < P; ++r) {
    const selftest::ResidueRow& row = s.residues[size_t(r)];
    const bool flagged = std::find(p.flagged.begin(), p.flagged.end(), r) != p.flagged.end();
    rows.push_back({{"r", r}, {"n", s.n_clusters * p.targets}, {"hits", p.hits[size_t(r)]}, {"accuracy", row.accuracy},
                    {"ci", {row.accuracy_ci.lo, row.accuracy_ci.hi}}, {"nll", row.nll},
                    {"probability", p.probability[size_t(r)]}, {"nll_excess", row.nll_excess}, {"loo_z", row.hit_test.z}, {"loo_p", row.hit_test.p},
                    {"holm_p", row.hit_holm_p}, {"flagged", flagged}});
  }
  json cands = json::array();
  for (const selftest::PeriodCandidate& c : p.period_scan.candidates)
    cands.push_back({{"period", c.period}, {"power", c.power}, {"p", c.p}});
  return {{"clusters", p.clusters},
          {"probes", int64_t(2) * p.clusters * P},
          {"residues", rows},
          {"summary",
           {{"mean_accuracy", s.mean_accuracy},
            {"mean_ci", {s.mean_bootstrap.ci.lo, s.mean_bootstrap.ci.hi}},
            {"min_accuracy", s.worst.naive_min},
            {"argmin", s.worst.naive_argmin},
            {"min_accuracy_split", s.worst.split_min},
            {"deficit", s.worst.naive_deficit},
            {"deficit_split", s.worst.split_deficit},
            {"gap", s.gap.gap},
            {"gap_null", s.gap.expected_null_gap},
            {"sd", s.gap.sd},
            {"gap_rel", s.gap.relative_gap},
            {"cochran_p", s.cochran.p},
            {"mde", s.mde},
            {"mde_empirical", s.mde_empirical},
            {"icc", s.icc}}},
          {"period_scan",
           {{"detected", p.period_scan.detected}, {"period", p.period_scan.period}, {"p", p.period_scan.scan_p},
            {"candidates", cands}}},
          {"flagged", p.flagged}};
}

// A summary of the guard's comparison (both sides on the same samples).
json guard_side_json(const selftest::Summary& s) {
  json acc = json::array(), ci = json::array();
  for (const selftest::ResidueRow& row : s.residues) {
    acc.push_back(row.accuracy);
    ci.push_back({row.accuracy_ci.lo, row.accuracy_ci.hi});
  }
  return {{"accuracy", acc},
          {"ci", ci},
          {"mean_accuracy", s.mean_accuracy},
          {"mean_ci", {s.mean_bootstrap.ci.lo, s.mean_bootstrap.ci.hi}},
          {"min_accuracy", s.worst.naive_min},
          {"argmin", s.worst.naive_argmin},
          {"gap", s.gap.gap}};
}

json guard_json(const GuardResult& g) {
  return {{"shift", g.shift},
          {"auto", g.auto_shift},
          {"stage1_weak", g.stage1_weak},
          {"threshold", g.threshold},
          {"clusters", g.clusters},
          {"triggered", g.triggered},
          {"from_b", g.from_b},
          {"worst_residue", g.worst_residue},
          {"worst_gain", g.worst_gain},
          {"worst_gain_ci", {g.worst_gain_ci.lo, g.worst_gain_ci.hi}},
          {"mean_gain", g.mean_gain},
          {"mean_gain_ci", {g.mean_gain_ci.lo, g.mean_gain_ci.hi}},
          {"unguarded", g.clusters >= 2 ? guard_side_json(g.unguarded) : json(nullptr)},
          {"guarded", g.clusters >= 2 ? guard_side_json(g.guarded) : json(nullptr)}};
}

void print_guard(const GuardResult& g) {
  if (!g.requested) return;
  if (g.shift == 0) {
    std::printf("\nphase guard: inactive (%s)\n",
                g.auto_shift ? "stage 1 found no weak residue to move" : "shift 0");
    return;
  }
  std::printf("\nphase guard (outer padding, shift %u%s, threshold %.2f; %d samples, same probes both ways): "
              "%.0f%% of lookups guarded, %.0f%% answered by branch B\n",
              g.shift, g.auto_shift ? " chosen on stage 1, scored on stage 2" : "", g.threshold, g.clusters,
              100 * g.triggered, 100 * g.from_b);
  if (g.clusters < 2) return;
  std::printf("  r   unguarded A_r [95%% CI]   guarded A_r [95%% CI]\n");
  for (size_t r = 0; r < g.guarded.residues.size(); ++r) {
    const selftest::ResidueRow& u = g.unguarded.residues[r];
    const selftest::ResidueRow& w = g.guarded.residues[r];
    std::printf("  %-3zu %5.3f [%5.3f, %5.3f]     %5.3f [%5.3f, %5.3f]\n", r, u.accuracy, u.accuracy_ci.lo,
                u.accuracy_ci.hi, w.accuracy, w.accuracy_ci.lo, w.accuracy_ci.hi);
  }
  std::printf("  mean %.3f -> %.3f, min %.3f -> %.3f, gap %.3f -> %.3f\n", g.unguarded.mean_accuracy,
              g.guarded.mean_accuracy, g.unguarded.worst.naive_min, g.guarded.worst.naive_min, g.unguarded.gap.gap,
              g.guarded.gap.gap);
  std::printf("  paired on the same samples: worst residue %d gains %+.3f [%+.3f, %+.3f], the mean %+.3f [%+.3f, %+.3f]\n",
              g.worst_residue, g.worst_gain, g.worst_gain_ci.lo, g.worst_gain_ci.hi, g.mean_gain, g.mean_gain_ci.lo,
              g.mean_gain_ci.hi);
  if (g.unguarded.gap.gap < 0.1)
    std::printf("  nothing to lift: without the guard the residues are within %.3f of each other\n",
                g.unguarded.gap.gap);
  else if (g.worst_gain_ci.lo > 0)
    std::printf("  the guard lifts the worst residue: its gain's interval lies above 0\n");
  else
    std::printf("  the guard does not demonstrably lift the worst residue (its gain's interval reaches 0): the "
                "branches fail together here, or the samples are too few\n");
}

json protocols_json(const SelftestResult& r) {
  json j = json::object();
  for (const ProtocolResult& p : r.protocols) j[protocol_name(p.protocol)] = protocol_json(p);
  return j;
}

void print_table(const SelftestResult& r) {
  for (const ProtocolResult& p : r.protocols) {
    const selftest::Summary& s = p.summary;
    std::printf("\n%s padding: %d samples x %u residues x 2 stages, %u target%s per probe\n",
                protocol_name(p.protocol), p.clusters, r.period, r.targets, r.targets == 1 ? "" : "s");
    std::printf("  r   A_r    95%% CI          %-30s NLL    flag\n", "");
    for (int32_t i = 0; i < s.n_residues; ++i) {
      const selftest::ResidueRow& row = s.residues[size_t(i)];
      const bool flagged = std::find(p.flagged.begin(), p.flagged.end(), i) != p.flagged.end();
      const int bar = int(std::lround(row.accuracy * 30));
      std::printf("  %-3d %5.3f  [%5.3f, %5.3f]  %s%s  %5.2f  %s\n", i, row.accuracy, row.accuracy_ci.lo,
                  row.accuracy_ci.hi, std::string(size_t(bar), '#').c_str(),
                  std::string(size_t(30 - bar), '.').c_str(), row.nll, flagged ? "WEAK" : "");
    }
    std::printf("  mean %.3f [%.3f, %.3f]  min %.3f at r=%d (split-sample %.3f, deficit %.3f, split-sample %.3f)\n"
                "  gap %.3f (noise alone ~%.3f)  sd %.3f  gap/mean %.3f  MDE %.3f\n",
                s.mean_accuracy, s.mean_bootstrap.ci.lo, s.mean_bootstrap.ci.hi, s.worst.naive_min,
                s.worst.naive_argmin, s.worst.split_min, s.worst.naive_deficit, s.worst.split_deficit, s.gap.gap,
                s.gap.expected_null_gap, s.gap.sd, s.gap.relative_gap, s.mde);
    const selftest::PeriodScan& ps = p.period_scan;
    if (!ps.candidates.empty()) {
      const char* over = r.period_source == "scan" ? "target positions" : "the residue curve";
      if (ps.detected)
        std::printf("  period scan over %s (periods %d..%d): period %d detected (p = %.3f)\n", over,
                    ps.candidates.front().period, ps.candidates.back().period, ps.period, ps.scan_p);
      else
        std::printf("  period scan over %s (periods %d..%d): no period detected (p = %.3f)\n", over,
                    ps.candidates.front().period, ps.candidates.back().period, ps.scan_p);
    }
  }
}

json gates_json(const SelftestReport& rep) {
  json checks = json::array();
  for (const GateCheck& c : rep.checks)
    checks.push_back({{"name", c.name}, {"threshold", c.threshold}, {"value", c.value}, {"pass", c.pass}});
  return {{"pass", rep.pass}, {"checks", checks}};
}

// The JSON report (docs/selftest.schema.json): the report rendered, plus the inputs.
json report_json(const SelftestReport& rep, const SelftestArgs& a, const SelftestOptions& o, double budget,
                 const std::string& model_hash) {
  const SelftestResult& res = rep.run;
  json j;
  j["schema"] = "phasekv-selftest/1";
  j["phasekv_version"] = "0.1.0";
  j["inputs"] = {{"model", a.model},
                 {"model_sha256", model_hash},
                 {"template", o.template_label},
                 {"template_sha256", sha256_text(o.template_text)},
                 {"n_ctx", a.ctx},
                 {"records", a.records},
                 {"targets", res.targets},
                 {"samples_per_stage", res.protocols.empty() ? 0 : res.protocols[0].clusters},
                 {"budget_s", budget > 0 ? json(budget) : json(nullptr)},
                 {"seed", a.seed},
                 {"period_override", a.period > 0 ? json(a.period) : json(nullptr)},
                 {"delta", a.delta},
                 {"alpha", a.alpha},
                 {"threads", o.n_threads},
                 {"kernels", res.kernels},
                 {"gate_min_acc", a.gate_min_acc >= 0 ? json(a.gate_min_acc) : json(nullptr)},
                 {"gate_max_gap", a.gate_max_gap >= 0 ? json(a.gate_max_gap) : json(nullptr)},
                 {"control", a.control}};
  j["model"] = {{"n_layers", rep.n_layers}, {"memories", rep.memories}, {"strides", res.strides},
                {"max_local", res.max_local}};
  j["period"] = res.period;
  j["period_source"] = res.period_source;
  json map = json::array();
  for (const TemplateMapRow& m : rep.map)
    map.push_back({{"offset", m.offset}, {"residue", m.residue}, {"weak", m.weak}, {"accuracy", m.accuracy}});
  j["template"] = {{"t0", res.t0},
                   {"phase", res.t0 % res.period},
                   {"prefix_tokens", res.prefix_tokens},
                   {"suffix_tokens", res.suffix_tokens},
                   {"map", map},
                   {"advice", {{"strongest_residue", rep.advice.strongest_residue},
                               {"change_needed", rep.advice.change_needed},
                               {"pad_tokens_before_slot", rep.advice.pad_tokens_before_slot},
                               {"text", rep.advice.text}}}};
  j["protocols"] = protocols_json(res);
  j["flagged"] = res.flagged;
  j["probe_digest"] = hex64(res.probe_digest);
  if (rep.has_control) {
    j["control"] = {{"memories", rep.control_memories},
                    {"protocols", protocols_json(rep.control)},
                    {"flagged", rep.control.flagged},
                    {"probe_digest", hex64(rep.control.probe_digest)},
                    {"compression_gap", rep.compression_gap}};
  } else {
    j["control"] = nullptr;
  }
  j["gates"] = gates_json(rep);
  if (res.guard.requested) j["guard"] = guard_json(res.guard);
  j["timings"] = {{"total_s", rep.seconds},
                  {"prefill_tokens", rep.prefill_tokens},
                  {"naive_prefill_tokens", rep.naive_prefill_tokens},
                  {"probes", rep.probes},
                  {"probes_per_s", rep.seconds > 0 ? double(rep.probes) / rep.seconds : 0.0}};
  return j;
}

int run_selftest_cmd(const SelftestArgs& a) {
  const char* cmd = "selftest";
  double budget = 0;
  if (!a.budget.empty() && !parse_duration(a.budget, &budget))
    return report(cmd, make_error(StatusCode::kInvalidArgument, "--budget '%s' is not a duration (90s, 10m, 1h)",
                                  a.budget.c_str()));
  if (a.period == 1)
    return report(cmd, make_error(StatusCode::kInvalidArgument,
                                  "--period 1: every position has the same residue, there is nothing to sweep"));
  std::unique_ptr<Model> model;
  Status s = Model::load(a.model, a.be.load_options(), &model);
  if (!s.ok()) return report(cmd, s);
  // Report paths are checked before the run, not after minutes of probing: each a regular file
  // or absent, never the model, the template or the other report.
  s = check_outputs({{"--json", a.json_path}, {"--html", a.html_path}},
                    {{"-m", a.model}, {"--template", a.template_file}, {"--phase-align", a.phase_align}});
  if (!s.ok()) return report(cmd, s);

  SelftestOptions o;
  if (a.chat) {
    s = chat_probe_template(*model, &o.template_text);
    if (!s.ok()) return report(cmd, s);
    o.template_label = "chat";
  } else if (!a.template_file.empty()) {
    s = read_text_file("--template", a.template_file, &o.template_text);
    if (!s.ok()) return report(cmd, s);
    o.template_label = a.template_file;
  }
  if (!a.phase_align.empty()) {
    // The evidence for an alignment: the self-test re-run on the aligned template.
    PhaseProfile prof;
    s = read_phase_profile(a.phase_align, &prof);
    if (!s.ok()) return report(cmd, s);
    TemplateAlignment al;
    s = align_template(model->tokenizer(), o.template_text, prof, &al);
    if (!s.ok()) return report(cmd, s.with_context("--phase-align"));
    o.template_text = al.text;
    o.template_label += al.changed ? " (aligned: " + std::to_string(al.inserted_tokens) + " tokens \"" +
                                         display_escape(al.inserted_text) + "\" before the slot)"
                                   : " (aligned: unchanged)";
  }
  o.probe_tokens = a.ctx;
  o.records = a.records;
  o.targets = a.targets;
  o.samples = a.samples;
  o.budget_s = budget;
  o.seed = a.seed;
  o.period = a.period;
  o.delta = a.delta;
  o.alpha = a.alpha;
  o.outer = a.protocol == "both" || a.protocol == "outer";
  o.in_sequence = a.protocol == "both" || a.protocol == "in_sequence";
  o.n_threads = a.threads > 0 ? a.threads : default_context_params().n_threads;
  o.backend = a.be.kind();
  o.kernels = a.be.kernel_spec("reference");
  o.device = a.be.device;
  o.n_batch = a.batch;
  if (!a.guard.empty()) {
    uint64_t shift = 0;
    if (a.guard == "auto") {
      o.guard = 0;
    } else if (parse_unsigned(a.guard, &shift) && shift >= 1 && shift <= 255) {
      o.guard = int32_t(shift);
    } else {
      return report(cmd, make_error(StatusCode::kInvalidArgument,
                                    "--guard '%s': 'auto' or a shift in [1, 255] (below the period)",
                                    display_escape(a.guard).c_str()));
    }
    o.guard_threshold = a.guard_threshold;
  }
  const bool show = !a.quiet;
  const bool is_tty = isatty(2) != 0;
  // Ctrl-C stops the run between probes (no report is written, earlier ones stay as they were);
  // a second Ctrl-C kills at once (SA_RESETHAND).
  g_interrupted = 0;
  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sa.sa_flags = SA_RESETHAND;
  sigemptyset(&sa.sa_mask);
  struct sigaction old_sa {};
  sigaction(SIGINT, &sa, &old_sa);
  struct RestoreSigint {
    struct sigaction* old;
    ~RestoreSigint() { sigaction(SIGINT, old, nullptr); }
  } restore_sigint{&old_sa};
  o.progress = [show, is_tty](const SelftestProgress& p) {
      if (g_interrupted) return false;
      if (!show) return true;
      // On a terminal, redraw one line; in a log, a line every 10 %.
      if (!is_tty && p.done != p.total && (p.done * 10 / p.total) == ((p.done - 1) * 10 / p.total)) return true;
      // Called inside the probe loop: no allocation here (a fixed buffer for the bar).
      constexpr int kWidth = 30;
      char bar[kWidth + 1];
      const int fill = int(double(kWidth) * double(p.done) / double(std::max<int64_t>(p.total, 1)));
      for (int i = 0; i < kWidth; ++i) bar[i] = i < fill ? '#' : '.';
      bar[kWidth] = '\0';
      std::fprintf(stderr, "%s  %-10s [%s] %lld/%lld probes  %-22s ETA %4.0f s ", is_tty ? "\r" : "",
                   p.control ? "full KV" : "compressed", bar, (long long)p.done, (long long)p.total, p.phase, p.eta_s);
      if (p.done == p.total || !is_tty) std::fprintf(stderr, "\n");
      return true;
    };
  // The control's twin is loaded first: a file without one is refused before the long run.
  std::unique_ptr<Model> twin;
  if (a.control) {
    Model::LoadOptions lo = a.be.load_options();
    lo.full_attention = true;
    lo.verify = false;  // the file was verified with the model just loaded
    s = Model::load(a.model, lo, &twin);
    if (!s.ok()) return report(cmd, s.with_context("--control"));
  }
  SelftestGates gates;
  gates.min_acc = a.gate_min_acc;
  gates.max_gap = a.gate_max_gap;
  SelftestReport rep;
  s = run_selftest_report(*model, twin.get(), o, gates, &rep);
  if (s.code() == StatusCode::kCancelled && g_interrupted) {
    std::fprintf(stderr, "%sphasekv selftest: interrupted: %s; no report written\n", is_tty && show ? "\n" : "",
                 s.message().c_str());
    return kExitInterrupted;
  }
  if (!s.ok()) return report(cmd, s);
  const SelftestResult& res = rep.run;
  const SelftestResult& ctl = rep.control;
  const bool have_control = rep.has_control;

  std::string model_hash;
  s = sha256_file(a.model, &model_hash);
  if (!s.ok()) return report(cmd, s);
  const json j = report_json(rep, a, o, budget, model_hash);
  const uint32_t P = res.period;

  // Terminal report.
  std::printf("phase self-test: %s\n", a.model.c_str());
  for (const std::string& m : rep.memories) std::printf("  layers %s\n", m.c_str());
  std::printf("  period P = %u (%s); template %s: slot at token %u, phase %u\n", P, res.period_source.c_str(),
              rep.template_label.c_str(), res.t0, res.t0 % P);
  print_table(res);
  if (have_control) {
    std::printf("\ncontrol (full-attention twin):");
    print_table(ctl);
    std::string ctl_flags;
    for (int32_t f : ctl.flagged) ctl_flags += (ctl_flags.empty() ? "" : " ") + std::to_string(f);
    std::printf("  compression costs %.3f of mean accuracy; control flags: %s\n", rep.compression_gap,
                ctl_flags.empty() ? "none" : ctl_flags.c_str());
  }
  std::printf("\nweak residues: ");
  if (res.flagged.empty()) std::printf("none ");
  for (int32_t f : res.flagged) std::printf("%d ", f);
  std::printf("(false-alarm probability per run <= %.2f, margin %.0f pp)\n", a.alpha, a.delta * 100);
  for (const std::string& line : rep.advice.text) std::printf("  %s\n", line.c_str());
  std::printf("%lld probes in %.1f s; prefilled %lld tokens instead of %lld\n", (long long)rep.probes, rep.seconds,
              (long long)rep.prefill_tokens, (long long)rep.naive_prefill_tokens);
  for (const GateCheck& c : rep.checks)
    std::printf("gate %s: %s (value %.3f, threshold %.3f)\n", c.name.c_str(), c.pass ? "pass" : "FAIL", c.value,
                c.threshold);
  print_guard(res.guard);

  if (!a.json_path.empty()) {
    s = write_file_atomic("--json", a.json_path, j.dump(2, ' ', false, json::error_handler_t::replace) + "\n");
    if (!s.ok()) return report(cmd, s);
  }
  if (!a.html_path.empty()) {
    s = write_file_atomic("--html", a.html_path, render_selftest_html(j));
    if (!s.ok()) return report(cmd, s);
  }
  return rep.pass ? kExitOk : kExitGateFailed;
}

}  // namespace

void register_selftest(CLI::App& app, int* exit_code) {
  auto a = std::make_shared<SelftestArgs>();
  CLI::App* cmd = app.add_subcommand(
      "selftest", "Phase self-test: per-residue retrieval accuracy through the deployed template, weak residues, "
                  "a release gate (exit 3 when a gate fails)");
  cmd->add_option("-m,--model", a->model, "PhaseKV model file (.pkv)")->required();
  auto* tf = cmd->add_option("--template", a->template_file,
                             "Template file with exactly one {{content}} slot (special tokens written literally); "
                             "default: the bare slot");
  auto* ch = cmd->add_flag("--chat", a->chat, "Use the model's chat template with the probe as the user message");
  tf->excludes(ch);
  cmd->add_option("-c,--ctx", a->ctx, "Tokens per probe (the context the self-test plans)")
      ->default_val(512)
      ->check(CLI::Range(16u, 1u << 20));
  cmd->add_option("--records", a->records,
                  "key = value records per probe, the rest neutral filler sentences (fewer when the probe is short)")
      ->default_val(16)
      ->check(CLI::Range(8u, 4096u));
  cmd->add_option("--targets", a->targets,
                  "Records looked up (scored) per probe: K targets next to each other, each visiting every residue "
                  "across the shifts; 1 is the one-target design")
      ->default_val(kDefaultSelftestTargets)
      ->check(CLI::Range(1u, 64u));
  auto* sm = cmd->add_option("--samples", a->samples, "Samples (clusters) per stage and protocol (default 16)")
                 ->check(CLI::Range(4, 100000));
  auto* bu = cmd->add_option("--budget", a->budget, "Time budget instead of --samples, e.g. 90s, 10m");
  sm->excludes(bu);
  cmd->add_option("--seed", a->seed, "Seed of the probe content, 0..2^64-1")->default_val(1)->check(unsigned_integer());
  cmd->add_option("--period", a->period, "Override the period P (default: lcm of the compressed strides)")
      ->check(CLI::Range(1, 256));
  cmd->add_option("--protocol", a->protocol, "outer, in_sequence or both")
      ->default_val("both")
      ->check(CLI::IsMember({"outer", "in_sequence", "both"}));
  cmd->add_option("--delta", a->delta, "Practical margin of a weak residue, in accuracy")
      ->default_val(0.10)
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--alpha", a->alpha, "False-alarm probability per run")->default_val(0.05)->check(CLI::Range(1e-6, 0.5));
  cmd->add_option("--gate-min-acc", a->gate_min_acc, "Fail (exit 3) when any residue's accuracy is below this")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--gate-max-gap", a->gate_max_gap, "Fail (exit 3) when max - min accuracy exceeds this")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_flag("--control", a->control, "Also run the full-attention twin and report the gap compression adds");
  cmd->add_option("--phase-align", a->phase_align,
                  "Self-test report (--json of an earlier run): align the template first (neutral tokens before the "
                  "slot put content on the strongest residue) and test the aligned template");
  cmd->add_option("--guard", a->guard,
                  "Also score the phase guard (run --phase-guard) on the outer probes: 'auto' chooses the shift on "
                  "stage 1 and scores stage 2, a number is the shift (scored on both stages)");
  cmd->add_option("--guard-threshold", a->guard_threshold,
                  "With --guard: guard a lookup only when its top probability is below this (default 1)")
      ->default_val(1.0)
      ->check(finite_number())
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("-t,--threads", a->threads, "CPU threads (default: all)");
  add_backend_options(cmd, &a->be);
  add_load_options(cmd, &a->be);
  cmd->add_option("-b,--batch", a->batch, "Prefill chunk")->default_val(256)->check(CLI::Range(1u, 1u << 20));
  cmd->add_option("--json", a->json_path, "Write the JSON report (schema docs/selftest.schema.json)");
  cmd->add_option("--html", a->html_path, "Write a self-contained HTML report");
  cmd->add_flag("-q,--quiet", a->quiet, "No progress bar");
  cmd->callback([a, exit_code] {
    if (!exit_code) return;  // parse only (fuzz_cli)
    *exit_code = run_selftest_cmd(*a);
  });
}

}  // namespace tools
}  // namespace phasekv
