// Statistics of the phase self-test; formulas and their sources are in selftest_stats.h.
#include "selftest_stats.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "selftest_stats_detail.h"

namespace phasekv {
namespace selftest {

using namespace detail;

// ---- data -------------------------------------------------------------------------------

ClusterMatrix ClusterMatrix::zeros(int32_t n_clusters, int32_t n_cols) {
  PKV_ASSERT(n_clusters >= 0 && n_cols >= 0);
  ClusterMatrix m;
  m.n_clusters = n_clusters;
  m.n_cols = n_cols;
  m.v.assign(size_t(n_clusters) * size_t(n_cols), 0.0);
  return m;
}

Status check_observations(const Observations& obs) {
  const ClusterMatrix& h = obs.hit;
  if (h.n_clusters < 2)
    return make_error(StatusCode::kInvalidArgument,
                      "self-test stats: hit.n_clusters = %d, need at least 2 clusters",
                      h.n_clusters);
  if (h.n_cols < 2)
    return make_error(StatusCode::kInvalidArgument,
                      "self-test stats: hit.n_cols = %d, need at least 2 residues", h.n_cols);
  if (h.v.size() != size_t(h.n_clusters) * size_t(h.n_cols))
    return make_error(StatusCode::kInvalidArgument,
                      "self-test stats: hit.v has %zu values, expected %d x %d", h.v.size(),
                      h.n_clusters, h.n_cols);
  for (size_t i = 0; i < h.v.size(); ++i) {
    if (!(h.v[i] >= 0.0 && h.v[i] <= 1.0))
      return make_error(StatusCode::kInvalidArgument,
                        "self-test stats: hit[%zu][%zu] = %g, hits (or a sample's mean over its targets) must be "
                        "in [0, 1]",
                        i / size_t(h.n_cols), i % size_t(h.n_cols), h.v[i]);
  }
  const ClusterMatrix& l = obs.nll;
  if (l.empty() && l.v.empty()) return Status::Ok();
  if (l.n_clusters != h.n_clusters || l.n_cols != h.n_cols)
    return make_error(StatusCode::kInvalidArgument,
                      "self-test stats: nll is %d x %d but hit is %d x %d", l.n_clusters,
                      l.n_cols, h.n_clusters, h.n_cols);
  if (l.v.size() != h.v.size())
    return make_error(StatusCode::kInvalidArgument,
                      "self-test stats: nll.v has %zu values, expected %zu", l.v.size(),
                      h.v.size());
  for (size_t i = 0; i < l.v.size(); ++i) {
    if (!std::isfinite(l.v[i]))
      return make_error(StatusCode::kInvalidArgument,
                        "self-test stats: nll[%zu][%zu] = %g is not finite",
                        i / size_t(l.n_cols), i % size_t(l.n_cols), l.v[i]);
  }
  return Status::Ok();
}

std::vector<double> residue_means(const ClusterMatrix& y) {
  PKV_ASSERT(y.n_clusters >= 1 && y.v.size() == size_t(y.n_clusters) * size_t(y.n_cols));
  std::vector<double> m(size_t(y.n_cols), 0.0);
  for (int32_t c = 0; c < y.n_clusters; ++c)
    for (int32_t j = 0; j < y.n_cols; ++j) m[size_t(j)] += y.at(c, j);
  for (double& v : m) v /= double(y.n_clusters);
  return m;
}

std::vector<double> cluster_means(const ClusterMatrix& y) {
  PKV_ASSERT(y.n_cols >= 1 && y.v.size() == size_t(y.n_clusters) * size_t(y.n_cols));
  std::vector<double> m(size_t(y.n_clusters), 0.0);
  for (int32_t c = 0; c < y.n_clusters; ++c) {
    double s = 0.0;
    for (int32_t j = 0; j < y.n_cols; ++j) s += y.at(c, j);
    m[size_t(c)] = s / double(y.n_cols);
  }
  return m;
}

// ---- seeded generator ---------------------------------------------------------------------

namespace {
uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
}  // namespace

Rng::Rng(uint64_t seed) {
  uint64_t x = seed;
  for (uint64_t& s : s_) s = splitmix64(x);
}

uint64_t Rng::next() {
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

uint64_t Rng::below(uint64_t n) {
  PKV_ASSERT(n >= 1);
  // Accept x >= 2^64 mod n: the accepted range holds a whole number of copies of [0, n).
  const uint64_t threshold = (0 - n) % n;
  for (;;) {
    const uint64_t x = next();
    if (x >= threshold) return x % n;
  }
}

double Rng::uniform() { return double(next() >> 11) * 0x1.0p-53; }

// ---- normal and chi-square distributions ----------------------------------------------------

double normal_cdf(double x) { return 0.5 * std::erfc(-x * 0.70710678118654752440); }

double normal_quantile(double p) {
  if (std::isnan(p)) return p;
  if (p <= 0.0) return -kInf;
  if (p >= 1.0) return kInf;
  // 1 − p is exact for p in [½, 1] (Sterbenz), and the lower tail keeps Φ(x) − p relative.
  if (p > 0.5) return -normal_quantile(1.0 - p);

  // Acklam's rational approximation.
  static const double a[6] = {-3.969683028665376e+01, 2.209460984245205e+02,
                              -2.759285104469687e+02, 1.383577518672690e+02,
                              -3.066479806614716e+01, 2.506628277459239e+00};
  static const double b[5] = {-5.447609879822406e+01, 1.615858368580409e+02,
                              -1.556989798598866e+02, 6.680131188771972e+01,
                              -1.328068155288572e+01};
  static const double c[6] = {-7.784894002430293e-03, -3.223964580411365e-01,
                              -2.400758277161838e+00, -2.549732539343734e+00,
                              4.374664141464968e+00, 2.938163982698783e+00};
  static const double d[4] = {7.784695709041462e-03, 3.224671290700398e-01,
                              2.445134137142996e+00, 3.754408661907416e+00};
  double x;
  if (p < 0.02425) {
    const double q = std::sqrt(-2.0 * std::log(p));
    x = (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
        ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1.0);
  } else {
    const double q = p - 0.5;
    const double r = q * q;
    x = (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
        (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1.0);
  }
  // One Halley step on f(x) = Φ(x) − p (third-order: 1e-9 → below 1e-16). In the extreme tail
  // e^{x²/2} overflows; Acklam alone is then kept.
  const double e = normal_cdf(x) - p;
  const double u = e * std::sqrt(2.0 * kPi) * std::exp(0.5 * x * x);
  if (std::isfinite(u)) x = x - u / (1.0 + 0.5 * x * u);
  return x;
}

double chi2_sf(double x, int32_t df) {
  PKV_ASSERT(df >= 1);
  if (std::isnan(x)) return x;
  if (x <= 0.0) return 1.0;
  if (std::isinf(x)) return 0.0;
  double sum = 0.0;
  if (df % 2 == 0) {
    // e^{−x/2}·Σ_{j<k} (x/2)^j/j!
    double log_term = -0.5 * x;
    const double log_half_x = std::log(0.5 * x);
    for (int32_t j = 0; j < df / 2; ++j) {
      if (j > 0) log_term += log_half_x - std::log(double(j));
      sum += std::exp(log_term);
    }
  } else {
    // erfc(√(x/2)) + √(2x/π)·e^{−x/2}·Σ_{j=1..k} x^{j−1}/(1·3·…·(2j−1))
    sum = std::erfc(std::sqrt(0.5 * x));
    double log_term = 0.5 * std::log(2.0 * x / kPi) - 0.5 * x;
    const double log_x = std::log(x);
    for (int32_t j = 1; j <= (df - 1) / 2; ++j) {
      if (j > 1) log_term += log_x - std::log(double(2 * j - 1));
      sum += std::exp(log_term);
    }
  }
  return std::min(1.0, sum);
}

// ---- intervals and clustering ---------------------------------------------------------------

Interval wilson(double successes, double n, double z) {
  if (!(n > 0.0)) return Interval{0.0, 1.0};
  const double p = std::min(1.0, std::max(0.0, successes / n));
  const double z2 = z * z;
  const double denom = 1.0 + z2 / n;
  const double centre = (p + z2 / (2.0 * n)) / denom;
  const double half = z / denom * std::sqrt(p * (1.0 - p) / n + z2 / (4.0 * n * n));
  Interval ci;
  ci.lo = p <= 0.0 ? 0.0 : std::max(0.0, centre - half);
  ci.hi = p >= 1.0 ? 1.0 : std::min(1.0, centre + half);
  return ci;
}

double icc_anova(const ClusterMatrix& y) {
  PKV_ASSERT(y.n_clusters >= 2 && y.n_cols >= 2);
  const std::vector<double> ybar = cluster_means(y);
  const double grand = mean_of(ybar);
  const double m = double(y.n_cols);
  const double C = double(y.n_clusters);
  double ssb = 0.0, ssw = 0.0;
  for (int32_t c = 0; c < y.n_clusters; ++c) {
    const double dc = ybar[size_t(c)] - grand;
    ssb += m * dc * dc;
    for (int32_t j = 0; j < y.n_cols; ++j) {
      const double dw = y.at(c, j) - ybar[size_t(c)];
      ssw += dw * dw;
    }
  }
  const double msb = ssb / (C - 1.0);
  const double msw = ssw / (C * (m - 1.0));
  const double denom = msb + (m - 1.0) * msw;
  if (!(denom > 0.0)) return 1.0;
  return (msb - msw) / denom;
}

double design_effect(double m, double rho) {
  PKV_ASSERT(m >= 1.0);
  const double r = std::isnan(rho) ? 1.0 : std::min(1.0, std::max(0.0, rho));
  return 1.0 + (m - 1.0) * r;
}

double effective_n(double n_obs, double m, double rho) { return n_obs / design_effect(m, rho); }

double residue_effective_n(int32_t n_clusters, int32_t queries_per_cluster, double rho_queries) {
  PKV_ASSERT(n_clusters >= 0 && queries_per_cluster >= 1);
  const double q = double(queries_per_cluster);
  return effective_n(double(n_clusters) * q, q, rho_queries);
}

double cluster_robust_se(const ClusterMatrix& y) {
  PKV_ASSERT(y.n_clusters >= 2);
  return sd_of(cluster_means(y)) / std::sqrt(double(y.n_clusters));
}

BootstrapResult cluster_bootstrap_mean(const ClusterMatrix& y, const BootstrapParams& params) {
  PKV_ASSERT(y.n_clusters >= 1 && params.n_replicates >= 1);
  PKV_ASSERT(params.level > 0.0 && params.level < 1.0);
  const std::vector<double> ybar = cluster_means(y);
  const size_t C = ybar.size();
  BootstrapResult out;
  // The estimate and every replicate sum C cluster means in the same way, so a constant
  // matrix gives replicates bit-equal to the estimate (a degenerate interval).
  double s = 0.0;
  for (double v : ybar) s += v;
  out.estimate = s / double(C);

  Rng rng(params.seed);
  std::vector<double> reps(static_cast<size_t>(params.n_replicates));
  for (double& rep : reps) {
    double sum = 0.0;
    for (size_t i = 0; i < C; ++i) sum += ybar[size_t(rng.below(C))];
    rep = sum / double(C);
  }
  out.se = sd_of(reps);
  std::sort(reps.begin(), reps.end());
  const double tail = 0.5 * (1.0 - params.level);
  out.ci.lo = quantile_sorted(reps, tail);
  out.ci.hi = quantile_sorted(reps, 1.0 - tail);
  return out;
}

// ---- multiplicity -----------------------------------------------------------------------------

HolmResult holm(const std::vector<double>& p, double alpha) {
  const size_t m = p.size();
  for (double v : p) PKV_ASSERT(v >= 0.0 && v <= 1.0);
  std::vector<size_t> order(m);
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return p[a] < p[b]; });
  HolmResult out;
  out.adjusted.assign(m, 1.0);
  out.reject.assign(m, false);
  double running = 0.0;  // the running max keeps the adjusted values monotone (step-down)
  for (size_t j = 0; j < m; ++j) {
    const size_t i = order[j];
    running = std::max(running, std::min(1.0, double(m - j) * p[i]));
    out.adjusted[i] = running;
    out.reject[i] = running <= alpha;
  }
  return out;
}

// ---- paired leave-one-out tests ---------------------------------------------------------------

std::vector<LooTest> loo_tests(const ClusterMatrix& y, Worse worse, double margin) {
  PKV_ASSERT(y.n_clusters >= 2 && y.n_cols >= 2);
  PKV_ASSERT(y.v.size() == size_t(y.n_clusters) * size_t(y.n_cols));
  const int32_t C = y.n_clusters, P = y.n_cols;
  std::vector<double> row_sum(size_t(C), 0.0);
  for (int32_t c = 0; c < C; ++c)
    for (int32_t r = 0; r < P; ++r) row_sum[size_t(c)] += y.at(c, r);

  std::vector<LooTest> out(static_cast<size_t>(P));
  std::vector<double> d(static_cast<size_t>(C));
  for (int32_t r = 0; r < P; ++r) {
    for (int32_t c = 0; c < C; ++c) {
      const double v = y.at(c, r);
      d[size_t(c)] = v - (row_sum[size_t(c)] - v) / double(P - 1);
    }
    LooTest& t = out[size_t(r)];
    t.residue = r;
    t.mean_diff = mean_of(d);
    t.sd_diff = sd_of(d);
    t.deficit = worse == Worse::kLower ? -t.mean_diff : t.mean_diff;
    const double num = margin - t.deficit;
    const double se = t.sd_diff / std::sqrt(double(C));
    if (se > 0.0) {
      t.z = num / se;
    } else {
      t.z = num < 0.0 ? -kInf : kInf;
    }
    t.p = normal_cdf(t.z);
  }
  return out;
}

CochranQ cochran_q(const ClusterMatrix& hit) {
  PKV_ASSERT(hit.n_clusters >= 1 && hit.n_cols >= 2);
  const double R = double(hit.n_cols);
  double sum_col_sq = 0.0, sum_row_sq = 0.0, total = 0.0;
  for (int32_t r = 0; r < hit.n_cols; ++r) {
    double col = 0.0;
    for (int32_t c = 0; c < hit.n_clusters; ++c) col += hit.at(c, r);
    sum_col_sq += col * col;
    total += col;
  }
  for (int32_t c = 0; c < hit.n_clusters; ++c) {
    double row = 0.0;
    for (int32_t r = 0; r < hit.n_cols; ++r) row += hit.at(c, r);
    sum_row_sq += row * row;
  }
  CochranQ out;
  out.df = hit.n_cols - 1;
  const double denom = R * total - sum_row_sq;
  if (!(denom > 0.0)) return out;
  out.q = std::max(0.0, (R - 1.0) * (R * sum_col_sq - total * total) / denom);
  out.p = chi2_sf(out.q, out.df);
  return out;
}

// ---- worst residue and gap --------------------------------------------------------------------

namespace {
// A_r over the clusters with index ≡ parity (mod 2).
std::vector<double> half_means(const ClusterMatrix& y, int32_t parity) {
  std::vector<double> m(size_t(y.n_cols), 0.0);
  int32_t n = 0;
  for (int32_t c = parity; c < y.n_clusters; c += 2, ++n)
    for (int32_t j = 0; j < y.n_cols; ++j) m[size_t(j)] += y.at(c, j);
  for (double& v : m) v /= double(n);
  return m;
}
// mean of the others − a[r]
double deficit_of(const std::vector<double>& a, int32_t r) {
  double others = 0.0;
  for (size_t j = 0; j < a.size(); ++j)
    if (int32_t(j) != r) others += a[j];
  return others / double(a.size() - 1) - a[size_t(r)];
}
}  // namespace

SplitMin split_sample_min(const ClusterMatrix& hit) {
  PKV_ASSERT(hit.n_clusters >= 2 && hit.n_cols >= 2);
  const std::vector<double> all = residue_means(hit);
  const std::vector<double> even = half_means(hit, 0);
  const std::vector<double> odd = half_means(hit, 1);
  SplitMin s;
  s.naive_argmin = argmin_of(all);
  s.naive_min = all[size_t(s.naive_argmin)];
  s.naive_deficit = deficit_of(all, s.naive_argmin);
  s.argmin_even = argmin_of(even);
  s.argmin_odd = argmin_of(odd);
  s.split_min = 0.5 * (odd[size_t(s.argmin_even)] + even[size_t(s.argmin_odd)]);
  s.split_deficit = 0.5 * (deficit_of(odd, s.argmin_even) + deficit_of(even, s.argmin_odd));
  s.optimism = s.split_min - s.naive_min;
  s.deficit_optimism = s.naive_deficit - s.split_deficit;
  return s;
}

double expected_normal_range(int32_t r) {
  PKV_ASSERT(r >= 1);
  if (r == 1) return 0.0;
  const double R = double(r);
  auto f = [R](double x) {
    const double F = normal_cdf(x);
    const double S = normal_cdf(-x);  // 1 − Φ(x) without cancellation
    return 1.0 - std::pow(F, R) - std::pow(S, R);
  };
  const int n = 4800;  // even; h = 0.005
  const double a = -12.0, b = 12.0, h = (b - a) / n;
  double s = f(a) + f(b);
  for (int i = 1; i < n; ++i) s += (i % 2 == 1 ? 4.0 : 2.0) * f(a + h * i);
  return s * h / 3.0;
}

GapStats gap_stats(const ClusterMatrix& hit) {
  PKV_ASSERT(hit.n_clusters >= 1 && hit.n_cols >= 2);
  const std::vector<double> a = residue_means(hit);
  GapStats g;
  g.mean = mean_of(a);
  g.argmax = argmax_of(a);
  g.argmin = argmin_of(a);
  g.max = a[size_t(g.argmax)];
  g.min = a[size_t(g.argmin)];
  g.gap = g.max - g.min;
  g.sd = sd_of(a);
  g.relative_gap = g.mean > 0.0 ? g.gap / g.mean : 0.0;
  const double pq = std::max(0.0, g.mean * (1.0 - g.mean));
  g.se_null = std::sqrt(pq / double(hit.n_clusters));
  g.gap_se_units = g.se_null > 0.0 ? g.gap / g.se_null : 0.0;
  g.d_r = expected_normal_range(hit.n_cols);
  g.expected_null_gap = g.d_r * g.se_null;
  return g;
}

GapNull gap_permutation_null(const ClusterMatrix& hit, int32_t n_permutations, uint64_t seed) {
  PKV_ASSERT(hit.n_clusters >= 1 && hit.n_cols >= 2 && n_permutations >= 1);
  const int32_t C = hit.n_clusters, P = hit.n_cols;
  auto gap_of = [](const std::vector<double>& sums) {
    const auto mm = std::minmax_element(sums.begin(), sums.end());
    return *mm.second - *mm.first;
  };
  std::vector<double> sums(size_t(P), 0.0);
  for (int32_t c = 0; c < C; ++c)
    for (int32_t r = 0; r < P; ++r) sums[size_t(r)] += hit.at(c, r);
  // Work on column sums; the gap of the means is the gap of the sums over C.
  const double observed = gap_of(sums);

  Rng rng(seed);
  std::vector<double> row(static_cast<size_t>(P));
  double total = 0.0;
  int64_t exceed = 0;
  for (int32_t b = 0; b < n_permutations; ++b) {
    std::fill(sums.begin(), sums.end(), 0.0);
    for (int32_t c = 0; c < C; ++c) {
      for (int32_t r = 0; r < P; ++r) row[size_t(r)] = hit.at(c, r);
      shuffle_strided(row.data(), P, 1, rng);
      for (int32_t r = 0; r < P; ++r) sums[size_t(r)] += row[size_t(r)];
    }
    const double g = gap_of(sums);
    total += g;
    if (at_least(g, observed)) ++exceed;
  }
  GapNull out;
  out.mean_gap = total / double(n_permutations) / double(C);
  out.p = permutation_p(exceed, n_permutations);
  return out;
}

// ---- power ----------------------------------------------------------------------------------

namespace {
double power_k(int32_t n_residues, const PowerParams& params) {
  PKV_ASSERT(n_residues >= 2);
  PKV_ASSERT(params.alpha > 0.0 && params.alpha < 1.0);
  PKV_ASSERT(params.power > 0.0 && params.power < 1.0);
  const double zs = normal_quantile(1.0 - params.alpha / double(n_residues)) +
                    normal_quantile(params.power);
  return zs * zs;
}
}  // namespace

double min_detectable_gap(double p_healthy, int32_t n_clusters, int32_t n_residues,
                          const PowerParams& params) {
  PKV_ASSERT(p_healthy >= 0.0 && p_healthy <= 1.0 && n_clusters >= 1);
  const double K = power_k(n_residues, params);
  const double p = p_healthy, q = 1.0 - p_healthy;
  const double R = double(n_residues);
  const double a = double(n_clusters) + K;
  const double b = K * (p - q);
  const double c = K * p * q * R / (R - 1.0);
  const double delta = (b + std::sqrt(b * b + 4.0 * a * c)) / (2.0 * a);
  return std::min(delta, p_healthy);
}

double empirical_mde(const ClusterMatrix& y, int32_t n_clusters, const PowerParams& params) {
  PKV_ASSERT(y.n_clusters >= 2 && y.n_cols >= 2 && n_clusters >= 1);
  const int32_t C = y.n_clusters, R = y.n_cols;
  double var_sum = 0.0;
  std::vector<double> d(static_cast<size_t>(C), 0.0);
  for (int32_t r = 0; r < R; ++r) {
    for (int32_t c = 0; c < C; ++c) {
      double others = 0.0;
      for (int32_t q = 0; q < R; ++q)
        if (q != r) others += y.at(c, q);
      d[size_t(c)] = y.at(c, r) - others / double(R - 1);
    }
    const double sd = sd_of(d);
    var_sum += sd * sd;
  }
  return std::sqrt(power_k(R, params) * var_sum / double(R) / double(n_clusters));
}

int64_t required_clusters(double p_healthy, double gap, int32_t n_residues,
                          const PowerParams& params) {
  PKV_ASSERT(gap > 0.0 && gap <= p_healthy && p_healthy <= 1.0);
  const double K = power_k(n_residues, params);
  const double ps = p_healthy, pw = p_healthy - gap;
  const double var = pw * (1.0 - pw) + ps * (1.0 - ps) / double(n_residues - 1);
  return int64_t(std::ceil(K * var / (gap * gap)));
}

// ---- the whole report -----------------------------------------------------------------------

Summary summarize(const Observations& obs, const SummaryParams& params) {
  const ClusterMatrix& hit = obs.hit;
  PKV_ASSERT(hit.n_clusters >= 2 && hit.n_cols >= 2);
  const int32_t C = hit.n_clusters, P = hit.n_cols;
  const bool has_nll = !obs.nll.empty();
  Summary s;
  s.n_clusters = C;
  s.n_residues = P;

  const std::vector<double> acc = residue_means(hit);
  const std::vector<LooTest> hit_tests = loo_tests(hit, Worse::kLower);
  std::vector<double> p_hit;
  for (const LooTest& t : hit_tests) p_hit.push_back(t.p);
  const HolmResult h = holm(p_hit);  // only the adjusted values are reported
  std::vector<double> nll;
  std::vector<LooTest> nll_tests;
  if (has_nll) {
    nll = residue_means(obs.nll);
    nll_tests = loo_tests(obs.nll, Worse::kHigher);
  }
  const double n_res = residue_effective_n(C);
  s.residues.resize(size_t(P));
  for (int32_t r = 0; r < P; ++r) {
    ResidueRow& row = s.residues[size_t(r)];
    row.accuracy = acc[size_t(r)];
    row.accuracy_ci = wilson(row.accuracy * n_res, n_res, params.z);
    row.hit_test = hit_tests[size_t(r)];
    row.hit_holm_p = h.adjusted[size_t(r)];
    if (has_nll) {
      row.nll = nll[size_t(r)];
      row.nll_excess = -deficit_of(nll, r);
      row.nll_test = nll_tests[size_t(r)];
    }
  }

  s.icc = icc_anova(hit);
  s.design_effect = design_effect(double(P), s.icc);
  s.mean_n_eff = double(C) * double(P) / s.design_effect;
  s.gap = gap_stats(hit);
  s.mean_accuracy = s.gap.mean;
  s.mean_wilson = wilson(s.mean_accuracy * s.mean_n_eff, s.mean_n_eff, params.z);
  s.mean_cluster_se = cluster_robust_se(hit);
  s.mean_bootstrap = cluster_bootstrap_mean(hit, params.bootstrap);
  s.worst = split_sample_min(hit);
  s.cochran = cochran_q(hit);
  s.mde = min_detectable_gap(s.mean_accuracy, C, P, params.power);
  s.mde_empirical = empirical_mde(hit, C, params.power);
  return s;
}

}  // namespace selftest
}  // namespace phasekv
