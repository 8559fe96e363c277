#include "phase_guard.h"

#include <algorithm>
#include <cmath>

#include "selftest_probes.h"

namespace phasekv {

PhaseProfile phase_profile(const SelftestReport& report) {
  PhaseProfile p;
  p.period = report.run.period;
  p.accuracy.assign(p.period, 0.0);
  for (const ProtocolResult& pr : report.run.protocols)
    for (uint32_t r = 0; r < p.period && r < pr.summary.residues.size(); ++r)
      p.accuracy[r] += pr.summary.residues[r].accuracy / double(report.run.protocols.size());
  p.weak = report.run.flagged;
  p.strongest = report.advice.strongest_residue;
  return p;
}

Status check_phase_profile(const PhaseProfile& p) {
  if (p.period < 2 || p.period > 256)
    return make_error(StatusCode::kInvalidArgument, "phase profile: period = %u must be in [2, 256]", p.period);
  if (p.accuracy.size() != p.period)
    return make_error(StatusCode::kInvalidArgument, "phase profile: %zu accuracies for period %u", p.accuracy.size(),
                      p.period);
  for (size_t r = 0; r < p.accuracy.size(); ++r)
    if (!(p.accuracy[r] >= 0.0 && p.accuracy[r] <= 1.0))
      return make_error(StatusCode::kInvalidArgument, "phase profile: accuracy[%zu] = %g must be in [0, 1]", r,
                        p.accuracy[r]);
  for (int32_t w : p.weak)
    if (w < 0 || uint32_t(w) >= p.period)
      return make_error(StatusCode::kInvalidArgument, "phase profile: weak residue %d is outside [0, %u)", w,
                        p.period);
  if (p.strongest >= p.period)
    return make_error(StatusCode::kInvalidArgument, "phase profile: strongest residue %u is outside [0, %u)",
                      p.strongest, p.period);
  return Status::Ok();
}

uint32_t guard_shift(const PhaseProfile& p) {
  if (p.weak.empty() || p.period < 2 || p.accuracy.size() != p.period) return 0;
  const uint32_t P = p.period;
  uint32_t best = 0;
  double best_worst = -1.0;
  for (uint32_t g = 1; g < P; ++g) {
    double worst = 1.0;
    for (uint32_t r = 0; r < P; ++r) worst = std::min(worst, std::max(p.accuracy[r], p.accuracy[(r + g) % P]));
    if (worst > best_worst) {
      best_worst = worst;
      best = g;
    }
  }
  return best;
}

int32_t neutral_pad_token(const Tokenizer& tok) { return neutral_pad(tok); }

Status align_template(const Tokenizer& tok, const std::string& template_text, const PhaseProfile& profile,
                      TemplateAlignment* out) {
  PKV_RETURN_IF_ERROR(check_phase_profile(profile));
  ProbeTemplate t;
  PKV_RETURN_IF_ERROR(parse_template(tok, template_text, &t));
  const uint32_t P = profile.period;
  TemplateAlignment a;
  a.text = template_text;
  a.t0 = a.aligned_t0 = uint32_t(t.prefix.size());
  a.target_residue = profile.strongest;
  if (profile.weak.empty() || a.t0 % P == a.target_residue) {
    *out = std::move(a);
    return Status::Ok();
  }
  const uint32_t n = (a.target_residue + P - a.t0 % P) % P;
  std::vector<std::string> candidates;
  std::string pad_text;
  if (neutral_pad(tok, &pad_text) >= 0) candidates.push_back(pad_text);
  candidates.push_back(" ");
  candidates.push_back("\n");
  for (const std::string& c : candidates)
    for (uint32_t m = n; m <= n + 3 * P; m += P) {
      if (m == 0) continue;
      std::string inserted;
      for (uint32_t i = 0; i < m; ++i) inserted += c;
      const std::string text = t.prefix_text + inserted + kContentSlot + t.suffix_text;
      ProbeTemplate t2;
      if (!parse_template(tok, text, &t2).ok()) continue;
      if (t2.prefix.size() % P != a.target_residue || t2.prefix.size() < t.prefix.size() ||
          !std::equal(t.prefix.begin(), t.prefix.end(), t2.prefix.begin()) || t2.suffix != t.suffix)
        continue;
      a.text = text;
      a.aligned_t0 = uint32_t(t2.prefix.size());
      a.inserted_tokens = a.aligned_t0 - a.t0;
      a.inserted_text = inserted;
      a.changed = true;
      *out = std::move(a);
      return Status::Ok();
    }
  return make_error(StatusCode::kUnsupported,
                    "no neutral text before the slot moves its start from token %u (residue %u) to residue %u: "
                    "every candidate re-tokenized differently",
                    a.t0, a.t0 % P, a.target_residue);
}

double top_logprob(const float* logits, int n, int32_t* argmax) {
  int32_t best = 0;
  for (int i = 1; i < n; ++i)
    if (logits[i] > logits[best]) best = i;
  const double mx = double(logits[best]);
  double sum = 0.0;
  for (int i = 0; i < n; ++i) sum += std::exp(double(logits[i]) - mx);
  if (argmax) *argmax = best;
  return -std::log(sum);
}

// ---- the session ------------------------------------------------------------------------

Status PhaseGuard::create(const Model& model, const ContextParams& params, const std::string& template_text,
                          const PhaseProfile& profile, const PhaseGuardParams& guard, std::unique_ptr<PhaseGuard>* out) {
  PKV_RETURN_IF_ERROR(check_phase_profile(profile));
  if (!(guard.threshold >= 0.0))
    return make_error(StatusCode::kInvalidArgument, "phase guard: threshold = %g must be a number >= 0",
                      guard.threshold);
  if (guard.shift >= profile.period)
    return make_error(StatusCode::kInvalidArgument, "phase guard: shift = %u must be below the period %u",
                      guard.shift, profile.period);
  std::unique_ptr<PhaseGuard> g(new PhaseGuard());
  const Tokenizer& tok = model.tokenizer();
  ProbeTemplate t;
  PKV_RETURN_IF_ERROR(parse_template(tok, template_text, &t));
  g->prefix_ = t.prefix;
  g->suffix_ = t.suffix;
  g->shift_ = guard.shift ? guard.shift : guard_shift(profile);
  g->threshold_ = guard.threshold;
  if (g->shift_ > 0) {
    const int32_t pad = neutral_pad(tok);
    if (pad < 0)
      return make_error(StatusCode::kUnsupported, "phase guard: no neutral padding token round-trips in this vocabulary");
    g->pads_.assign(g->shift_, pad);
  }
  if (g->prefix_.size() + g->suffix_.size() + g->shift_ + 1 > params.n_ctx)
    return make_error(StatusCode::kInvalidArgument,
                      "phase guard: n_ctx = %u cannot hold the template (%zu + %zu tokens), the shift (%u) and content",
                      params.n_ctx, g->prefix_.size(), g->suffix_.size(), g->shift_);
  ContextParams cp = params;
  cp.snapshot_slots = std::max<uint32_t>(cp.snapshot_slots, 1);
  PKV_RETURN_IF_ERROR(Context::create(model, cp, &g->a_));
  if (g->shift_ > 0) PKV_RETURN_IF_ERROR(Context::create(model, cp, &g->b_));
  // The prefix is prefilled once; branch B starts from a copy of A's state.
  if (!g->prefix_.empty()) {
    PKV_RETURN_IF_ERROR(g->a_->prefill(g->prefix_.data(), g->prefix_.size()));
    PKV_RETURN_IF_ERROR(g->a_->save_slot(0));
    if (g->b_) {
      std::vector<uint8_t> snap(g->a_->snapshot_bytes());
      PKV_RETURN_IF_ERROR(g->a_->snapshot(snap.data(), snap.size()));
      PKV_RETURN_IF_ERROR(g->b_->restore(snap.data(), snap.size()));
      PKV_RETURN_IF_ERROR(g->b_->save_slot(0));
    }
  }
  g->stats_.shift = g->shift_;
  *out = std::move(g);
  return Status::Ok();
}

Status PhaseGuard::start(const int32_t* content, size_t n) {
  stats_ = PhaseGuardStats();
  stats_.shift = shift_;
  chosen_ = 0;
  const size_t need = prefix_.size() + n + suffix_.size();
  if (n == 0 && suffix_.empty() && prefix_.empty())
    return make_error(StatusCode::kInvalidArgument, "phase guard: nothing to evaluate (no template tokens, no content)");
  if (need + shift_ > a_->n_ctx())
    return make_error(StatusCode::kInvalidArgument,
                      "phase guard: the request needs %zu tokens (template %zu, content %zu, shift %u), the context "
                      "holds %u",
                      need + shift_, prefix_.size() + suffix_.size(), n, shift_, a_->n_ctx());
  auto run_branch = [&](Context& c, const std::vector<int32_t>& pads) -> Status {
    if (prefix_.empty()) c.reset();
    else PKV_RETURN_IF_ERROR(c.load_slot(0));
    if (!pads.empty()) PKV_RETURN_IF_ERROR(c.prefill(pads.data(), pads.size()));
    if (n > 0) PKV_RETURN_IF_ERROR(c.prefill(content, n));
    if (!suffix_.empty()) PKV_RETURN_IF_ERROR(c.prefill(suffix_.data(), suffix_.size()));
    return Status::Ok();
  };
  static const std::vector<int32_t> kNone;
  PKV_RETURN_IF_ERROR(run_branch(*a_, kNone));
  stats_.prefill_a = int64_t(n + suffix_.size());
  const int vocab = int(a_->model().config().vocab_size);
  stats_.first_top_p = std::exp(top_logprob(a_->logits(), vocab));
  stats_.guarded = b_ && stats_.first_top_p < threshold_;
  if (stats_.guarded) {
    PKV_RETURN_IF_ERROR(run_branch(*b_, pads_));
    stats_.prefill_b = int64_t(shift_ + n + suffix_.size());
  }
  choose();
  return Status::Ok();
}

void PhaseGuard::choose() {
  chosen_ = 0;
  if (!stats_.guarded) return;
  const int vocab = int(a_->model().config().vocab_size);
  // The more confident branch; A on a tie (equal evidence: keep the request's own phase).
  if (top_logprob(b_->logits(), vocab) > top_logprob(a_->logits(), vocab)) chosen_ = 1;
}

Status PhaseGuard::accept(int32_t token) {
  if (chosen_ == 1) ++stats_.steps_b;
  ++stats_.steps;
  PKV_RETURN_IF_ERROR(a_->decode(token));
  if (stats_.guarded) PKV_RETURN_IF_ERROR(b_->decode(token));
  choose();
  return Status::Ok();
}

uint32_t PhaseGuard::room() const {
  uint32_t r = a_->n_ctx() - a_->n_past();
  if (stats_.guarded) r = std::min(r, b_->n_ctx() - b_->n_past());
  return r;
}

}  // namespace phasekv
