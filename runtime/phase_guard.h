// The phase guard (DESIGN.md section 6, "acting on the report"): the runtime applies what the
// self-test found, without retraining, in two ways the phase paper names.
//
//  * Phase alignment: neutral tokens inserted before the template's {{content}} slot so that
//    content starts on the strongest residue. The result is verified by re-tokenizing it.
//  * Complementary-phase redundant decoding: a request's content is evaluated at its own phase
//    (branch A) and shifted by g neutral tokens (branch B), g chosen so that every residue's
//    worse branch is as good as possible; the template prefix is prefilled once and shared
//    through a snapshot. At every step the next token comes from the more confident branch
//    (the higher top probability), and both branches then consume it, so they stay in step.
//    Why that rule: a compressed layer that cannot see a fact at a weak residue leaves the
//    model unsure (a flat distribution) where the branch that can see it is sharp; the rule
//    needs only each branch's top probability (no vocabulary-sized mixing), and it degrades to
//    the better branch rather than averaging a wrong answer into a right one. When both
//    branches are wrong together (correlated errors) it cannot help — which the self-test's
//    guarded scoring measures (selftest.h SelftestOptions::guard_shift), never assumed.
//  * A trigger: a request is guarded only when branch A's first answer token has a top
//    probability below a threshold (or always, or never); an unguarded request costs nothing
//    beyond an ordinary one (the prefix snapshot is the prefix cache every request uses).
//
// Memory: the guard owns two contexts planned at creation plus one snapshot buffer; start()
// and accept() allocate nothing.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "context.h"
#include "selftest_report.h"

namespace phasekv {

// What the guard needs from a self-test report.
struct PhaseProfile {
  uint32_t period = 0;            // P
  std::vector<double> accuracy;   // [P] accuracy per residue, averaged over the protocols run
  std::vector<int32_t> weak;      // flagged residues
  uint32_t strongest = 0;         // the strongest residue (the report's advice)
};

// From a report in memory (the JSON's fields come from the same numbers).
PhaseProfile phase_profile(const SelftestReport& report);
// kInvalidArgument naming the field: P outside [2, 256], accuracy not [P] values in [0, 1],
// a weak or strongest residue outside [0, P).
Status check_phase_profile(const PhaseProfile& p);

// The guard's shift: g in 1..P-1 maximising min over r of max(A_r, A_(r+g) mod P) (every
// residue's better branch), the smallest such g on ties; 0 when no residue is weak.
uint32_t guard_shift(const PhaseProfile& p);

// The neutral padding token (the self-test's: never merges with its neighbours), or -1.
int32_t neutral_pad_token(const Tokenizer& tok);

struct TemplateAlignment {
  std::string text;             // the aligned template (the input when nothing changes)
  uint32_t t0 = 0;              // the slot's first token before
  uint32_t aligned_t0 = 0;      // and after, re-tokenized
  uint32_t target_residue = 0;  // the strongest residue
  uint32_t inserted_tokens = 0; // aligned_t0 - t0
  std::string inserted_text;    // what was inserted right before the slot
  bool changed = false;         // false: no weak residue, or the slot already starts on the strongest
};

// Inserts neutral text right before the slot so that the re-tokenized template's slot starts
// on the strongest residue (t0' = target mod P). Candidates, in order: the self-test's neutral
// pad token's text repeated n, n+P, n+2P times (n = (target - t0) mod P), then spaces and
// newlines; the first whose re-tokenization (parse_template) puts the slot on the target and
// keeps the original prefix's tokens as a prefix is taken. Errors: the template's own
// (parse_template), a bad profile, kUnsupported when no candidate aligns.
Status align_template(const Tokenizer& tok, const std::string& template_text, const PhaseProfile& profile,
                      TemplateAlignment* out);

// max over the row of the log-softmax (the top token's log-probability) and its index.
double top_logprob(const float* logits, int n, int32_t* argmax = nullptr);

struct PhaseGuardParams {
  uint32_t shift = 0;        // branch B's extra neutral tokens; 0: guard_shift(profile)
  double threshold = 1.0;    // guard a request when branch A's first top probability is below
                             // this: > 1 always, 0 never (default 1: every request but those
                             // whose first token is certain)
};

struct PhaseGuardStats {
  bool guarded = false;         // the last request ran both branches
  double first_top_p = 0.0;     // branch A's first top probability (the trigger's input)
  uint32_t shift = 0;           // g
  int64_t prefill_a = 0, prefill_b = 0;  // tokens prefilled per branch for the last request (B: extra cost)
  int64_t steps = 0, steps_b = 0;        // tokens accepted, and how many came from branch B
};

class PhaseGuard {
 public:
  // Plans both branches' contexts (params as for Context::create; n_ctx must hold the prefix,
  // the shift, the content, the suffix and the generation), parses the template (one slot),
  // prefills its prefix once and shares it with branch B through a snapshot.
  static Status create(const Model& model, const ContextParams& params, const std::string& template_text,
                       const PhaseProfile& profile, const PhaseGuardParams& guard, std::unique_ptr<PhaseGuard>* out);

  // A request: `content` token ids (the caller encodes untrusted text without specials). Branch
  // A evaluates prefix + content + suffix; when the trigger fires (and the shift is non-zero),
  // branch B evaluates prefix + g pads + content + suffix. Errors leave the guard ready for the
  // next start().
  Status start(const int32_t* content, size_t n);
  // The next token's logits: the more confident branch's ([vocab], valid until accept()).
  const float* logits() const { return chosen_ == 0 ? a_->logits() : b_->logits(); }
  int branch() const { return chosen_; }  // 0: A, 1: B
  // Appends `token` to every running branch.
  Status accept(int32_t token);
  // Room left for generated tokens in the fuller branch.
  uint32_t room() const;
  const PhaseGuardStats& stats() const { return stats_; }
  uint32_t shift() const { return shift_; }
  uint32_t prefix_tokens() const { return uint32_t(prefix_.size()); }
  const Context& branch_a() const { return *a_; }

 private:
  PhaseGuard() = default;
  void choose();

  std::unique_ptr<Context> a_, b_;
  std::vector<int32_t> prefix_, suffix_;
  std::vector<int32_t> pads_;  // [shift] neutral pads
  uint32_t shift_ = 0;
  double threshold_ = 1.0;
  int chosen_ = 0;
  PhaseGuardStats stats_;
};

}  // namespace phasekv
