// Statistics of the phase self-test (DESIGN.md section 6, step 5): per-residue accuracy with
// cluster-aware intervals, the mean, the worst residue, the peak-to-trough gap with its noise
// level, leave-one-out deficit tests with Holm and the minimum detectable gap; two-stage flagging
// with a false-alarm bound is in selftest_flags.h, the folded-periodogram period scan in
// selftest_period.h. Formulas and section
// numbers refer to docs/research/evaluation.md (the "note").
//
// Data model. P residues r = 0..P-1. Each logical sample (cluster) c = 0..C-1 visits every
// residue once with the same content, so a run is a C x P matrix: hit y[c][r] in {0, 1}
// (greedy exact match) and nll l[c][r] (gold-value negative log-likelihood, nats). Clusters
// are independent; the P observations of one cluster are correlated (shared haystack, key and
// value), which the paired tests exploit and the intervals of pooled quantities account for.
//
// Everything here runs after the probe loop and may allocate. Only the C++17 standard library
// is used. Every random choice (bootstrap, permutations) comes from the seeded Rng below, and
// integers are drawn without the std distributions, so a seed gives the same result on every
// platform. Shapes and preconditions are asserted (PKV_ASSERT); check_observations() turns a
// malformed run into a Status first.
#pragma once

#include <cstdint>
#include <vector>

#include "status.h"

namespace phasekv {
namespace selftest {

constexpr double kZ975 = 1.959963984540054;  // Φ⁻¹(0.975): two-sided 95 % intervals

// ---- data -------------------------------------------------------------------------------

// Row-major matrix of one metric: one row per cluster.
struct ClusterMatrix {
  int32_t n_clusters = 0;  // C
  int32_t n_cols = 0;      // P residues (or T consecutive offsets for period_scan)
  std::vector<double> v;   // [n_clusters, n_cols]

  static ClusterMatrix zeros(int32_t n_clusters, int32_t n_cols);
  bool empty() const { return n_clusters == 0; }
  double at(int32_t c, int32_t j) const { return v[size_t(c) * size_t(n_cols) + size_t(j)]; }
  double& at(int32_t c, int32_t j) { return v[size_t(c) * size_t(n_cols) + size_t(j)]; }
};

// One run of the self-test (or one stage of it).
struct Observations {
  ClusterMatrix hit;  // [C, P] y_cr in {0, 1}
  ClusterMatrix nll;  // [C, P] gold NLL in nats; empty (0 x 0) when not recorded
};

// kInvalidArgument naming the field unless: C >= 2 and P >= 2, hit.v holds C*P values in
// {0, 1}, and nll is empty or has the same shape with finite values.
Status check_observations(const Observations& obs);

// Per-column means: A_r = mean_c y_cr for hits, NLL_r for nll.  // [n_cols]
std::vector<double> residue_means(const ClusterMatrix& y);
// Per-row means ȳ_c (a cluster's mean over residues).  // [n_clusters]
std::vector<double> cluster_means(const ClusterMatrix& y);

// ---- seeded generator ---------------------------------------------------------------------

// xoshiro256** (Blackman & Vigna) seeded through splitmix64. The same seed gives the same
// stream on every platform and compiler.
class Rng {
 public:
  explicit Rng(uint64_t seed);
  uint64_t next();            // 64 uniform bits
  uint64_t below(uint64_t n);  // uniform integer in [0, n), n >= 1; unbiased (rejection)
  double uniform();           // uniform double in [0, 1) with 53 random bits

 private:
  uint64_t s_[4];
};

// ---- normal and chi-square distributions ----------------------------------------------------

// Φ(x) = ½·erfc(−x/√2): full relative accuracy in the lower tail.
double normal_cdf(double x);
// Φ⁻¹(p): Acklam's rational approximation (relative error < 1.2e-9) refined by one Halley
// step on Φ(x) − p, evaluated in the lower tail (p > ½ uses −Φ⁻¹(1−p), exact in binary), so
// the result is good to a few ulp. p <= 0 gives −inf, p >= 1 gives +inf.
double normal_quantile(double p);
// Upper tail P(χ²_df > x) for integer df >= 1, in closed form: even df = 2k:
// e^{−x/2}·Σ_{j<k} (x/2)^j/j!; odd df = 2k+1: erfc(√(x/2)) + √(2x/π)·e^{−x/2}·
// Σ_{j=1..k} x^{j−1}/(1·3·…·(2j−1)). Terms are summed in log space (no overflow).
double chi2_sf(double x, int32_t df);

// ---- intervals and clustering (§3.2, §3.3) --------------------------------------------------

struct Interval {
  double lo = 0.0;
  double hi = 1.0;
};

// Wilson score interval (§3.2) for a proportion p̂ = successes/n:
//   centre = (p̂ + z²/2n)/(1 + z²/n),  half-width = z/(1 + z²/n)·√(p̂(1−p̂)/n + z²/4n²).
// n may be fractional (a cluster-effective n; then successes = p̂·n_eff). n <= 0 gives [0, 1].
// The result is clipped to [0, 1]; lo = 0 exactly at p̂ = 0 and hi = 1 at p̂ = 1.
Interval wilson(double successes, double n, double z = kZ975);

// ANOVA estimator of the intraclass correlation (§3.3) for C clusters of m = n_cols
// observations each (balanced one-way layout):
//   MSB = m·Σ_c (ȳ_c − ȳ)²/(C−1),  MSW = Σ_c Σ_j (y_cj − ȳ_c)²/(C(m−1)),
//   ρ̂ = (MSB − MSW)/(MSB + (m−1)·MSW).
// The raw estimate is returned (it can be negative). A matrix without any variance (0/0)
// returns 1: with no information on the correlation, the conservative value.
double icc_anova(const ClusterMatrix& y);

// Kish design effect deff = 1 + (m−1)ρ (§3.3), with ρ clamped to [0, 1] so that
// 1 <= deff <= m: a negative ρ̂ is not trusted to shrink an interval.
double design_effect(double m, double rho);
// n_eff = n_obs/deff(m, ρ) (§3.3). For A_mean: n_obs = C·P, m = P, ρ = icc_anova(hit).
double effective_n(double n_obs, double m, double rho);

// Effective n of ONE residue's rate A_r (§3.2, §3.3, §5.6). Residues are paired within
// clusters: a cluster contributes exactly one observation to each residue, so the residue
// copies never share a residue and the across-residue correlation does not enter Var(A_r):
// n_eff = C (deff = 1). Only when Q probes share one compressed haystack at the same residue
// (outer mode) do they form a cluster of size m = Q inside a residue:
//   n_eff = C·Q/(1 + (Q−1)ρ_q),  ρ_q the within-haystack ICC (clamped to [0, 1]).
double residue_effective_n(int32_t n_clusters, int32_t queries_per_cluster = 1,
                           double rho_queries = 0.0);

// Cluster-robust standard error of A_mean in the balanced case (§3.3):
// SE = sd_c(ȳ_c)/√C (sample sd, C−1 denominator).
double cluster_robust_se(const ClusterMatrix& y);

// Cluster bootstrap of A_mean = mean_r A_r = mean_c ȳ_c (§3.3): resample C clusters with
// replacement (all P copies of a cluster travel together), n_replicates times, and take the
// percentile interval with linear interpolation between order statistics (the "type 7"
// quantile of R and numpy: h = (B−1)·q).
struct BootstrapParams {
  int32_t n_replicates = 2000;  // B (the note asks for >= 2000)
  uint64_t seed = 0;            // Rng seed
  double level = 0.95;          // two-sided coverage of the percentile interval
};
struct BootstrapResult {
  double estimate = 0.0;  // A_mean of the data
  Interval ci;            // percentile interval
  double se = 0.0;        // sd of the replicates
};
BootstrapResult cluster_bootstrap_mean(const ClusterMatrix& y, const BootstrapParams& params);

// ---- multiplicity (§3.5) ----------------------------------------------------------------------

// Holm step-down: with p sorted p_(1) <= … <= p_(m), the adjusted values are
//   p̃_(j) = min(1, max_{k<=j} (m−k+1)·p_(k)),
// returned in the input order; reject[i] = p̃_i <= alpha, which is exactly "reject H_(j) while
// p_(j) <= α/(m−j+1) and stop at the first failure". Ties keep their input order. FWER <= α
// under any dependence between the tests.
struct HolmResult {
  std::vector<double> adjusted;  // [m]
  std::vector<bool> reject;      // [m]
};
HolmResult holm(const std::vector<double>& p, double alpha = 0.05);

// ---- paired leave-one-out tests (§3.4) --------------------------------------------------------

// Which direction of a metric is worse: hits kLower, NLL kHigher.
enum class Worse { kLower, kHigher };

// Residue r against the mean of the other residues, paired within clusters:
//   d_c = y_cr − mean_{r'≠r} y_cr',  deficit = −mean(d) (kLower) or +mean(d) (kHigher),
//   z = (margin − deficit)/(sd(d)/√C),  p = Φ(z)   (one-sided, "r is worse by more than margin").
// For hits with margin 0 this is z = mean(d)/(sd(d)/√C), p = Φ(z). margin > 0 tests the shifted
// null of §5.5 (H0: p_r >= p̄_{−r} − δ). sd uses C−1. When sd(d) = 0 the test is decided by the
// sign: z = −inf (p = 0) if margin − deficit < 0, otherwise z = +inf (p = 1). The normal
// approximation wants C ≳ 20 (§5.5).
struct LooTest {
  int32_t residue = 0;
  double mean_diff = 0.0;  // mean_c d_c, in the metric's units (signed: r minus the others)
  double sd_diff = 0.0;    // sample sd of d_c
  double deficit = 0.0;    // how much worse r is than the others (> 0 = worse)
  double z = 0.0;
  double p = 1.0;          // one-sided p-value for "r is worse"
};
std::vector<LooTest> loo_tests(const ClusterMatrix& y, Worse worse, double margin = 0.0);

// Cochran's Q, the omnibus test of "all residues equal" on paired hits (§3.4):
//   Q = (R−1)[R·Σ_r C_r² − N²]/(R·N − Σ_c L_c²),  Q ~ χ²_{R−1},
// C_r residue totals, L_c cluster totals, N the grand total. A zero denominator (every cluster
// all-hit or all-miss) gives Q = 0, p = 1.
struct CochranQ {
  double q = 0.0;
  int32_t df = 0;
  double p = 1.0;
};
CochranQ cochran_q(const ClusterMatrix& hit);

// ---- worst residue and gap (§3.6, §5.4) -------------------------------------------------------

// A_min with a split-sample estimate (§3.6). The naive minimum is biased low: the argmin is
// chosen on the same noise that is then reported. Clusters are split by index parity (even /
// odd; clusters are i.i.d., so any fixed split is valid and parity needs no seed). The argmin
// is chosen on one half and its accuracy and deficit (mean of the other residues minus its
// own) are measured on the other half; both directions are computed (cross-fitting) and
// averaged. Ties pick the lowest residue. Needs C >= 2.
struct SplitMin {
  int32_t naive_argmin = 0;
  double naive_min = 0.0;         // min_r A_r on all clusters
  double naive_deficit = 0.0;     // mean_{r≠argmin} A_r − A_min on all clusters
  int32_t argmin_even = 0;        // argmin chosen on the even clusters
  int32_t argmin_odd = 0;         // argmin chosen on the odd clusters
  double split_min = 0.0;         // ½[A_odd(argmin_even) + A_even(argmin_odd)]
  double split_deficit = 0.0;     // the same average for the deficit
  double optimism = 0.0;          // split_min − naive_min: how far the naive minimum reads low
  double deficit_optimism = 0.0;  // naive_deficit − split_deficit
};
SplitMin split_sample_min(const ClusterMatrix& hit);

// d_R = E[range of R i.i.d. standard normals] = ∫ [1 − Φ(x)^R − (1 − Φ(x))^R] dx, by
// composite Simpson on [−12, 12] (error < 1e-9). d_2 = 2/√π, d_3 = 3/√π, d_4 = 2.0588,
// d_8 = 2.8472, d_16 = 3.5320 (the note's 2.06 / 2.85 / 3.53).
double expected_normal_range(int32_t r);

// Peak-to-trough gap and spread of the A_r, with the noise level the note prescribes (§3.6,
// §5.4): under H0 (all residues at p̄ = A_mean, C clusters) each A_r has sd √(p̄q̄/C), so
//   E[Δ] ≈ d_R·√(p̄q̄/C)   and   E[σ²] = p̄q̄/C  (σ uses R−1 so that it compares directly).
// This ignores the within-cluster correlation (positive ICC makes the true null gap smaller);
// gap_permutation_null() gives the exact exchangeable-residue null instead.
struct GapStats {
  double mean = 0.0;            // Ā
  double max = 0.0;             // max_r A_r
  double min = 0.0;             // min_r A_r
  int32_t argmax = 0;
  int32_t argmin = 0;
  double gap = 0.0;             // Δ = max − min
  double sd = 0.0;              // σ: sd of A_r over residues (R−1 denominator)
  double relative_gap = 0.0;    // Δ/Ā (0 when Ā = 0, where Δ = 0 too)
  double se_null = 0.0;         // √(p̄q̄/C), also the null σ
  double gap_se_units = 0.0;    // Δ/se_null, to compare with d_R (0 when se_null = 0)
  double d_r = 0.0;             // expected_normal_range(R)
  double expected_null_gap = 0.0;  // d_R·se_null
};
GapStats gap_stats(const ClusterMatrix& hit);

// Within-cluster permutation null of the gap: each cluster's P values are shuffled among the
// residues (exact under exchangeable residues, §3.4), Δ* recomputed, n_permutations times.
struct GapNull {
  double mean_gap = 0.0;  // mean of Δ*: the gap noise alone produces with this ICC
  double p = 1.0;         // (1 + #{Δ* >= Δ})/(1 + B)
};
GapNull gap_permutation_null(const ClusterMatrix& hit, int32_t n_permutations, uint64_t seed);

// ---- power (§3.7) ---------------------------------------------------------------------------

struct PowerParams {
  double alpha = 0.05;  // family-wise; each residue is tested at α/R (Bonferroni worst case)
  double power = 0.8;
};
// Minimum detectable gap for the leave-one-out paired test (§3.7): the Δ that solves
//   n = (z_{1−α/R} + z_{power})²·[p_w q_w + p_s q_s/(R−1)]/Δ²,  p_w = p_s − Δ,
// for n = C clusters. With K = (z_{1−α/R} + z_{power})², p = p_s, q = 1 − p_s this is the
// quadratic (C + K)Δ² − K(p − q)Δ − K·p·q·R/(R−1) = 0, whose positive root is returned, capped
// at p_s. p_healthy is the healthy residues' accuracy; the self-test passes Ā (with one weak
// residue Ā = p_s − Δ/R, which for p_s >= ½ slightly overstates the MDE: conservative).
// R = 8, p_s = 0.9: 0.383 / 0.307 / 0.228 / 0.149 / 0.098 at C = 20 / 30 / 50 / 100 / 200.
double min_detectable_gap(double p_healthy, int32_t n_clusters, int32_t n_residues,
                          const PowerParams& params = PowerParams());
// The same test's MDE from the data instead of the binomial model: σ̂_d is the pooled sample sd
// of the leave-one-out differences d_cr = y_cr − mean_{r'≠r} y_cr' (over clusters, averaged in
// variance over the residues), and MDE = (z_{1−α/R} + z_{power})·σ̂_d/√n for a test on
// n_clusters fresh clusters. It needs no model of y: it holds for hits (0/1) and for means of
// several targets per sample alike, and is how two probe designs are compared. 0 when every
// d is constant.
double empirical_mde(const ClusterMatrix& y, int32_t n_clusters, const PowerParams& params = PowerParams());
// The same formula solved for n, rounded up: clusters per run (each visits all R residues).
// R = 8, p_s = 0.9: 193 / 63 / 19 for Δ = 0.10 / 0.20 / 0.40 (the note's table).
int64_t required_clusters(double p_healthy, double gap, int32_t n_residues,
                          const PowerParams& params = PowerParams());

// ---- the whole report (§5.4, §5.7) ------------------------------------------------------------

struct SummaryParams {
  double z = kZ975;            // interval quantile
  BootstrapParams bootstrap;   // A_mean interval
  PowerParams power;           // MDE
};
struct ResidueRow {
  double accuracy = 0.0;   // A_r
  Interval accuracy_ci;    // Wilson with n = residue_effective_n(C) = C
  double nll = 0.0;        // NLL_r (0 without NLL)
  double nll_excess = 0.0;  // ΔNLL_r = NLL_r − mean of the other residues' NLL
  LooTest hit_test;        // leave-one-out, hits
  double hit_holm_p = 1.0;  // Holm over all residues (the single-stage option of §5.5)
  LooTest nll_test;        // leave-one-out, NLL (default-constructed without NLL)
};
struct Summary {
  int32_t n_clusters = 0;
  int32_t n_residues = 0;
  std::vector<ResidueRow> residues;  // [P]
  double mean_accuracy = 0.0;        // Ā
  double icc = 0.0;                  // raw ANOVA ρ̂ of the hits, clusters of size P
  double design_effect = 1.0;        // 1 + (P−1)·clamp(ρ̂, 0, 1)
  double mean_n_eff = 0.0;           // C·P/deff
  Interval mean_wilson;              // Wilson(Ā·n_eff, n_eff)
  double mean_cluster_se = 0.0;      // cluster_robust_se(hit)
  BootstrapResult mean_bootstrap;    // cluster bootstrap of Ā
  SplitMin worst;                    // A_min, naive and split-sample
  GapStats gap;                      // Δ, σ, Δ/Ā and the null gap
  CochranQ cochran;
  double mde = 0.0;                  // min_detectable_gap(Ā, C, P)
  double mde_empirical = 0.0;        // empirical_mde(hit, C)
};
Summary summarize(const Observations& obs, const SummaryParams& params = SummaryParams());

}  // namespace selftest
}  // namespace phasekv
