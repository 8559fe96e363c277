// Two-stage flagging; the argument for its false-alarm bound is in selftest_flags.h.
#include "selftest_flags.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "selftest_stats_detail.h"

namespace phasekv {
namespace selftest {

using namespace detail;

// ---- two-stage flagging -----------------------------------------------------------------------

Screening screen(const Observations& stage1, const FlagParams& params) {
  Screening s;
  s.hit_tests = loo_tests(stage1.hit, Worse::kLower);
  const bool use_nll = params.screen_nll && !stage1.nll.empty();
  if (use_nll) s.nll_tests = loo_tests(stage1.nll, Worse::kHigher);
  for (int32_t r = 0; r < stage1.hit.n_cols; ++r) {
    const LooTest& h = s.hit_tests[size_t(r)];
    bool pick = h.p < params.screen_p || h.deficit >= params.screen_deficit;
    if (use_nll && s.nll_tests[size_t(r)].p < params.screen_p) pick = true;
    if (pick) s.candidates.push_back(r);
  }
  return s;
}

Confirmation confirm(const Observations& stage2, const std::vector<int32_t>& candidates,
                     const FlagParams& params) {
  Confirmation out;
  if (candidates.empty()) return out;
  const int32_t P = stage2.hit.n_cols;
  std::vector<bool> seen(size_t(P), false);
  for (int32_t r : candidates) {
    PKV_ASSERT(r >= 0 && r < P && !seen[size_t(r)]);
    seen[size_t(r)] = true;
  }
  const std::vector<LooTest> tests =
      loo_tests(stage2.hit, Worse::kLower, params.shifted_null ? params.margin : 0.0);
  std::vector<double> p;
  for (int32_t r : candidates) p.push_back(tests[size_t(r)].p);
  const HolmResult h = holm(p, params.alpha);
  for (size_t i = 0; i < candidates.size(); ++i) {
    ConfirmedResidue cr;
    cr.test = tests[size_t(candidates[i])];
    cr.holm_p = h.adjusted[i];
    cr.rejected = h.reject[i];
    cr.flagged = cr.rejected && cr.test.deficit >= params.margin;
    if (cr.flagged) out.flagged.push_back(candidates[i]);
    out.tested.push_back(cr);
  }
  std::sort(out.flagged.begin(), out.flagged.end());
  return out;
}

}  // namespace selftest
}  // namespace phasekv
