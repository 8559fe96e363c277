// Period scans; the normalisation and the identities they rest on are in selftest_period.h.
#include "selftest_period.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "selftest_stats_detail.h"

namespace phasekv {
namespace selftest {

using namespace detail;

// ---- period detection -----------------------------------------------------------------------

std::vector<double> periodogram(const std::vector<double>& x) {
  const size_t T = x.size();
  PKV_ASSERT(T >= 1);
  const double xbar = mean_of(x);
  std::vector<double> I(T, 0.0);
  for (size_t k = 0; k < T; ++k) {
    double re = 0.0, im = 0.0;
    for (size_t t = 0; t < T; ++t) {
      // (k·t) mod T keeps the angle small: no precision lost for large k·t.
      const double ang = 2.0 * kPi * double((k * t) % T) / double(T);
      re += (x[t] - xbar) * std::cos(ang);
      im -= (x[t] - xbar) * std::sin(ang);
    }
    I[k] = (re * re + im * im) / double(T);
  }
  return I;
}

namespace {
// Folded means m_r, r = 0..P−1, of x[0..T).
void fold(const double* x, int32_t T, int32_t P, double* m) {
  std::fill(m, m + P, 0.0);
  for (int32_t t = 0; t < T; ++t) m[t % P] += x[t];
  for (int32_t r = 0; r < P; ++r) m[r] /= double(T / P);
}
double folded_power_raw(const double* x, int32_t T, int32_t P, std::vector<double>& m) {
  m.resize(size_t(P));
  fold(x, T, P, m.data());
  double mbar = 0.0;
  for (double v : m) mbar += v;
  mbar /= double(P);
  double ss = 0.0;
  for (double v : m) ss += (v - mbar) * (v - mbar);
  return double(T / P) * ss;
}
}  // namespace

double folded_power(const std::vector<double>& x, int32_t period) {
  const int32_t T = int32_t(x.size());
  PKV_ASSERT(period >= 1 && T >= period && T % period == 0);
  std::vector<double> m;
  return folded_power_raw(x.data(), T, period, m);
}

PeriodogramIdentity check_periodogram_identity(const std::vector<double>& x, int32_t period) {
  const int32_t T = int32_t(x.size());
  PKV_ASSERT(period >= 1 && T >= period && T % period == 0);
  const std::vector<double> I = periodogram(x);
  PeriodogramIdentity out;
  for (int32_t j = 1; j < period; ++j) out.harmonic_sum += I[size_t(j) * size_t(T / period)];
  out.folded_sum = folded_power(x, period);
  out.abs_error = std::fabs(out.harmonic_sum - out.folded_sum);
  return out;
}

namespace {

// Where the folded means' fundamental sinusoid is lowest: P(π − arg M_1)/2π mod P.
double fundamental_trough(const std::vector<double>& m) {
  const int32_t P = int32_t(m.size());
  double re = 0.0, im = 0.0;
  for (int32_t r = 0; r < P; ++r) {
    const double ang = 2.0 * kPi * double(r) / double(P);
    re += m[size_t(r)] * std::cos(ang);
    im -= m[size_t(r)] * std::sin(ang);
  }
  double trough = double(P) * (kPi - std::atan2(im, re)) / (2.0 * kPi);
  trough = std::fmod(trough, double(P));
  if (trough < 0.0) trough += double(P);
  return trough;
}

// Cluster-averaged series x̄_t of a [C, T] matrix.
void column_means(const ClusterMatrix& y, std::vector<double>& xbar) {
  xbar.assign(size_t(y.n_cols), 0.0);
  for (int32_t c = 0; c < y.n_clusters; ++c)
    for (int32_t t = 0; t < y.n_cols; ++t) xbar[size_t(t)] += y.at(c, t);
  for (double& v : xbar) v /= double(y.n_clusters);
}

// w = y with each row shuffled among the offsets that share t mod `mod` inside each contiguous
// block of length `block` (a multiple of mod). mod = block is a plain shuffle within blocks;
// mod = block = T shuffles whole rows.
void shuffle_rows(const ClusterMatrix& y, int32_t block, int32_t mod, Rng& rng,
                  ClusterMatrix& w) {
  w.v = y.v;
  const int32_t T = y.n_cols;
  for (int32_t c = 0; c < y.n_clusters; ++c) {
    double* row = &w.v[size_t(c) * size_t(T)];
    for (int32_t b0 = 0; b0 < T; b0 += block) {
      if (mod == block) {
        shuffle_strided(row + b0, block, 1, rng);
      } else {
        for (int32_t r = 0; r < mod; ++r) shuffle_strided(row + b0 + r, block / mod, mod, rng);
      }
    }
  }
}

}  // namespace

PeriodScan period_scan(const ClusterMatrix& y, const PeriodScanParams& params) {
  const int32_t C = y.n_clusters, T = y.n_cols;
  PKV_ASSERT(C >= 1 && T >= 2 && y.v.size() == size_t(C) * size_t(T));
  PKV_ASSERT(params.n_permutations >= 1);
  PeriodScan out;

  // Detrend: remove each row's least-squares slope (the level does not enter G_P).
  ClusterMatrix work = y;
  if (params.detrend) {
    const double tbar = 0.5 * double(T - 1);
    double stt = 0.0;
    for (int32_t t = 0; t < T; ++t) stt += (t - tbar) * (t - tbar);
    for (int32_t c = 0; c < C; ++c) {
      double sty = 0.0;
      for (int32_t t = 0; t < T; ++t) sty += (t - tbar) * y.at(c, t);
      const double slope = sty / stt;
      for (int32_t t = 0; t < T; ++t) work.at(c, t) = y.at(c, t) - slope * (t - tbar);
    }
  }

  std::vector<int32_t> periods;
  for (int32_t P = 2; P <= std::min(params.max_period, T); ++P)
    if (T % P == 0) periods.push_back(P);
  if (periods.empty()) return out;
  const size_t n_p = periods.size();

  std::vector<double> xbar, scratch;
  auto powers = [&](const ClusterMatrix& m, std::vector<double>& g) {
    column_means(m, xbar);
    g.resize(n_p);
    for (size_t i = 0; i < n_p; ++i)
      g[i] = folded_power_raw(xbar.data(), T, periods[i], scratch);
  };
  std::vector<double> g_obs, g_perm;
  powers(work, g_obs);

  out.candidates.resize(n_p);
  for (size_t i = 0; i < n_p; ++i) {
    PeriodCandidate& pc = out.candidates[i];
    pc.period = periods[i];
    pc.power = g_obs[i];
    pc.normalized = g_obs[i] / double(periods[i] - 1);
  }
  size_t best = 0;
  for (size_t i = 1; i < n_p; ++i)
    if (out.candidates[i].normalized > out.candidates[best].normalized) best = i;
  out.scan_argmax = periods[best];
  out.scan_stat = out.candidates[best].normalized;

  Rng rng(params.seed);
  ClusterMatrix w = work;
  const int32_t B = params.n_permutations;

  // Per-candidate block shuffles.
  for (size_t i = 0; i < n_p; ++i) {
    const int32_t P = periods[i];
    int64_t exceed = 0;
    for (int32_t b = 0; b < B; ++b) {
      shuffle_rows(work, P, P, rng, w);
      column_means(w, xbar);
      if (at_least(folded_power_raw(xbar.data(), T, P, scratch), g_obs[i])) ++exceed;
    }
    out.candidates[i].p = permutation_p(exceed, B);
  }

  // Scan over all candidates: full within-cluster shuffle.
  {
    int64_t exceed = 0;
    for (int32_t b = 0; b < B; ++b) {
      shuffle_rows(work, T, T, rng, w);
      powers(w, g_perm);
      double s = 0.0;
      for (size_t i = 0; i < n_p; ++i) s = std::max(s, g_perm[i] / double(periods[i] - 1));
      if (at_least(s, out.scan_stat)) ++exceed;
    }
    out.scan_p = permutation_p(exceed, B);
    out.detected = out.scan_p <= params.alpha;
  }

  // Smallest period whose multiples add no significant power.
  out.period = periods.back();
  for (size_t i = 0; i < n_p; ++i) {
    const int32_t P = periods[i];
    std::vector<size_t> mult;
    int32_t block = P;
    for (size_t k = i + 1; k < n_p; ++k) {
      if (periods[k] % P != 0) continue;
      mult.push_back(k);
      block = block / gcd_i(block, periods[k]) * periods[k];
    }
    if (mult.empty()) {
      out.candidates[i].multiples_p = 1.0;
      continue;
    }
    auto stat = [&](const std::vector<double>& g) {
      double s = 0.0;
      for (size_t k : mult) s = std::max(s, (g[k] - g[i]) / double(periods[k] - P));
      return s;
    };
    const double observed = stat(g_obs);
    int64_t exceed = 0;
    for (int32_t b = 0; b < B; ++b) {
      shuffle_rows(work, block, P, rng, w);
      powers(w, g_perm);
      if (at_least(stat(g_perm), observed)) ++exceed;
    }
    out.candidates[i].multiples_p = permutation_p(exceed, B);
  }
  for (size_t i = 0; i < n_p; ++i) {
    if (out.candidates[i].multiples_p > params.alpha) {
      out.period = periods[i];
      break;
    }
  }

  column_means(work, xbar);
  const int32_t P = out.period;
  out.folded_means.resize(size_t(P));
  fold(xbar.data(), T, P, out.folded_means.data());
  out.fundamental_trough = fundamental_trough(out.folded_means);
  return out;
}

// ---- period scan over absolute positions ------------------------------------------------------

namespace {
// G_Q of y grouped by pos mod Q; sums/counts are scratch of size Q.
double class_power(const ClusterMatrix& y, const ClusterMatrix& pos, int32_t Q, std::vector<double>& sums,
                   std::vector<double>& counts, double* means = nullptr) {
  sums.assign(size_t(Q), 0.0);
  counts.assign(size_t(Q), 0.0);
  double total = 0.0;
  for (size_t i = 0; i < y.v.size(); ++i) {
    const size_t q = size_t(int64_t(pos.v[i]) % Q);
    sums[q] += y.v[i];
    counts[q] += 1.0;
    total += y.v[i];
  }
  const double m = total / double(y.v.size());
  double g = 0.0;
  for (int32_t q = 0; q < Q; ++q) {
    const double mq = counts[size_t(q)] > 0 ? sums[size_t(q)] / counts[size_t(q)] : m;
    if (means) means[q] = mq;
    g += counts[size_t(q)] * (mq - m) * (mq - m);
  }
  return g;
}
}  // namespace

PeriodScan position_period_scan(const ClusterMatrix& y, const ClusterMatrix& pos, const PeriodScanParams& params) {
  const int32_t C = y.n_clusters, T = y.n_cols;
  PKV_ASSERT(C >= 1 && T >= 2 && y.v.size() == size_t(C) * size_t(T));
  PKV_ASSERT(pos.n_clusters == C && pos.n_cols == T && pos.v.size() == y.v.size());
  PKV_ASSERT(params.n_permutations >= 1 && params.max_period >= 2);
  for (double p : pos.v) PKV_ASSERT(p >= 0.0 && p == std::floor(p));
  PeriodScan out;
  std::vector<double> sums, counts;
  const int32_t n_p = params.max_period - 1;
  std::vector<double> g_obs(static_cast<size_t>(n_p));
  out.candidates.resize(size_t(n_p));
  for (int32_t i = 0; i < n_p; ++i) {
    const int32_t Q = i + 2;
    g_obs[size_t(i)] = class_power(y, pos, Q, sums, counts);
    PeriodCandidate& pc = out.candidates[size_t(i)];
    pc.period = Q;
    pc.power = g_obs[size_t(i)];
    pc.normalized = pc.power / double(Q - 1);
  }
  int32_t best = 0;
  for (int32_t i = 1; i < n_p; ++i)
    if (out.candidates[size_t(i)].normalized > out.candidates[size_t(best)].normalized) best = i;
  out.scan_argmax = best + 2;
  out.scan_stat = out.candidates[size_t(best)].normalized;

  Rng rng(params.seed);
  ClusterMatrix w = y;
  const int32_t B = params.n_permutations;
  std::vector<int64_t> exceed(static_cast<size_t>(n_p), 0);
  int64_t exceed_scan = 0;
  for (int32_t b = 0; b < B; ++b) {
    for (int32_t c = 0; c < C; ++c) shuffle_strided(&w.v[size_t(c) * size_t(T)], T, 1, rng);
    double sc = 0.0;
    for (int32_t i = 0; i < n_p; ++i) {
      const double g = class_power(w, pos, i + 2, sums, counts);
      if (at_least(g, g_obs[size_t(i)])) ++exceed[size_t(i)];
      sc = std::max(sc, g / double(i + 1));
    }
    if (at_least(sc, out.scan_stat)) ++exceed_scan;
  }
  for (int32_t i = 0; i < n_p; ++i) out.candidates[size_t(i)].p = permutation_p(exceed[size_t(i)], B);
  out.scan_p = permutation_p(exceed_scan, B);
  out.detected = out.scan_p <= params.alpha;
  out.period = out.scan_argmax;

  const int32_t P = out.period;
  out.folded_means.resize(size_t(P));
  class_power(y, pos, P, sums, counts, out.folded_means.data());
  out.fundamental_trough = fundamental_trough(out.folded_means);
  return out;
}

}  // namespace selftest
}  // namespace phasekv
