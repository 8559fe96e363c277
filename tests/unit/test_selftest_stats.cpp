// Self-test statistics (runtime/selftest_stats.h) against values worked by hand in the
// comments, identities that hold exactly, the sample-size table of
// docs/research/evaluation.md §3.7, and Monte-Carlo checks of the two-stage false-alarm bound.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "selftest_flags.h"
#include "selftest_period.h"
#include "selftest_stats.h"

using namespace phasekv::selftest;

namespace {

ClusterMatrix matrix(int32_t rows, int32_t cols, const std::vector<double>& v) {
  ClusterMatrix m = ClusterMatrix::zeros(rows, cols);
  REQUIRE(v.size() == m.v.size());
  m.v = v;
  return m;
}

// The 4 x 3 matrix worked by hand below (clusters are rows, residues columns):
//   c0: 1 1 1
//   c1: 0 1 1
//   c2: 0 1 0
//   c3: 1 1 1
// A_r = (2/4, 4/4, 3/4) = (0.5, 1, 0.75), Ā = 9/12 = 0.75.
ClusterMatrix hand_matrix() { return matrix(4, 3, {1, 1, 1, 0, 1, 1, 0, 1, 0, 1, 1, 1}); }

// Synthetic run: hit ~ Bernoulli(p_r) (times a cluster-level factor when `cluster_effect`),
// nll = 0.2 + noise for a hit and 2.0 + noise for a miss.
struct Synth {
  std::vector<double> p;        // [P] per-residue hit probability
  bool cluster_effect = false;  // cluster difficulty: p_cr = p_r + u_c, u_c in {−0.2, 0, +0.2}
};
Observations synth(const Synth& s, int32_t n_clusters, Rng& rng) {
  const int32_t P = int32_t(s.p.size());
  Observations o;
  o.hit = ClusterMatrix::zeros(n_clusters, P);
  o.nll = ClusterMatrix::zeros(n_clusters, P);
  for (int32_t c = 0; c < n_clusters; ++c) {
    const double u = s.cluster_effect ? 0.2 * (double(rng.below(3)) - 1.0) : 0.0;
    for (int32_t r = 0; r < P; ++r) {
      const double pr = std::min(1.0, std::max(0.0, s.p[size_t(r)] + u));
      const bool hit = rng.uniform() < pr;
      o.hit.at(c, r) = hit ? 1.0 : 0.0;
      o.nll.at(c, r) = (hit ? 0.2 : 2.0) + 0.3 * rng.uniform();
    }
  }
  return o;
}

}  // namespace

TEST_CASE("selftest stats: normal cdf and quantile at known values") {
  // Reference values from mpmath at 40 digits.
  CHECK(normal_cdf(0.0) == 0.5);
  CHECK(normal_cdf(1.959963984540054) == doctest::Approx(0.975).epsilon(1e-15));
  CHECK(normal_cdf(-1.0) == doctest::Approx(0.15865525393145705).epsilon(1e-14));
  CHECK(normal_cdf(-8.0) == doctest::Approx(6.220960574271784e-16).epsilon(1e-13));
  CHECK(normal_cdf(-37.5) == doctest::Approx(4.605353009581955e-308).epsilon(1e-12));
  CHECK(normal_quantile(0.5) == 0.0);
  CHECK(normal_quantile(0.95) == doctest::Approx(1.6448536269514722).epsilon(1e-15));
  CHECK(normal_quantile(0.975) == doctest::Approx(1.959963984540054).epsilon(1e-15));
  CHECK(normal_quantile(0.8) == doctest::Approx(0.8416212335729143).epsilon(1e-15));
  CHECK(normal_quantile(0.05) == doctest::Approx(-1.6448536269514729).epsilon(1e-14));
  CHECK(normal_quantile(1e-10) == doctest::Approx(-6.361340902404056).epsilon(1e-14));
  CHECK(normal_quantile(0.99375) == doctest::Approx(2.497705474412373).epsilon(1e-14));
  CHECK(normal_quantile(0.0) == -INFINITY);
  CHECK(normal_quantile(1.0) == INFINITY);
}

TEST_CASE("selftest stats: normal quantile round trip") {
  // p → x = Φ⁻¹(p) → Φ(x), from 0.5 down to 1e-300. An error of k ulp in x moves p by a
  // relative k·|x|·ulp(x)·φ(x)/Φ(x) ≈ k·x²·1.1e-16, so the error is measured in those units.
  double worst = 0.0;
  for (double p = 0.5; p > 1e-300; p *= 0.37) {
    const double x = normal_quantile(p);
    const double back = normal_cdf(x);
    worst = std::max(worst, std::fabs(back - p) / p / ((1.0 + x * x) * 1.1e-16));
  }
  MESSAGE("worst round-trip error of Φ(Φ⁻¹(p)) for p in [1e-300, 0.5]: " << worst
                                                                       << " ulp of x");
  CHECK(worst < 4.0);
  // x → Φ → Φ⁻¹ on the lower half (full relative accuracy) and a little above 0.
  for (double x = -37.0; x <= 3.0; x += 0.125) {
    CHECK(normal_quantile(normal_cdf(x)) == doctest::Approx(x).epsilon(1e-12).scale(1.0));
  }
  // Symmetry: Φ⁻¹(1 − p) = −Φ⁻¹(p) exactly when 1 − p is exact.
  for (double p : {0x1p-20, 0x1p-10, 0.125, 0.25, 0.375})
    CHECK(normal_quantile(1.0 - p) == -normal_quantile(p));
}

TEST_CASE("selftest stats: chi-square upper tail closed forms") {
  // df = 2: P(χ² > x) = e^{−x/2}; x = 2·ln 20 gives exactly 0.05.
  CHECK(chi2_sf(2.0 * std::log(20.0), 2) == doctest::Approx(0.05).epsilon(1e-14));
  // df = 1: erfc(√(x/2)); 3.841458820694125 = 1.959963984540054².
  CHECK(chi2_sf(3.841458820694125, 1) == doctest::Approx(0.05).epsilon(1e-13));
  // df = 3 at its 95 % quantile 7.814727903251178.
  CHECK(chi2_sf(7.814727903251178, 3) == doctest::Approx(0.05).epsilon(1e-13));
  // df = 4 at x = 4: e^{−2}(1 + 2) = 3e^{−2} = 0.40600584970983811.
  CHECK(chi2_sf(4.0, 4) == doctest::Approx(3.0 * std::exp(-2.0)).epsilon(1e-14));
  // mpmath (1 − regularized lower gamma): df 5 x 4, df 7 x 20, df 127 x 150.
  CHECK(chi2_sf(4.0, 5) == doctest::Approx(0.5494159513527802).epsilon(1e-13));
  CHECK(chi2_sf(20.0, 7) == doctest::Approx(0.005569683072945571).epsilon(1e-12));
  CHECK(chi2_sf(150.0, 127) == doctest::Approx(0.07994198701749203).epsilon(1e-11));
  CHECK(chi2_sf(0.0, 3) == 1.0);
}

TEST_CASE("selftest stats: Wilson interval for 8 of 10 by hand") {
  // z = 1.959963984540054, z² = 3.841458820694125, p̂ = 0.8, n = 10:
  //   1 + z²/n = 1.3841458820694125
  //   centre = (0.8 + z²/20)/1.3841458820694125 = 0.9920729410347063/1.3841458820694125
  //          = 0.7167401600411333
  //   root = √(0.8·0.2/10 + z²/400) = √(0.016 + 0.009603647051735313) = 0.16001139663078786
  //   half = (z/1.3841458820694125)·root = 1.4160096922802283·0.16001139663078786
  //        = 0.2265776885044915
  //   [lo, hi] = [centre − half, centre + half] = [0.4901624715366417, 0.9433178485456247]
  const Interval ci = wilson(8, 10);
  CHECK(ci.lo == doctest::Approx(0.4901624715366417).epsilon(1e-9));
  CHECK(ci.hi == doctest::Approx(0.9433178485456247).epsilon(1e-9));
  // 0 of 10: lo = 0 exactly, hi = 2·(z²/20)/(1 + z²/10) = 0.38414588206941250/1.3841458820694125
  //        = 0.2775327998628892.
  const Interval zero = wilson(0, 10);
  CHECK(zero.lo == 0.0);
  CHECK(zero.hi == doctest::Approx(0.2775327998628892).epsilon(1e-12));
  // 10 of 10 mirrors it.
  const Interval all = wilson(10, 10);
  CHECK(all.hi == 1.0);
  CHECK(all.lo == doctest::Approx(1.0 - 0.2775327998628892).epsilon(1e-12));
  // n = 0: no information.
  CHECK(wilson(0, 0).lo == 0.0);
  CHECK(wilson(0, 0).hi == 1.0);
  // A fractional (cluster-effective) n widens the interval of the same rate.
  const Interval eff = wilson(0.8 * 8.5, 8.5);
  CHECK(eff.lo < ci.lo);
  CHECK(eff.hi > ci.hi);
}

TEST_CASE("selftest stats: ICC and effective n by hand") {
  // hand_matrix: cluster means ȳ_c = (1, 2/3, 1/3, 1), ȳ = 0.75, m = 3, C = 4.
  //   SSB = 3·(0.25² + (−1/12)² + (−5/12)² + 0.25²) = 3·11/36,  MSB = SSB/3 = 11/36
  //   SSW = 0 + (4/9 + 1/9 + 1/9) + (1/9 + 4/9 + 1/9) + 0 = 4/3,  MSW = (4/3)/(4·2) = 1/6 = 6/36
  //   ρ̂ = (11/36 − 6/36)/(11/36 + 2·6/36) = 5/23
  //   deff = 1 + 2·5/23 = 33/23,  n_eff(A_mean) = 12/(33/23) = 276/33 = 8.3636…
  const ClusterMatrix y = hand_matrix();
  CHECK(icc_anova(y) == doctest::Approx(5.0 / 23.0).epsilon(1e-14));
  CHECK(design_effect(3, 5.0 / 23.0) == doctest::Approx(33.0 / 23.0).epsilon(1e-14));
  CHECK(effective_n(12, 3, icc_anova(y)) == doctest::Approx(276.0 / 33.0).epsilon(1e-14));
  // ρ is clamped to [0, 1]: n_eff stays between C and C·m.
  CHECK(design_effect(8, -0.3) == 1.0);
  CHECK(design_effect(8, 1.7) == 8.0);
  // A residue's rate has one observation per cluster: n_eff = C; with Q = 4 queries per
  // haystack and ρ_q = 0.1 (§5.6): 10·4/(1 + 3·0.1) = 40/1.3.
  CHECK(residue_effective_n(10) == 10.0);
  CHECK(residue_effective_n(10, 4, 0.1) == doctest::Approx(40.0 / 1.3).epsilon(1e-14));
  // Identical clusters: ρ̂ = 1 (MSW = 0), n_eff = C. No variance at all: 1 by convention.
  CHECK(icc_anova(matrix(3, 2, {1, 1, 0, 0, 1, 1})) == 1.0);
  CHECK(icc_anova(matrix(2, 2, {1, 1, 1, 1})) == 1.0);
  // Cluster-robust SE: sd(1, 2/3, 1/3, 1)/2; Σ(ȳ_c − 0.75)² = 11/36, sd = √(11/108).
  CHECK(cluster_robust_se(y) == doctest::Approx(std::sqrt(11.0 / 108.0) / 2.0).epsilon(1e-14));
}

TEST_CASE("selftest stats: Holm on a worked example") {
  // p = (0.01, 0.04, 0.03, 0.005), m = 4. Sorted: 0.005 (#3), 0.01 (#0), 0.03 (#2), 0.04 (#1).
  //   (m−k+1)·p_(k) = 4·0.005 = 0.02, 3·0.01 = 0.03, 2·0.03 = 0.06, 1·0.04 = 0.04
  //   running max   = 0.02, 0.03, 0.06, 0.06
  // At α = 0.05: #3 and #0 are rejected; #2 fails (0.03 > 0.05/2) and the procedure stops, so #1
  // is kept although 0.04 <= 0.05/1.
  const HolmResult h = holm({0.01, 0.04, 0.03, 0.005}, 0.05);
  REQUIRE(h.adjusted.size() == 4);
  CHECK(h.adjusted[0] == doctest::Approx(0.03));
  CHECK(h.adjusted[1] == doctest::Approx(0.06));
  CHECK(h.adjusted[2] == doctest::Approx(0.06));
  CHECK(h.adjusted[3] == doctest::Approx(0.02));
  CHECK(h.reject == std::vector<bool>{true, false, false, true});
  // Capped at 1: (0.7, 0.9) → 2·0.7 = 1.4 → 1, then max(1, 0.9) = 1.
  const HolmResult c = holm({0.7, 0.9});
  CHECK(c.adjusted == std::vector<double>{1.0, 1.0});
  CHECK(c.reject == std::vector<bool>{false, false});
  // One test: unchanged.
  CHECK(holm({0.03}).adjusted[0] == 0.03);
  CHECK(holm({}).adjusted.empty());
}

TEST_CASE("selftest stats: leave-one-out z on a tiny matrix by hand") {
  // hand_matrix, residue 0: d_c = y_c0 − mean(y_c1, y_c2) = (1−1, 0−1, 0−0.5, 1−1)
  //   = (0, −1, −0.5, 0); mean = −0.375
  //   deviations (0.375, −0.625, −0.125, 0.375), SS = 0.140625 + 0.390625 + 0.015625 + 0.140625
  //   = 0.6875, sd = √(0.6875/3) = 0.4787135538781691, se = sd/√4 = 0.23935677693908453
  //   z = −0.375/0.23935677693908453 = −1.5666989036012806, p = Φ(z) = 0.05859254359906902
  // Residue 1: d = (0, 0.5, 1, 0), mean +0.375, same sd: z = +1.5666989036012806.
  // Residue 2: d = (0, 0.5, −0.5, 0), mean 0, sd = √(0.5/3): z = 0, p = 0.5.
  const std::vector<LooTest> t = loo_tests(hand_matrix(), Worse::kLower);
  REQUIRE(t.size() == 3);
  CHECK(t[0].mean_diff == doctest::Approx(-0.375).epsilon(1e-15));
  CHECK(t[0].deficit == doctest::Approx(0.375).epsilon(1e-15));
  CHECK(t[0].sd_diff == doctest::Approx(0.4787135538781691).epsilon(1e-14));
  CHECK(t[0].z == doctest::Approx(-1.5666989036012806).epsilon(1e-14));
  CHECK(t[0].p == doctest::Approx(0.05859254359906902).epsilon(1e-13));
  CHECK(t[1].z == doctest::Approx(1.5666989036012806).epsilon(1e-14));
  CHECK(t[1].p == doctest::Approx(1.0 - 0.05859254359906902).epsilon(1e-13));
  CHECK(t[2].z == 0.0);
  CHECK(t[2].p == 0.5);
  CHECK(t[2].sd_diff == doctest::Approx(std::sqrt(0.5 / 3.0)).epsilon(1e-14));
  // Holm over the three: 3·0.05859254359906902 = 0.17577763079720707, then 1, 1.
  const HolmResult h = holm({t[0].p, t[1].p, t[2].p});
  CHECK(h.adjusted[0] == doctest::Approx(0.17577763079720707).epsilon(1e-13));
  CHECK(h.adjusted[1] == 1.0);
  CHECK(h.adjusted[2] == 1.0);
  // Shifted null with δ = 0.1 (§5.5): z = (0.1 − 0.375)/0.23935677693908453 = −1.1489125293076057,
  // p = 0.12529602534284207.
  const std::vector<LooTest> s = loo_tests(hand_matrix(), Worse::kLower, 0.1);
  CHECK(s[0].z == doctest::Approx(-1.1489125293076057).epsilon(1e-14));
  CHECK(s[0].p == doctest::Approx(0.12529602534284207).epsilon(1e-13));
  // NLL orientation: higher is worse, so 1 − hit scored kHigher gives the same tests.
  ClusterMatrix flipped = hand_matrix();
  for (double& v : flipped.v) v = 1.0 - v;
  const std::vector<LooTest> f = loo_tests(flipped, Worse::kHigher);
  for (size_t r = 0; r < 3; ++r) {
    CHECK(f[r].deficit == doctest::Approx(t[r].deficit).epsilon(1e-15));
    CHECK(f[r].z == doctest::Approx(t[r].z).epsilon(1e-14));
    CHECK(f[r].p == doctest::Approx(t[r].p).epsilon(1e-14));
  }
  // sd(d) = 0: decided by the sign. Residue 0 misses in every cluster, the others always hit.
  const std::vector<LooTest> z = loo_tests(matrix(3, 2, {0, 1, 0, 1, 0, 1}), Worse::kLower);
  CHECK(z[0].p == 0.0);
  CHECK(z[1].p == 1.0);
}

TEST_CASE("selftest stats: Cochran Q by hand") {
  // hand_matrix: residue totals C_r = (2, 4, 3), N = 9, cluster totals L_c = (3, 2, 1, 3),
  // Σ L_c² = 23, R = 3:  Q = 2·[3·(4 + 16 + 9) − 81]/(3·9 − 23) = 2·6/4 = 3,
  // df = 2, p = e^{−3/2} = 0.22313016014842982.
  const CochranQ q = cochran_q(hand_matrix());
  CHECK(q.q == doctest::Approx(3.0).epsilon(1e-15));
  CHECK(q.df == 2);
  CHECK(q.p == doctest::Approx(0.22313016014842982).epsilon(1e-14));
  // Every cluster all-hit or all-miss: no discordance, Q = 0, p = 1.
  const CochranQ none = cochran_q(matrix(2, 3, {1, 1, 1, 0, 0, 0}));
  CHECK(none.q == 0.0);
  CHECK(none.p == 1.0);
}

TEST_CASE("selftest stats: split-sample minimum by hand") {
  //   c0: 0 1 1      even clusters {c0, c2}: A = (0.5, 0.5, 1)  → argmin 0 (tie: lowest)
  //   c1: 1 1 0      odd clusters  {c1, c3}: A = (1, 1, 0.5)    → argmin 2
  //   c2: 1 0 1      all clusters:           A = (0.75, 0.75, 0.75) → naive min 0.75 at 0
  //   c3: 1 1 1
  // split_min = ½[A_odd(0) + A_even(2)] = ½[1 + 1] = 1
  // deficits: odd, residue 0: mean(1, 0.5) − 1 = −0.25; even, residue 2: mean(0.5, 0.5) − 1
  //   = −0.5; split_deficit = −0.375; naive_deficit = 0.75 − 0.75 = 0.
  // optimism = 1 − 0.75 = 0.25, deficit_optimism = 0 − (−0.375) = 0.375.
  const SplitMin s = split_sample_min(matrix(4, 3, {0, 1, 1, 1, 1, 0, 1, 0, 1, 1, 1, 1}));
  CHECK(s.naive_argmin == 0);
  CHECK(s.naive_min == 0.75);
  CHECK(s.naive_deficit == 0.0);
  CHECK(s.argmin_even == 0);
  CHECK(s.argmin_odd == 2);
  CHECK(s.split_min == 1.0);
  CHECK(s.split_deficit == -0.375);
  CHECK(s.optimism == 0.25);
  CHECK(s.deficit_optimism == 0.375);

  // On null data the naive minimum reads low and the split estimate does not (§3.6):
  // 300 runs of C = 40, P = 8, p = 0.7.
  Rng rng(11);
  double naive = 0.0, split = 0.0;
  const int runs = 300;
  for (int i = 0; i < runs; ++i) {
    const Observations o = synth({std::vector<double>(8, 0.7)}, 40, rng);
    const SplitMin m = split_sample_min(o.hit);
    naive += m.naive_min / runs;
    split += m.split_min / runs;
  }
  MESSAGE("null p = 0.7: mean naive A_min " << naive << " mean split A_min " << split);
  CHECK(naive < 0.65);
  CHECK(split == doctest::Approx(0.7).epsilon(0.02).scale(1.0));
}

TEST_CASE("selftest stats: gap and spread by hand") {
  // hand_matrix: A = (0.5, 1, 0.75), Ā = 0.75, Δ = 1 − 0.5 = 0.5, Δ/Ā = 2/3,
  // σ = √(((−0.25)² + 0.25² + 0²)/2) = 0.25,
  // se_null = √(0.75·0.25/4) = √0.046875 = 0.21650635094610965, Δ/se_null = 2.309401076758503,
  // d_3 = 3/√π = 1.6925687506432689, E[Δ | H0] = d_3·se_null = 0.3664518839271899.
  const GapStats g = gap_stats(hand_matrix());
  CHECK(g.mean == 0.75);
  CHECK(g.max == 1.0);
  CHECK(g.argmax == 1);
  CHECK(g.min == 0.5);
  CHECK(g.argmin == 0);
  CHECK(g.gap == 0.5);
  CHECK(g.sd == doctest::Approx(0.25).epsilon(1e-15));
  CHECK(g.relative_gap == doctest::Approx(2.0 / 3.0).epsilon(1e-15));
  CHECK(g.se_null == doctest::Approx(0.21650635094610965).epsilon(1e-15));
  CHECK(g.gap_se_units == doctest::Approx(2.309401076758503).epsilon(1e-14));
  CHECK(g.d_r == doctest::Approx(1.6925687506432689).epsilon(1e-10));
  CHECK(g.expected_null_gap == doctest::Approx(0.3664518839271899).epsilon(1e-10));
  // d_R: 2/√π and 3/√π exactly; 4, 8, 16, 128 from mpmath quadrature (the note's 2.06, 2.85, 3.53).
  CHECK(expected_normal_range(2) == doctest::Approx(1.1283791670955126).epsilon(1e-10));
  CHECK(expected_normal_range(4) == doctest::Approx(2.0587507460079283).epsilon(1e-10));
  CHECK(expected_normal_range(8) == doctest::Approx(2.8472006120905555).epsilon(1e-10));
  CHECK(expected_normal_range(16) == doctest::Approx(3.5319827861095759).epsilon(1e-10));
  CHECK(expected_normal_range(128) == doctest::Approx(5.1891947371989334).epsilon(1e-10));
  // All residues at 0: Δ = 0, Δ/Ā defined as 0.
  const GapStats z = gap_stats(matrix(2, 2, {0, 0, 0, 0}));
  CHECK(z.gap == 0.0);
  CHECK(z.relative_gap == 0.0);
  CHECK(z.gap_se_units == 0.0);
}

TEST_CASE("selftest stats: gap permutation null") {
  Rng rng(5);
  // Independent residues: the exchangeable null has the same pairwise-difference variance
  // 2p̄q̄/C as the analytic null, so its mean gap matches d_R·√(p̄q̄/C).
  const Observations null_run = synth({std::vector<double>(8, 0.7)}, 200, rng);
  const GapStats g = gap_stats(null_run.hit);
  const GapNull n = gap_permutation_null(null_run.hit, 400, 1);
  MESSAGE("independent null: permutation mean gap " << n.mean_gap << " analytic "
                                                   << g.expected_null_gap);
  CHECK(n.mean_gap == doctest::Approx(g.expected_null_gap).epsilon(0.1));
  CHECK(n.p > 0.01);
  // Positive ICC: half the clusters always hit, the other half hit with p = 0.4 (marginal 0.7,
  // within-cluster variance 0.5·0.24 = 0.12 instead of 0.21). The residues move together and
  // the true null gap is about √(0.12/0.21) = 0.76 of the analytic one, which ignores the
  // correlation.
  ClusterMatrix icc_run = ClusterMatrix::zeros(200, 8);
  for (int32_t c = 0; c < 200; ++c)
    for (int32_t r = 0; r < 8; ++r)
      icc_run.at(c, r) = c % 2 == 0 || rng.uniform() < 0.4 ? 1.0 : 0.0;
  const GapNull ni = gap_permutation_null(icc_run, 400, 1);
  const GapStats gi = gap_stats(icc_run);
  MESSAGE("cluster-correlated null: permutation mean gap " << ni.mean_gap << " analytic "
                                                          << gi.expected_null_gap);
  CHECK(ni.mean_gap < 0.9 * gi.expected_null_gap);
  // A planted 30-pp dip is far outside the null.
  std::vector<double> p(8, 0.8);
  p[5] = 0.5;
  const Observations dip = synth({p}, 100, rng);
  CHECK(gap_permutation_null(dip.hit, 400, 1).p < 0.01);
  // Deterministic.
  CHECK(gap_permutation_null(dip.hit, 100, 9).mean_gap ==
        gap_permutation_null(dip.hit, 100, 9).mean_gap);
}

TEST_CASE("selftest stats: rng is seeded and platform independent") {
  // Reference stream of xoshiro256** seeded through splitmix64(42), from an independent
  // Python implementation (splitmix64 from seed 0 starts 0xe220a8397b1dcdaf, the published
  // reference value).
  Rng rng(42);
  CHECK(rng.next() == 0x15780b2e0c2ec716ull);
  CHECK(rng.next() == 0x6104d9866d113a7eull);
  CHECK(rng.next() == 0xae17533239e499a1ull);
  // below(n) is uniform: 30000 draws over 3 bins, each within 5 sd of 10000.
  Rng r(3);
  int counts[3] = {0, 0, 0};
  for (int i = 0; i < 30000; ++i) ++counts[r.below(3)];
  for (int c : counts) CHECK(std::abs(c - 10000) < 5 * 82);  // sd = √(30000·(1/3)·(2/3)) = 81.6
  CHECK(r.below(1) == 0);
  for (int i = 0; i < 1000; ++i) {
    const double u = r.uniform();
    CHECK((u >= 0.0 && u < 1.0));
  }
}

TEST_CASE("selftest stats: cluster bootstrap is deterministic and sane") {
  Rng rng(21);
  const Observations o = synth({std::vector<double>(8, 0.7), true}, 50, rng);
  BootstrapParams bp;
  bp.seed = 1;
  const BootstrapResult a = cluster_bootstrap_mean(o.hit, bp);
  const BootstrapResult b = cluster_bootstrap_mean(o.hit, bp);
  CHECK(a.ci.lo == b.ci.lo);
  CHECK(a.ci.hi == b.ci.hi);
  bp.seed = 2;
  const BootstrapResult c = cluster_bootstrap_mean(o.hit, bp);
  CHECK(c.ci.lo != a.ci.lo);
  CHECK(c.ci.lo == doctest::Approx(a.ci.lo).epsilon(0.01).scale(1.0));
  CHECK(c.ci.hi == doctest::Approx(a.ci.hi).epsilon(0.01).scale(1.0));
  // Contains the mean; the bootstrap sd is the cluster-robust SE up to √((C−1)/C) and
  // Monte-Carlo noise.
  CHECK(a.ci.lo < a.estimate);
  CHECK(a.ci.hi > a.estimate);
  CHECK(a.estimate == doctest::Approx(gap_stats(o.hit).mean).epsilon(1e-14));
  CHECK(a.se == doctest::Approx(cluster_robust_se(o.hit) * std::sqrt(49.0 / 50.0)).epsilon(0.1));
  MESSAGE("bootstrap 95% interval [" << a.ci.lo << ", " << a.ci.hi << "] around " << a.estimate);
  // A constant matrix has a degenerate interval.
  ClusterMatrix k = ClusterMatrix::zeros(30, 8);
  for (double& v : k.v) v = 1.0;
  const BootstrapResult d = cluster_bootstrap_mean(k, bp);
  CHECK(d.ci.lo == d.ci.hi);
  CHECK(d.ci.lo == d.estimate);
  CHECK(d.se == 0.0);
}

TEST_CASE("selftest stats: cluster bootstrap matches the exact bootstrap distribution") {
  // Four clusters of P = 4 hits with cluster means 0, 1/4, 1/2, 1. The exact bootstrap draws
  // one of 4^4 = 256 equally likely ordered resamples; in quarters the resample sum S is
  // the sum of four draws from {0, 1, 2, 4}, and Ā* = S/16. By hand:
  //   P(S <= 1) = (1 + 4)/256 = 0.0195,  P(S <= 2) = (1 + 4 + 6 + 4)/256 = 0.0586
  //     -> the 2.5 % quantile is S = 2, Ā* = 0.125;
  //   P(S >= 14) = (1 + 4)/256 = 0.0195,  P(S >= 13) = (1 + 4 + 4)/256 = 0.0352
  //     -> the 97.5 % quantile is S = 13, Ā* = 0.8125;
  //   sd(Ā*) = sqrt(var_pop/4), var_pop = 0.546875/4 -> sd = sqrt(0.0341796875) = 0.18488.
  // Both quantiles lie inside an atom by >= 0.0055 of probability, ~15 Monte-Carlo sds at
  // B = 200,000, so the percentile interval must land exactly on them.
  ClusterMatrix y = ClusterMatrix::zeros(4, 4);
  const int ones[4] = {0, 1, 2, 4};
  for (int c = 0; c < 4; ++c)
    for (int t = 0; t < ones[c]; ++t) y.at(c, t) = 1.0;
  BootstrapParams bp;
  bp.n_replicates = 200000;
  bp.seed = 11;
  const BootstrapResult b = cluster_bootstrap_mean(y, bp);
  CHECK(b.estimate == 0.4375);
  CHECK(b.ci.lo == 0.125);
  CHECK(b.ci.hi == 0.8125);
  CHECK(b.se == doctest::Approx(std::sqrt(0.0341796875)).epsilon(0.01));
  // A 50 % interval: P(S <= 5) and P(S <= 9) by enumeration (an independent count here).
  int count[17] = {0};
  for (int i = 0; i < 256; ++i) count[ones[i & 3] + ones[(i >> 2) & 3] + ones[(i >> 4) & 3] + ones[(i >> 6) & 3]]++;
  double cdf = 0;
  int q25 = -1, q75 = -1;
  for (int sum = 0; sum <= 16; ++sum) {
    const double before = cdf;
    cdf += count[sum] / 256.0;
    if (before < 0.25 && cdf >= 0.25) q25 = sum;
    if (before < 0.75 && cdf >= 0.75) q75 = sum;
  }
  CHECK(count[2] == 10);  // two 1s (6 orders) or one 2 (4 orders), the rest 0
  bp.level = 0.5;
  const BootstrapResult h = cluster_bootstrap_mean(y, bp);
  CHECK(h.ci.lo == q25 / 16.0);
  CHECK(h.ci.hi == q75 / 16.0);
}

TEST_CASE("selftest stats: periodogram identity on random series") {
  Rng rng(8);
  struct Case {
    int32_t T, P;
  };
  const Case cases[] = {{12, 2},  {12, 3},  {12, 4},  {12, 6},   {12, 12}, {64, 2},  {64, 4},
                        {64, 8},  {64, 16}, {64, 32}, {60, 5},   {60, 12}, {60, 15}, {128, 8},
                        {128, 32}, {96, 3}, {96, 24}, {7, 7}};
  for (const Case& k : cases) {
    for (int rep = 0; rep < 3; ++rep) {
      std::vector<double> x(static_cast<size_t>(k.T));
      // Binary series, continuous series and a series with a large offset.
      for (double& v : x) {
        v = rep == 0 ? double(rng.below(2)) : rep == 1 ? rng.uniform() * 4.0 - 2.0
                                                       : 1000.0 + rng.uniform();
      }
      const PeriodogramIdentity id = check_periodogram_identity(x, k.P);
      CAPTURE(k.T);
      CAPTURE(k.P);
      CHECK(id.abs_error <= 1e-10 * (1.0 + id.folded_sum));
      CHECK(id.folded_sum == doctest::Approx(folded_power(x, k.P)));
      // Parseval: all bins together give the total sum of squares.
      double ss = 0.0, mean = 0.0, total = 0.0;
      for (double v : x) mean += v / double(k.T);
      for (double v : x) ss += (v - mean) * (v - mean);
      for (double v : periodogram(x)) total += v;
      CHECK(total == doctest::Approx(ss).epsilon(1e-10));
    }
  }
  // A pure period-4 one-dip pattern puts all its power on the harmonics of 1/4:
  // x = (−1, 0, 0, 0) repeated 8 times, T = 32: m = (−1, 0, 0, 0), m̄ = −0.25,
  // Σ(m_r − m̄)² = 0.5625 + 3·0.0625 = 0.75, G_4 = (32/4)·0.75 = 6; folded at 2:
  // m = (−0.5, 0), Σ = 2·0.0625 = 0.125, G_2 = 16·0.125 = 2 (= G_4/3: one dip spreads evenly).
  std::vector<double> dip(32, 0.0);
  for (size_t t = 0; t < 32; t += 4) dip[t] = -1.0;
  CHECK(check_periodogram_identity(dip, 4).harmonic_sum == doctest::Approx(6.0).epsilon(1e-12));
  CHECK(folded_power(dip, 2) == doctest::Approx(2.0).epsilon(1e-15));
  CHECK(folded_power(dip, 8) == doctest::Approx(6.0).epsilon(1e-15));
}

TEST_CASE("selftest stats: period scan finds a planted period") {
  // 30 clusters x 32 consecutive offsets, hits at 0.85 except offsets ≡ 1 (mod 4) at 0.45.
  Rng rng(4);
  std::vector<double> p(32, 0.85);
  for (size_t t = 1; t < 32; t += 4) p[t] = 0.45;
  const Observations o = synth({p}, 30, rng);
  PeriodScanParams sp;
  sp.max_period = 8;
  sp.n_permutations = 199;
  sp.seed = 3;
  const PeriodScan s = period_scan(o.hit, sp);
  REQUIRE(s.candidates.size() == 3);  // 2, 4, 8
  CHECK(s.candidates[0].period == 2);
  CHECK(s.candidates[2].period == 8);
  CHECK(s.detected);
  CHECK(s.scan_p == doctest::Approx(1.0 / 200.0));
  CHECK(s.candidates[1].p <= 0.01);
  CHECK(s.candidates[0].multiples_p <= 0.05);  // folding at 4 adds power over folding at 2
  CHECK(s.candidates[1].multiples_p > 0.05);   // folding at 8 adds nothing over 4
  CHECK(s.period == 4);
  REQUIRE(s.folded_means.size() == 4);
  CHECK(s.fundamental_trough == doctest::Approx(1.0).epsilon(0.25).scale(1.0));
  MESSAGE("planted period 4: reported " << s.period << " scan p " << s.scan_p << " trough "
                                        << s.fundamental_trough);
  // Same seed, same scan.
  const PeriodScan again = period_scan(o.hit, sp);
  CHECK(again.scan_p == s.scan_p);
  CHECK(again.candidates[0].multiples_p == s.candidates[0].multiples_p);

  // The per-residue use: T = P = 8 residues (no depth order, so no detrending), one weak
  // residue 5 → the full period 8.
  std::vector<double> q(8, 0.9);
  q[5] = 0.4;
  const Observations r = synth({q}, 60, rng);
  sp.detrend = false;
  const PeriodScan rs = period_scan(r.hit, sp);
  CHECK(rs.detected);
  CHECK(rs.period == 8);
  CHECK(rs.fundamental_trough == doctest::Approx(5.0).epsilon(0.5).scale(1.0));
}

TEST_CASE("selftest stats: period scan on null data and on a trend") {
  // Null: 20 runs, each detects with probability 0.05; more than 4 detections has probability
  // 0.003 under a valid test.
  Rng rng(6);
  PeriodScanParams sp;
  sp.max_period = 8;
  sp.n_permutations = 99;
  int detected = 0;
  for (int i = 0; i < 20; ++i) {
    const Observations o = synth({std::vector<double>(32, 0.7)}, 20, rng);
    sp.seed = uint64_t(100 + i);
    if (period_scan(o.hit, sp).detected) ++detected;
  }
  MESSAGE("null period scans: " << detected << " of 20 detected at alpha 0.05");
  CHECK(detected <= 4);
  // A strong linear depth trend (0.2 → 0.9 over 32 offsets) and no period: without
  // detrending the folded means line up with the trend; detrending removes it.
  std::vector<double> p(32);
  for (size_t t = 0; t < 32; ++t) p[t] = 0.2 + 0.7 * double(t) / 31.0;
  const Observations trend = synth({p}, 200, rng);
  sp.seed = 1;
  sp.detrend = false;
  CHECK(period_scan(trend.hit, sp).detected);
  sp.detrend = true;
  CHECK_FALSE(period_scan(trend.hit, sp).detected);
}

TEST_CASE("selftest stats: two-stage flagging finds a planted 40 pp deficit") {
  // P = 8, healthy residues at 0.9, residue 3 at 0.5; 60 clusters per stage.
  std::vector<double> p(8, 0.9);
  p[3] = 0.5;
  Rng rng(2024);
  const Observations s1 = synth({p}, 60, rng);
  const Observations s2 = synth({p}, 60, rng);
  const FlagParams fp;
  const Screening sc = screen(s1, fp);
  CHECK(std::find(sc.candidates.begin(), sc.candidates.end(), 3) != sc.candidates.end());
  const Confirmation cf = confirm(s2, sc.candidates, fp);
  CHECK(cf.flagged == std::vector<int32_t>{3});
  REQUIRE(cf.tested.size() == sc.candidates.size());
  for (const ConfirmedResidue& c : cf.tested) {
    if (c.test.residue != 3) continue;
    CHECK(c.test.deficit > 0.25);
    CHECK(c.holm_p < 1e-4);
  }
  // The stricter shifted null flags it too (true deficit 0.4 − 0.057 against δ = 0.1).
  FlagParams strict = fp;
  strict.shifted_null = true;
  CHECK(confirm(s2, sc.candidates, strict).flagged == std::vector<int32_t>{3});
  // A practical margin above the deficit removes the flag; no candidates, no flags.
  FlagParams wide = fp;
  wide.margin = 0.6;
  CHECK(confirm(s2, sc.candidates, wide).flagged.empty());
  CHECK(confirm(s2, {}, fp).flagged.empty());
}

TEST_CASE("selftest stats: two-stage flagging false-alarm rate on null data") {
  // All residues equal (p = 0.7), P = 8, 40 clusters per stage, 200 runs. A run is a false
  // alarm if it flags anything. Bound: α + 3·sd = 0.05 + 3·√(0.05·0.95/200) = 0.0962.
  const int runs = 200;
  const double bound = 0.05 + 3.0 * std::sqrt(0.05 * 0.95 / runs);
  FlagParams with_margin;  // δ = 0.10 (the default)
  FlagParams holm_only;
  holm_only.margin = 0.0;  // the bare Holm guarantee, no δ filter
  for (bool correlated : {false, true}) {
    int alarms = 0, alarms_holm = 0;
    double candidates = 0.0;
    for (int seed = 0; seed < runs; ++seed) {
      Rng rng(uint64_t(seed) * 7919u + (correlated ? 1u : 0u));
      const Synth null{std::vector<double>(8, 0.7), correlated};
      const Observations s1 = synth(null, 40, rng);
      const Observations s2 = synth(null, 40, rng);
      const Screening sc = screen(s1, with_margin);
      candidates += double(sc.candidates.size()) / runs;
      if (!confirm(s2, sc.candidates, with_margin).flagged.empty()) ++alarms;
      if (!confirm(s2, sc.candidates, holm_only).flagged.empty()) ++alarms_holm;
    }
    const double rate = double(alarms) / runs, rate_holm = double(alarms_holm) / runs;
    MESSAGE(std::string(correlated ? "cluster-correlated" : "independent")
            << " null: false-alarm rate " << rate << " with delta 0.10 and " << rate_holm
            << " with delta 0 over " << runs << " runs (" << candidates
            << " candidates per run; bound " << bound << ")");
    CHECK(rate <= bound);
    CHECK(rate_holm <= bound);
  }
}

TEST_CASE("selftest stats: minimum detectable gap") {
  // R = 8, p_s = 0.9, C = 20, α = 0.05, power 0.8:
  //   z_{1−0.05/8} = z_{0.99375} = 2.497705474412373, z_{0.8} = 0.8416212335729144
  //   K = (3.339326707985287)² = 11.151102862663856
  //   (C + K)Δ² − K(p − q)Δ − K·p·q·R/(R−1) = 0 with
  //   a = 31.151102862663856, b = K·0.8 = 8.920882290131085, c = K·0.09·8/7 = 1.1469705801597108
  //   Δ = (b + √(b² + 4ac))/(2a) = (8.920882290131085 + √(79.58214083437443 + 142.91759409201756))
  //     / 62.30220572532771 = (8.920882290131085 + 14.916425004886124)/62.30220572532771
  //     = 0.3826077587061517   (the note's "38 pp at n = 20")
  CHECK(min_detectable_gap(0.9, 20, 8) == doctest::Approx(0.3826077587061517).epsilon(1e-12));
  // The note's other MDEs at R = 8: 31 / 23 / 15 / 10 pp at n = 30 / 50 / 100 / 200.
  CHECK(min_detectable_gap(0.9, 30, 8) == doctest::Approx(0.30744189162375025).epsilon(1e-12));
  CHECK(min_detectable_gap(0.9, 200, 8) == doctest::Approx(0.09779401937963170).epsilon(1e-12));
  // Decreasing in C, and inverse to required_clusters.
  double prev = 1.0;
  for (int32_t c = 5; c <= 400; c += 5) {
    const double d = min_detectable_gap(0.9, c, 8);
    CHECK(d < prev);
    prev = d;
    const int64_t n = required_clusters(0.9, d, 8);
    CHECK((n == c || n == c + 1));
  }
  // The note's table (§3.7), leave-one-out n per residue for Δ = 10 / 20 / 40 pp.
  CHECK(required_clusters(0.9, 0.1, 8) == 193);
  CHECK(required_clusters(0.9, 0.2, 8) == 63);
  CHECK(required_clusters(0.9, 0.4, 8) == 19);
  CHECK(required_clusters(0.9, 0.1, 4) == 181);
  CHECK(required_clusters(0.9, 0.2, 4) == 58);
  CHECK(required_clusters(0.9, 0.4, 4) == 17);
  CHECK(required_clusters(0.9, 0.1, 16) == 213);
  CHECK(required_clusters(0.9, 0.2, 16) == 70);
  CHECK(required_clusters(0.9, 0.4, 16) == 21);
  CHECK(required_clusters(0.95, 0.1, 8) == 150);
  CHECK(required_clusters(0.95, 0.2, 8) == 55);
  CHECK(required_clusters(0.95, 0.4, 8) == 18);
  // Never above the healthy rate; at p_s = 1 the root is K/(C + K).
  CHECK(min_detectable_gap(0.3, 2, 8) <= 0.3);
  const double K = std::pow(normal_quantile(1.0 - 0.05 / 8) + normal_quantile(0.8), 2);
  CHECK(min_detectable_gap(1.0, 50, 8) == doctest::Approx(K / (50.0 + K)).epsilon(1e-14));
}

TEST_CASE("selftest stats: check_observations rejects malformed runs") {
  Observations o;
  o.hit = hand_matrix();
  CHECK(check_observations(o).ok());
  o.nll = ClusterMatrix::zeros(4, 3);
  CHECK(check_observations(o).ok());
  o.nll = ClusterMatrix::zeros(4, 2);
  CHECK_FALSE(check_observations(o).ok());
  o.nll = ClusterMatrix::zeros(4, 3);
  o.nll.at(2, 1) = NAN;
  const phasekv::Status st = check_observations(o);
  CHECK_FALSE(st.ok());
  CHECK(st.message().find("nll[2][1]") != std::string::npos);
  o.nll = ClusterMatrix();
  o.hit.at(1, 2) = 0.5;  // a sample's mean over several targets
  CHECK(check_observations(o).ok());
  o.hit.at(1, 2) = 1.5;
  CHECK(check_observations(o).message().find("hit[1][2]") != std::string::npos);
  o.hit = ClusterMatrix::zeros(1, 3);
  CHECK(check_observations(o).message().find("n_clusters") != std::string::npos);
  o.hit = ClusterMatrix::zeros(3, 1);
  CHECK(check_observations(o).message().find("n_cols") != std::string::npos);
  o.hit = ClusterMatrix::zeros(3, 3);
  o.hit.v.pop_back();
  CHECK_FALSE(check_observations(o).ok());
}

TEST_CASE("selftest stats: summary is consistent with its parts") {
  std::vector<double> p(8, 0.9);
  p[6] = 0.55;
  Rng rng(77);
  const Observations o = synth({p, true}, 80, rng);
  REQUIRE(check_observations(o).ok());
  const Summary s = summarize(o);
  CHECK(s.n_clusters == 80);
  CHECK(s.n_residues == 8);
  const std::vector<double> acc = residue_means(o.hit);
  const std::vector<double> nll = residue_means(o.nll);
  for (int32_t r = 0; r < 8; ++r) {
    const ResidueRow& row = s.residues[size_t(r)];
    CHECK(row.accuracy == acc[size_t(r)]);
    const Interval w = wilson(acc[size_t(r)] * 80.0, 80.0);
    CHECK(row.accuracy_ci.lo == w.lo);
    CHECK(row.accuracy_ci.hi == w.hi);
    CHECK(row.nll == nll[size_t(r)]);
    CHECK(row.hit_holm_p >= row.hit_test.p);
  }
  // The weak residue stands out on every view.
  CHECK(s.residues[6].hit_holm_p < 1e-3);
  CHECK(s.residues[6].nll_test.p < 1e-3);
  CHECK(s.residues[6].nll_excess > 0.5);
  CHECK(s.worst.naive_argmin == 6);
  CHECK(s.gap.argmin == 6);
  CHECK(s.cochran.p < 1e-3);
  // Pooled mean: ICC from the cluster effect, n_eff between C and C·P, bootstrap around Ā.
  CHECK(s.icc > 0.0);
  CHECK(s.mean_n_eff > 80.0);
  CHECK(s.mean_n_eff < 640.0);
  CHECK(s.mean_wilson.lo < s.mean_accuracy);
  CHECK(s.mean_wilson.hi > s.mean_accuracy);
  CHECK(s.mean_bootstrap.ci.lo < s.mean_accuracy);
  CHECK(s.mean_bootstrap.ci.hi > s.mean_accuracy);
  CHECK(s.mde == doctest::Approx(min_detectable_gap(s.mean_accuracy, 80, 8)));
  MESSAGE("summary: A_mean " << s.mean_accuracy << " Wilson(n_eff " << s.mean_n_eff << ") ["
                             << s.mean_wilson.lo << ", " << s.mean_wilson.hi << "] bootstrap ["
                             << s.mean_bootstrap.ci.lo << ", " << s.mean_bootstrap.ci.hi
                             << "] gap " << s.gap.gap << " null " << s.gap.expected_null_gap
                             << " MDE " << s.mde);
}

TEST_CASE("selftest stats: position period scan, by hand and against folding") {
  // One cluster at positions 0..5 with outcomes 1 0 0 1 0 0 (grand mean 1/3). By hand:
  //   Q = 2: classes {1,0,0} and {0,1,0}, both 1/3 -> G_2 = 0;
  //   Q = 3: class 0 = {1,1} (mean 1), classes 1, 2 mean 0 -> G_3 = 2(2/3)^2 + 4(1/3)^2 = 4/3;
  //   Q = 4: {1,0}, {0,0}, {0}, {1} -> G_4 = 2(1/6)^2 + 2(1/3)^2 + (1/3)^2 + (2/3)^2 = 5/6;
  //   Q = 6: every value alone -> G_6 = Σ (y − 1/3)^2 = 4/3.
  // Normalized by Q − 1: 0, 2/3, 5/18, 0.208, 4/15 -> the scan picks Q = 3.
  ClusterMatrix y = ClusterMatrix::zeros(1, 6), pos = ClusterMatrix::zeros(1, 6);
  const double v[6] = {1, 0, 0, 1, 0, 0};
  for (int t = 0; t < 6; ++t) {
    y.at(0, t) = v[t];
    pos.at(0, t) = t;
  }
  PeriodScanParams ps;
  ps.max_period = 6;
  ps.n_permutations = 99;
  ps.seed = 3;
  PeriodScan s = position_period_scan(y, pos, ps);
  REQUIRE(s.candidates.size() == 5);
  CHECK(s.candidates[0].period == 2);
  CHECK(s.candidates[0].power == doctest::Approx(0.0).scale(1.0));
  CHECK(s.candidates[1].power == doctest::Approx(4.0 / 3.0));
  CHECK(s.candidates[2].power == doctest::Approx(5.0 / 6.0));
  CHECK(s.candidates[4].power == doctest::Approx(4.0 / 3.0));
  CHECK(s.scan_argmax == 3);
  CHECK(s.period == 3);
  REQUIRE(s.folded_means.size() == 3);
  CHECK(s.folded_means[0] == 1.0);
  CHECK(s.folded_means[1] == 0.0);
  // Positions shifted by a multiple of every Q (lcm(2..6) = 60) change nothing.
  for (double& p : pos.v) p += 60;
  CHECK(position_period_scan(y, pos, ps).candidates[1].power == doctest::Approx(4.0 / 3.0));

  // Consecutive positions 0..15 and Q | 16: G_Q is the folded power (T/Q)·Σ_r (m_r − m̄)².
  Rng rng(5);
  ClusterMatrix x = ClusterMatrix::zeros(1, 16), px = ClusterMatrix::zeros(1, 16);
  std::vector<double> series(16);
  for (int t = 0; t < 16; ++t) {
    series[size_t(t)] = x.at(0, t) = rng.uniform();
    px.at(0, t) = t;
  }
  ps.max_period = 16;
  s = position_period_scan(x, px, ps);
  REQUIRE(s.candidates.size() == 15);
  for (int Q : {2, 4, 8, 16})
    CHECK(s.candidates[size_t(Q - 2)].power == doctest::Approx(folded_power(series, Q)).epsilon(1e-12));
}

TEST_CASE("selftest stats: position period scan finds a period that does not divide the sweep") {
  // 32 clusters, each 16 consecutive target positions from a random start: accuracy 0.85,
  // except 0.15 where pos ≡ 1 (mod 3). Residues mod 16 cannot show period 3; positions can.
  Rng rng(17);
  auto make = [&](bool planted, ClusterMatrix* y, ClusterMatrix* pos) {
    *y = ClusterMatrix::zeros(32, 16);
    *pos = ClusterMatrix::zeros(32, 16);
    for (int c = 0; c < 32; ++c) {
      const int base = 100 + int(rng.below(300));
      for (int j = 0; j < 16; ++j) {
        const int p = base + j;
        const double acc = planted && p % 3 == 1 ? 0.15 : (planted ? 0.85 : 0.7);
        pos->at(c, (p % 16)) = p;
        y->at(c, p % 16) = rng.uniform() < acc ? 1.0 : 0.0;
      }
    }
  };
  ClusterMatrix y, pos;
  make(true, &y, &pos);
  PeriodScanParams ps;
  ps.max_period = 16;
  ps.n_permutations = 999;
  ps.seed = 9;
  const PeriodScan s = position_period_scan(y, pos, ps);
  CHECK(s.detected);
  CHECK(s.period == 3);
  CHECK(s.candidates[1].p < 0.01);
  CHECK(s.fundamental_trough == doctest::Approx(1.0).epsilon(0.2).scale(1.0));
  // The residue-column scan over the same data has only 2, 4, 8, 16 to offer.
  PeriodScanParams rs = ps;
  rs.detrend = false;
  const PeriodScan r = period_scan(y, rs);
  for (const PeriodCandidate& c : r.candidates) CHECK(16 % c.period == 0);

  // Without a planted period: over 20 data sets at alpha 0.05, P(>= 5 detections) = 0.003.
  int detections = 0;
  ps.n_permutations = 199;
  for (int k = 0; k < 20; ++k) {
    make(false, &y, &pos);
    ps.seed = uint64_t(100 + k);
    detections += position_period_scan(y, pos, ps).detected ? 1 : 0;
  }
  MESSAGE("position scan false alarms: " << detections << " / 20");
  CHECK(detections <= 4);
}

TEST_CASE("selftest stats: empirical MDE by hand") {
  // Leave-one-out differences of hand_matrix(), per residue (by hand):
  //   r=0: 0, -1, -0.5, 0   sample variance 0.6875/3
  //   r=1: 0, 0.5, 1, 0     0.6875/3
  //   r=2: 0, 0.5, -0.5, 0  0.5/3          -> mean variance 0.625/3
  const double zs = normal_quantile(1.0 - 0.05 / 3.0) + normal_quantile(0.8);
  CHECK(empirical_mde(hand_matrix(), 4) == doctest::Approx(std::sqrt(zs * zs * (0.625 / 3.0) / 4.0)).epsilon(1e-12));
  // Four times the clusters halve it; constant differences give 0.
  CHECK(empirical_mde(hand_matrix(), 16) == doctest::Approx(empirical_mde(hand_matrix(), 4) / 2).epsilon(1e-12));
  CHECK(empirical_mde(matrix(3, 2, {1, 0, 1, 0, 1, 0}), 3) == 0.0);
}

namespace {
// K targets per sample: y_cr = mean over the K targets of Bernoulli(p_r + u_c + v_ci), clamped
// to [0, 1], with a sample effect u_c in {-0.2, 0, 0.2} and a target effect v_ci in {-0.3, 0,
// 0.3} that every residue of that target shares: the targets of one sample are correlated, and
// each target is correlated with itself across the residues (as in the real probes, where a
// target record is the same content at every shift).
Observations synth_targets(const std::vector<double>& p, int32_t n_clusters, int K, Rng& rng) {
  const int32_t P = int32_t(p.size());
  Observations o;
  o.hit = ClusterMatrix::zeros(n_clusters, P);
  o.nll = ClusterMatrix::zeros(n_clusters, P);
  for (int32_t c = 0; c < n_clusters; ++c) {
    const double u = 0.2 * (double(rng.below(3)) - 1.0);
    for (int i = 0; i < K; ++i) {
      const double v = 0.3 * (double(rng.below(3)) - 1.0);
      for (int32_t r = 0; r < P; ++r) {
        const double pr = std::min(1.0, std::max(0.0, p[size_t(r)] + u + v));
        const bool hit = rng.uniform() < pr;
        o.hit.at(c, r) += (hit ? 1.0 : 0.0) / K;
        o.nll.at(c, r) += ((hit ? 0.2 : 2.0) + 0.3 * rng.uniform()) / K;
      }
    }
  }
  return o;
}
}  // namespace

TEST_CASE("selftest stats: several targets per sample keep the false-alarm bound and buy power") {
  // The self-test's default design: 8 targets per sample, P = 8, 16 samples per stage. Null:
  // every residue at 0.7; 300 runs, bound α + 3·sd. Power: residue 5 at 0.55 (a 15 pp deficit).
  const int runs = 300;
  const double bound = 0.05 + 3.0 * std::sqrt(0.05 * 0.95 / runs);
  FlagParams fp;  // δ = 0.10
  for (int K : {1, 8}) {
    int alarms = 0, found = 0;
    double mde_null = 0.0;
    for (int seed = 0; seed < runs; ++seed) {
      Rng rng(uint64_t(seed) * 104729u + uint64_t(K));
      std::vector<double> p(8, 0.7);
      const Observations s1 = synth_targets(p, 16, K, rng), s2 = synth_targets(p, 16, K, rng);
      REQUIRE(check_observations(s1).ok());
      if (!confirm(s2, screen(s1, fp).candidates, fp).flagged.empty()) ++alarms;
      mde_null += empirical_mde(s2.hit, 16) / runs;
      p[5] = 0.55;
      const Observations w1 = synth_targets(p, 16, K, rng), w2 = synth_targets(p, 16, K, rng);
      const std::vector<int32_t> f = confirm(w2, screen(w1, fp).candidates, fp).flagged;
      if (f.size() == 1 && f[0] == 5) ++found;
    }
    const double rate = double(alarms) / runs;
    MESSAGE(K << " target(s) per sample: false-alarm rate " << rate << " (bound " << bound << "), a 15 pp deficit "
              << "found alone in " << found << " of " << runs << " runs, mean empirical MDE " << mde_null);
    CHECK(rate <= bound);
    if (K == 8) CHECK(found >= runs / 2);
    if (K == 1) CHECK(found < runs / 4);
  }
}
