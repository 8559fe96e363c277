// Period detection for the self-test: the folded periodogram over the residue curve and over
// absolute target positions; the data model is in selftest_stats.h.
#pragma once

#include <cstdint>
#include <vector>

#include "selftest_stats.h"

namespace phasekv {
namespace selftest {

// ---- period detection (§4) ------------------------------------------------------------------
//
// Normalisation. For a real series x_0..x_{T−1} with mean x̄, the periodogram is two-sided and
// not doubled:
//   I_k = |Σ_t (x_t − x̄)·e^{−2πikt/T}|² / T,   k = 0..T−1   (I_0 = 0, I_k = I_{T−k}),
// so Σ_{k=0}^{T−1} I_k = Σ_t (x_t − x̄)² (Parseval). For a period P that divides T, the
// harmonics of 1/P are the bins k = jT/P, j = 1..P−1, and EXACTLY
//   Σ_{j=1}^{P−1} I_{jT/P} = (T/P)·Σ_{r=0}^{P−1} (m_r − m̄)² =: G_P,
// with m_r = mean of x_t over t ≡ r (mod P) and m̄ = x̄ (§4.2): the DFT at bin jT/P is (T/P)
// times the P-point DFT of the centred folded means, then Parseval on P points.
std::vector<double> periodogram(const std::vector<double>& x);  // [T]
// G_P by folding (right-hand side). P must divide T.
double folded_power(const std::vector<double>& x, int32_t period);
struct PeriodogramIdentity {
  double harmonic_sum = 0.0;  // Σ_{j=1}^{P−1} I_{jT/P} from the DFT
  double folded_sum = 0.0;    // (T/P)·Σ_r (m_r − m̄)²
  double abs_error = 0.0;     // |difference|
};
PeriodogramIdentity check_periodogram_identity(const std::vector<double>& x, int32_t period);

// Period scan over a [C, T] matrix of per-offset outcomes (hits or NLL; T consecutive
// offsets, or T = P residues for the per-residue curve, where detrend should be off: residue
// order is not depth order). Candidates are the P in
// [2, min(max_period, T)] that divide T. Each row is optionally detrended (least-squares line
// removed) first; all statistics use the cluster-averaged series x̄_t.
//   - per candidate: G_P and a permutation p that shuffles each cluster's values within
//     contiguous blocks of length P (keeps trends longer than P, destroys phase) (§4.4);
//   - scan: S = max_P G_P/(P−1) with a full within-cluster shuffle, which controls the false
//     alarm over the whole scan (§4.4, unknown P); detected = scan_p <= alpha;
//   - reported period: the smallest candidate P whose multiples do not add significant power
//     (§4.4: multiples of the true period light up too). For P with candidate multiples
//     M = {kP}, the statistic max_{kP∈M} (G_{kP} − G_P)/((k−1)P) is tested by shuffling each
//     cluster's values among offsets with equal t mod P inside blocks of length lcm(M), which
//     keeps any period-P structure; P is accepted when that p > alpha. The largest candidate
//     has no multiples and is always accepted. (G_{kP} >= G_P: folding is nested.)
//   - the folded means at the reported period and the phase of its fundamental:
//     fundamental_trough = P(π − arg M_1)/2π mod P, M_1 = Σ_r m_r e^{−2πir/P}, the (fractional)
//     residue where the fundamental sinusoid is lowest — a single dip at r0 gives r0.
// p-values are (1 + #{stat* >= stat})/(1 + B), ties counted as exceedances.
struct PeriodScanParams {
  int32_t max_period = 16;       // largest candidate P
  int32_t n_permutations = 999;  // B per test
  uint64_t seed = 0;             // Rng seed
  bool detrend = true;           // remove each cluster's least-squares line first (§4.3)
  double alpha = 0.05;           // detection level and the multiples test level
};
struct PeriodCandidate {
  int32_t period = 0;
  double power = 0.0;        // G_P of x̄
  double normalized = 0.0;   // G_P/(P−1)
  double p = 1.0;            // block-shuffle permutation p of G_P
  double multiples_p = 1.0;  // p of "multiples of P add power" (1 without multiples)
};
struct PeriodScan {
  std::vector<PeriodCandidate> candidates;  // ascending period
  int32_t scan_argmax = 0;        // candidate with the largest G_P/(P−1) (smallest on ties)
  double scan_stat = 0.0;         // max_P G_P/(P−1)
  double scan_p = 1.0;
  bool detected = false;          // scan_p <= alpha
  int32_t period = 0;             // reported period (see above); 0 without candidates
  std::vector<double> folded_means;  // [period] m_r of x̄ at the reported period
  double fundamental_trough = 0.0;   // in [0, period)
};
PeriodScan period_scan(const ClusterMatrix& y, const PeriodScanParams& params);

// Period scan over absolute positions, for a model without compressed layers: its sweep has
// P = 16 residue columns, and a period Q that does not divide 16 cannot be read from residues
// mod 16 — but every probe's target position is known. y[c][j] is the outcome of cluster c's
// probe j, pos[c][j] its target position (an integer >= 0). For each Q in
// [2, params.max_period] the observations are grouped by pos mod Q (every cluster's outcome
// pooled, so a cluster that does not visit every class still counts):
//   G_Q = Σ_q n_q (m_q − m)²   (n_q observations in class q, mean m_q; m the grand mean),
// the between-class sum of squares; for one cluster at positions 0..T−1 and Q | T it equals
// folded_power. normalized = G_Q/(Q−1). Permutations shuffle each cluster's outcomes among its
// positions (B of them, shared by every Q): per-candidate p of G_Q, and the scan p of
// S = max_Q G_Q/(Q−1). period = the candidate with the largest normalized power (smallest on
// ties), detected = scan_p <= alpha; folded_means are the class means m_q at that period and
// fundamental_trough as in period_scan. params.detrend is ignored (positions within a cluster
// span only a few tokens).
PeriodScan position_period_scan(const ClusterMatrix& y, const ClusterMatrix& pos, const PeriodScanParams& params);


}  // namespace selftest
}  // namespace phasekv
