// The phase self-test run: the period, the planned probe loop and the statistics per protocol.
#include "selftest.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>

#include "context.h"
#include "phase_guard.h"

namespace phasekv {

// ---- the run -------------------------------------------------------------------------------

namespace {

uint32_t lcm_u(uint32_t a, uint32_t b) { return a / std::gcd(a, b) * b; }

}  // namespace

Status phase_period(const ModelSpec& spec, uint32_t* period, std::vector<uint32_t>* strides) {
  uint32_t P = 1;
  std::vector<uint32_t> st;
  for (const AttentionMemory& m : spec.layers)
    if (m.kind == MemoryKind::Compressed) {
      if (std::find(st.begin(), st.end(), m.stride) == st.end()) st.push_back(m.stride);
      P = lcm_u(P, m.stride);
      if (P > 4096) return make_error(StatusCode::kUnsupported, "the strides' lcm exceeds 4096");
    }
  std::sort(st.begin(), st.end());
  *period = P;
  if (strides) *strides = std::move(st);
  return Status::Ok();
}

Status run_selftest(const Model& model, const SelftestOptions& o, SelftestResult* out) {
  using clock = std::chrono::steady_clock;
  const auto t_start = clock::now();
  SelftestResult r;
  // Numbers first (NaN fails every comparison, so each check is written to let it through to
  // the error, never to the statistics' assertions).
  if (!(o.alpha > 0.0 && o.alpha <= 0.5))
    return make_error(StatusCode::kInvalidArgument, "alpha = %g: the false-alarm probability must be in (0, 0.5]",
                      o.alpha);
  if (!(o.delta >= 0.0 && o.delta <= 1.0))
    return make_error(StatusCode::kInvalidArgument, "delta = %g: the margin is an accuracy in [0, 1]", o.delta);
  if (!(o.budget_s >= 0.0) || std::isinf(o.budget_s))
    return make_error(StatusCode::kInvalidArgument, "budget_s = %g: a budget is a finite number of seconds >= 0",
                      o.budget_s);
  // Period: lcm of the compressed strides, an override, or a scan sweep.
  uint32_t P = 1;
  PKV_RETURN_IF_ERROR(phase_period(model.spec(), &P, &r.strides));
  for (const AttentionMemory& m : model.spec().layers)
    if (m.kind != MemoryKind::Full) r.max_local = std::max(r.max_local, m.local);
  if (o.period > 0) {
    P = uint32_t(o.period);
    r.period_source = "override";
  } else if (r.strides.empty()) {
    P = 16;  // no compressed layer: sweep 16 shifts, scan periods 2..16 over target positions
    r.period_source = "scan";
  } else {
    r.period_source = "strides";
  }
  if (P < 2)
    return make_error(StatusCode::kInvalidArgument,
                      "period %u: every position has the same residue, there is nothing to sweep (strides %s)", P,
                      r.strides.empty() ? "none" : "all 1");
  if (P > 256) return make_error(StatusCode::kInvalidArgument, "period %u: at most 256 residues are swept", P);
  r.period = P;
  if (!o.outer && !o.in_sequence) return make_error(StatusCode::kInvalidArgument, "no protocol selected");
  if (o.guard >= 0 && !o.outer)
    return make_error(StatusCode::kInvalidArgument,
                      "the guard is scored on the outer protocol (a guarded request shifts its whole content)");
  if (o.guard >= int32_t(P))
    return make_error(StatusCode::kInvalidArgument, "guard shift %d must be below the period %u", o.guard, P);
  if (!(o.guard_threshold >= 0.0))
    return make_error(StatusCode::kInvalidArgument, "guard threshold = %g must be a number >= 0", o.guard_threshold);

  const Tokenizer& tok = model.tokenizer();
  ProbeTemplate tpl;
  PKV_RETURN_IF_ERROR(parse_template(tok, o.template_text, &tpl));
  r.t0 = uint32_t(tpl.prefix.size());
  r.prefix_tokens = uint32_t(tpl.prefix.size());
  r.suffix_tokens = uint32_t(tpl.suffix.size());
  if (o.probe_tokens > model.config().max_positions)
    return make_error(StatusCode::kInvalidArgument, "probe length %u exceeds the model's max_positions %u",
                      o.probe_tokens, model.config().max_positions);
  ProbeLayout layout;
  layout.period = P;
  layout.length = o.probe_tokens;
  layout.min_distance = o.min_distance > 0 ? o.min_distance : r.max_local + P + 4;
  r.min_distance = layout.min_distance;
  layout.records = o.records;
  if (o.targets < 1 || o.targets > 64)
    return make_error(StatusCode::kInvalidArgument, "targets = %u: between 1 and 64 records are looked up per probe",
                      o.targets);
  // Fewer targets when the probe is too short for all of them (as with records); the error of
  // the one-target design when even that does not fit.
  layout.targets = std::min(o.targets, std::max<uint32_t>(o.records, 5) - 4);
  uint32_t n_records = 0;
  while (layout.targets > 1 && !probe_records(tpl, layout, &n_records).ok()) --layout.targets;
  r.targets = layout.targets;
  PKV_RETURN_IF_ERROR(probe_records(tpl, layout, &n_records));  // before the (slower) vocabulary scan
  ProbeVocab vocab;
  PKV_RETURN_IF_ERROR(build_probe_vocab(tok, n_records, &vocab));

  if (o.plan_only && o.samples <= 0)
    return make_error(StatusCode::kInvalidArgument, "plan_only needs samples > 0 (a budget is timed on probes)");
  std::unique_ptr<Context> ctx;
  if (!o.plan_only) {
    ContextParams cp;
    cp.n_ctx = o.probe_tokens;
    cp.n_batch = o.n_batch;
    cp.n_threads = o.n_threads;
    cp.backend = o.backend;
    cp.device = o.device;
    cp.snapshot_slots = 1;  // the shared prefix stays in backend memory
    if (!o.kernels.empty()) cp.kernels = o.kernels.c_str();
    PKV_RETURN_IF_ERROR(Context::create(model, cp, &ctx));
    r.kernels = ctx->kernels_name();
  }

  std::vector<Protocol> protos;
  if (o.outer) protos.push_back(Protocol::Outer);
  if (o.in_sequence) protos.push_back(Protocol::InSequence);

  // Clusters per stage: --samples, or what the budget allows after timing one probe.
  int32_t C = o.samples > 0 ? o.samples : 16;
  if (o.samples <= 0 && o.budget_s > 0) {
    layout.protocol = protos[0];
    std::vector<Probe> cal;
    PKV_RETURN_IF_ERROR(make_cluster(tpl, vocab, layout, o.seed, 0, &cal));
    const auto t0 = clock::now();
    ctx->reset();
    PKV_RETURN_IF_ERROR(ctx->prefill(cal[0].ids.data(), cal[0].ids.size()));
    const double per_probe = std::chrono::duration<double>(clock::now() - t0).count();
    const double probes = o.budget_s / std::max(per_probe, 1e-3);
    C = int32_t(probes / (2.0 * double(protos.size()) * P));
    if (C < 4)
      return make_error(StatusCode::kInvalidArgument,
                        "a budget of %.0f s allows %d samples per stage (one probe takes %.2f s); at least 4 are "
                        "needed: raise --budget or shorten the probes",
                        o.budget_s, C, per_probe);
    C = std::min(C, 256);
  }
  if (C < 4) return make_error(StatusCode::kInvalidArgument, "%d samples per stage: at least 4 are needed", C);

  // Every probe is built and checked before the loop.
  std::vector<std::vector<std::vector<Probe>>> clusters(protos.size());  // [protocol][sample][shift]
  for (size_t pi = 0; pi < protos.size(); ++pi) {
    layout.protocol = protos[pi];
    clusters[pi].resize(size_t(2 * C));
    for (int32_t c = 0; c < 2 * C; ++c) {
      PKV_RETURN_IF_ERROR(make_cluster(tpl, vocab, layout, o.seed, c, &clusters[pi][size_t(c)]));
      for (const Probe& p : clusters[pi][size_t(c)]) {
        std::string text;
        std::vector<int32_t> again;
        PKV_RETURN_IF_ERROR(tok.decode(p.ids, &text));
        PKV_RETURN_IF_ERROR(tok.encode(text, true, &again));
        if (again != p.ids) {
          size_t at = 0;
          while (at < again.size() && at < p.ids.size() && again[at] == p.ids[at]) ++at;
          return make_error(StatusCode::kInvalidArgument,
                            "a probe does not re-tokenize to its own ids (first difference at token %zu, template "
                            "prefix %zu tokens): the template text next to the slot merges with the probe",
                            at, tpl.prefix.size());
        }
      }
    }
  }

  // The probes' fingerprint (FNV-1a, 64 bits) over every id in run order: two runs with equal
  // digests evaluated the same probes.
  uint64_t digest = 14695981039346656037ull;
  for (const auto& proto : clusters)
    for (const auto& cluster : proto)
      for (const Probe& p : cluster)
        for (int32_t id : p.ids)
          for (int b = 0; b < 4; ++b) {
            digest ^= (uint32_t(id) >> (8 * b)) & 0xffu;
            digest *= 1099511628211ull;
          }
  r.probe_digest = digest;
  if (o.plan_only) {
    for (const auto& proto : clusters)
      for (const auto& cluster : proto)
        for (const Probe& p : cluster) {
          ++r.probes;
          r.naive_prefill_tokens += int64_t(p.ids.size());
        }
    r.seconds = std::chrono::duration<double>(clock::now() - t_start).count();
    *out = std::move(r);
    return Status::Ok();
  }

  // Results and snapshot buffers, planned before the loop.
  for (Protocol pr : protos) {
    ProtocolResult pres;
    pres.protocol = pr;
    pres.clusters = C;
    pres.targets = int32_t(layout.targets);
    for (selftest::Observations* ob : {&pres.stage1, &pres.stage2}) {
      ob->hit = selftest::ClusterMatrix::zeros(C, int32_t(P));
      ob->nll = selftest::ClusterMatrix::zeros(C, int32_t(P));
    }
    r.protocols.push_back(std::move(pres));
  }
  const double inv_k = 1.0 / double(layout.targets);
  // The guard's records (outer protocol): per sample, shift and target, the greedy hit, the
  // gold's NLL and the top log-probability (the trigger's and the rule's input).
  const size_t K = layout.targets;
  const bool guard_on = o.guard >= 0;
  struct Lookup {
    float hit, nll, top;
  };
  std::vector<Lookup> lookups(guard_on ? size_t(2 * C) * P * K : 0);
  const int n_vocab = int(model.config().vocab_size);
  SelftestProgress prog;
  prog.total = int64_t(protos.size()) * 2 * C * P;
  const auto t_loop = clock::now();

  // The probe loop: prefill the shared prefix once per cluster, snapshot, and for each shift
  // restore and prefill only the rest. No allocation from here on.
  for (size_t pi = 0; pi < protos.size(); ++pi) {
    ProtocolResult& pres = r.protocols[pi];
    for (int32_t c = 0; c < 2 * C; ++c) {
      selftest::Observations& ob = c < C ? pres.stage1 : pres.stage2;
      const int32_t row = c < C ? c : c - C;
      const std::vector<Probe>& probes = clusters[pi][size_t(c)];
      const uint32_t shared = probes[0].shared;
      ctx->reset();
      if (shared > 0) {
        PKV_RETURN_IF_ERROR(ctx->prefill(probes[0].ids.data(), shared));
        PKV_RETURN_IF_ERROR(ctx->save_slot(0));
        r.prefill_tokens += shared;
      }
      for (size_t k = 0; k < probes.size(); ++k) {
        const Probe& p = probes[k];
        if (shared > 0) {
          if (k > 0) PKV_RETURN_IF_ERROR(ctx->load_slot(0));
        } else {
          ctx->reset();
        }
        // Each target: prefill up to its lookup's "=", then the teacher-forced gold value's NLL
        // and greedy hit (the gold is the argmax), scored by the backend where the logits are.
        // A residue's observation in a sample is the mean over the K targets (each visits every
        // residue once per sample).
        uint32_t at = shared;
        for (size_t i = 0; i < p.golds.size(); ++i) {
          PKV_RETURN_IF_ERROR(ctx->prefill(p.ids.data() + at, p.score_end[i] - at));
          at = p.score_end[i];
          ScoreResult sc;
          PKV_RETURN_IF_ERROR(ctx->score(p.golds[i], &sc));
          ob.nll.at(row, p.residues[i]) += sc.nll * inv_k;
          ob.hit.at(row, p.residues[i]) += (sc.hit ? 1.0 : 0.0) * inv_k;
          if (guard_on && protos[pi] == Protocol::Outer)
            lookups[(size_t(c) * P + k) * K + i] = {sc.hit ? 1.0f : 0.0f, float(sc.nll),
                                                    float(top_logprob(ctx->logits(), n_vocab))};
        }
        r.prefill_tokens += int64_t(p.ids.size() - shared);
        r.naive_prefill_tokens += int64_t(p.ids.size());
        ++r.probes;
        if (o.progress) {
          prog.done = r.probes;
          prog.elapsed_s = std::chrono::duration<double>(clock::now() - t_loop).count();
          prog.eta_s = prog.elapsed_s / double(prog.done) * double(prog.total - prog.done);
          static const char* const kPhase[2][2] = {{"outer, stage 1", "outer, stage 2"},
                                                   {"in-sequence, stage 1", "in-sequence, stage 2"}};
          prog.phase = kPhase[protos[pi] == Protocol::Outer ? 0 : 1][c < C ? 0 : 1];
          prog.control = o.control;
          if (!o.progress(prog))
            return make_error(StatusCode::kCancelled, "the self-test was cancelled after %lld of %lld probes",
                              (long long)prog.done, (long long)prog.total);
        }
      }
    }
  }

  // Statistics per protocol; each protocol's confirmation runs at alpha / #protocols so the
  // union of flags keeps the run's false-alarm probability <= alpha.
  selftest::FlagParams fp;
  fp.alpha = o.alpha / double(protos.size());
  fp.margin = o.delta;
  fp.screen_deficit = o.delta / 2;
  for (ProtocolResult& pres : r.protocols) {
    selftest::Observations pooled;
    pooled.hit = selftest::ClusterMatrix::zeros(2 * C, int32_t(P));
    pooled.nll = selftest::ClusterMatrix::zeros(2 * C, int32_t(P));
    for (int32_t c = 0; c < 2 * C; ++c)
      for (uint32_t j = 0; j < P; ++j) {
        const selftest::Observations& s = c < C ? pres.stage1 : pres.stage2;
        pooled.hit.at(c, int32_t(j)) = s.hit.at(c % C, int32_t(j));
        pooled.nll.at(c, int32_t(j)) = s.nll.at(c % C, int32_t(j));
      }
    selftest::SummaryParams sp;
    sp.bootstrap.seed = o.seed;
    pres.summary = selftest::summarize(pooled, sp);
    // The gap this run could confirm: stage 2 alone (C clusters) at the confirmation's level
    // (alpha per protocol, Bonferroni over the P residues as the worst case of Holm), and never
    // below the practical margin a flag also needs.
    selftest::PowerParams pw;
    pw.alpha = fp.alpha;
    // One target per probe: the binomial formula; several: the data's own variance (the mean of
    // K targets is no Bernoulli variable, and how much K buys depends on how correlated the
    // targets of one sample are).
    pres.summary.mde_empirical = selftest::empirical_mde(pooled.hit, C, pw);
    pres.summary.mde = std::max(o.delta, layout.targets == 1 ? selftest::min_detectable_gap(
                                                                   pres.summary.mean_accuracy, C, int32_t(P), pw)
                                                             : pres.summary.mde_empirical);
    pres.screening = selftest::screen(pres.stage1, fp);
    pres.confirmation = selftest::confirm(pres.stage2, pres.screening.candidates, fp);
    pres.flagged = pres.confirmation.flagged;
    selftest::PeriodScanParams ps;
    ps.max_period = int32_t(P);
    ps.seed = o.seed;
    ps.detrend = false;
    ps.alpha = o.alpha;
    if (r.period_source == "scan") {
      // No compressed layer: scan every period 2..16 over the targets' absolute positions
      // (residues mod 16 only tell the divisors of 16 apart).
      const size_t pi = size_t(&pres - r.protocols.data());
      selftest::ClusterMatrix pos = selftest::ClusterMatrix::zeros(2 * C, int32_t(P));
      for (int32_t c = 0; c < 2 * C; ++c)
        for (const Probe& p : clusters[pi][size_t(c)])
          for (size_t i = 0; i < p.residues.size(); ++i)
            pos.at(c, p.residues[i]) += double(p.value_positions[i]) / double(p.residues.size());
      ps.max_period = 16;
      pres.period_scan = selftest::position_period_scan(pooled.hit, pos, ps);
    } else {
      pres.period_scan = selftest::period_scan(pooled.hit, ps);
    }
    pres.hits.assign(P, 0);
    pres.probability.assign(P, 0.0);
    for (uint32_t j = 0; j < P; ++j) {
      for (int32_t c = 0; c < 2 * C; ++c) {
        pres.hits[j] += int32_t(std::lround(pooled.hit.at(c, int32_t(j)) * double(layout.targets)));
        pres.probability[j] += std::exp(-pooled.nll.at(c, int32_t(j)));
      }
      pres.probability[j] /= double(2 * C);
    }
    for (int32_t f : pres.flagged)
      if (std::find(r.flagged.begin(), r.flagged.end(), f) == r.flagged.end()) r.flagged.push_back(f);
  }
  std::sort(r.flagged.begin(), r.flagged.end());

  if (guard_on) {
    GuardResult& g = r.guard;
    g.requested = true;
    g.threshold = o.guard_threshold;
    const size_t outer = size_t(std::find(protos.begin(), protos.end(), Protocol::Outer) - protos.begin());
    const ProtocolResult& pres = r.protocols[outer];
    int32_t first = 0;
    if (o.guard == 0) {
      // Chosen on stage 1, scored on stage 2.
      g.auto_shift = true;
      PhaseProfile prof;
      prof.period = P;
      prof.accuracy.assign(P, 0.0);
      for (uint32_t j = 0; j < P; ++j) {
        for (int32_t c = 0; c < C; ++c) prof.accuracy[j] += pres.stage1.hit.at(c, int32_t(j)) / double(C);
        if (prof.accuracy[j] > prof.accuracy[prof.strongest]) prof.strongest = j;
      }
      prof.weak = pres.screening.candidates;
      g.stage1_weak = prof.weak;
      g.shift = guard_shift(prof);
      first = C;
    } else {
      g.shift = uint32_t(o.guard);
    }
    g.clusters = 2 * C - first;
    selftest::Observations un, gu;
    for (selftest::Observations* ob : {&un, &gu}) {
      ob->hit = selftest::ClusterMatrix::zeros(g.clusters, int32_t(P));
      ob->nll = selftest::ClusterMatrix::zeros(g.clusters, int32_t(P));
    }
    int64_t n = 0, trig = 0, from_b = 0;
    for (int32_t c = first; c < 2 * C; ++c) {
      const std::vector<Probe>& probes = clusters[outer][size_t(c)];
      for (uint32_t k = 0; k < P; ++k)
        for (size_t i = 0; i < K; ++i) {
          const Lookup& a = lookups[(size_t(c) * P + k) * K + i];
          const Lookup& b = lookups[(size_t(c) * P + (k + g.shift) % P) * K + i];
          // The rule of PhaseGuard: branch B when A is not certain enough and B is more confident.
          const bool guarded = g.shift > 0 && std::exp(double(a.top)) < o.guard_threshold;
          const bool use_b = guarded && b.top > a.top;
          const Lookup& pick = use_b ? b : a;
          const int32_t res = probes[k].residues[i];
          un.hit.at(c - first, res) += a.hit * inv_k;
          un.nll.at(c - first, res) += a.nll * inv_k;
          gu.hit.at(c - first, res) += pick.hit * inv_k;
          gu.nll.at(c - first, res) += pick.nll * inv_k;
          ++n;
          trig += guarded;
          from_b += use_b;
        }
    }
    selftest::SummaryParams sp;
    sp.bootstrap.seed = o.seed;
    if (g.clusters >= 2) {
      g.unguarded = selftest::summarize(un, sp);
      g.guarded = selftest::summarize(gu, sp);
      // Paired gains: per sample, guarded minus unguarded, resampled by sample.
      g.worst_residue = g.unguarded.worst.naive_argmin;
      selftest::ClusterMatrix dw = selftest::ClusterMatrix::zeros(g.clusters, 1);
      selftest::ClusterMatrix dm = selftest::ClusterMatrix::zeros(g.clusters, int32_t(P));
      for (int32_t c = 0; c < g.clusters; ++c) {
        dw.at(c, 0) = gu.hit.at(c, g.worst_residue) - un.hit.at(c, g.worst_residue);
        for (uint32_t j = 0; j < P; ++j) dm.at(c, int32_t(j)) = gu.hit.at(c, int32_t(j)) - un.hit.at(c, int32_t(j));
      }
      selftest::BootstrapParams bp;
      bp.seed = o.seed;
      const selftest::BootstrapResult bw = selftest::cluster_bootstrap_mean(dw, bp);
      const selftest::BootstrapResult bm = selftest::cluster_bootstrap_mean(dm, bp);
      g.worst_gain = bw.estimate;
      g.worst_gain_ci = bw.ci;
      g.mean_gain = bm.estimate;
      g.mean_gain_ci = bm.ci;
    }
    g.triggered = n ? double(trig) / double(n) : 0.0;
    g.from_b = n ? double(from_b) / double(n) : 0.0;
  }
  r.seconds = std::chrono::duration<double>(clock::now() - t_start).count();
  *out = std::move(r);
  return Status::Ok();
}

}  // namespace phasekv
