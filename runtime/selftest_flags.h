// Two-stage flagging of weak residues (the self-test's false-alarm control); the data model and
// the tests it builds on are in selftest_stats.h.
#pragma once

#include <cstdint>
#include <vector>

#include "selftest_stats.h"

namespace phasekv {
namespace selftest {

// ---- two-stage flagging (§5.5) ----------------------------------------------------------------
//
// A residue is weak when p_r <= p̄_{−r} − δ. Stage 1 screens with any data-driven rule on n₁
// clusters; stage 2 runs the leave-one-out test on n₂ FRESH clusters for the screened
// residues only, with Holm at α over |candidates|, and flags a residue only when Holm rejects
// AND its stage-2 deficit is >= δ.
//
// False-alarm argument. Let H0_r: p_r >= p̄_{−r} (r is not below the others). The stage-2
// clusters are independent of the stage-1 clusters, so conditional on the candidate set the
// stage-2 p-values of the candidates are (asymptotically) valid: P(p_r <= u | candidates) <= u
// for every true H0_r. Holm controls the family-wise error over the |candidates| tests under
// any dependence between them (they share comparator residues), hence
//   P(flag some r with H0_r true | candidates) <= α  for every candidate set,
// and so unconditionally. The δ filter only removes flags and the screen only removes tests,
// so neither can raise this probability. With shifted_null the same argument bounds flags of
// residues whose true deficit is below δ (H0_r: p_r >= p̄_{−r} − δ). The bound rests on the
// normal approximation (n₂ ≳ 20, §5.5) and on independent clusters.
struct FlagParams {
  double alpha = 0.05;           // family-wise false-alarm rate of one self-test run
  double margin = 0.10;          // δ: practical margin in accuracy (0.10 = 10 pp)
  double screen_p = 0.2;         // stage 1: candidate if a one-sided LOO p < screen_p
  double screen_deficit = 0.05;  // stage 1: or if the hit deficit >= this (δ/2, §5.5)
  bool screen_nll = true;        // stage 1 also screens on NLL when it was recorded
  bool shifted_null = false;     // stage 2 tests H0: p_r >= p̄_{−r} − δ (the stricter option)
};

struct Screening {
  std::vector<int32_t> candidates;  // residues to confirm, ascending
  std::vector<LooTest> hit_tests;   // [P] stage-1 hit tests
  std::vector<LooTest> nll_tests;   // [P] stage-1 NLL tests (empty without NLL)
};
Screening screen(const Observations& stage1, const FlagParams& params);

struct ConfirmedResidue {
  LooTest test;          // stage-2 hit test (margin δ under shifted_null)
  double holm_p = 1.0;   // Holm-adjusted over the candidates
  bool rejected = false;  // holm_p <= α
  bool flagged = false;   // rejected && test.deficit >= δ
};
struct Confirmation {
  std::vector<ConfirmedResidue> tested;  // one per candidate, in candidate order
  std::vector<int32_t> flagged;          // weak residues, ascending
};
// candidates: distinct residues in [0, P) (usually screen(...).candidates); none → no flags.
Confirmation confirm(const Observations& stage2, const std::vector<int32_t>& candidates,
                     const FlagParams& params);


}  // namespace selftest
}  // namespace phasekv
