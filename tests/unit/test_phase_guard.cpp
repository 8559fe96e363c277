// The phase guard (runtime/phase_guard.h): the shift rule and the top probability derived by
// hand, templates aligned on SmolLM2's tokenizer and checked by encoding the prefix again, and
// the guard's branches checked against plain contexts fed the same tokens.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "engine_util.h"
#include "phase_guard.h"
#include "selftest_probes.h"

using namespace phasekv;
using namespace phasekv::test;

namespace {

PhaseProfile profile(std::vector<double> acc, std::vector<int32_t> weak, uint32_t strongest) {
  PhaseProfile p;
  p.period = uint32_t(acc.size());
  p.accuracy = std::move(acc);
  p.weak = std::move(weak);
  p.strongest = strongest;
  return p;
}

}  // namespace

TEST_CASE("phase guard: the shift that makes every residue's better branch strongest, derived by hand") {
  // P = 4, A = [1.0, 0.0, 0.5, 0.9]. Worst over r of max(A_r, A_r+g):
  //   g = 1: max(1,0)=1, max(0,.5)=.5, max(.5,.9)=.9, max(.9,1)=1 -> .5
  //   g = 2: max(1,.5)=1, max(0,.9)=.9, max(.5,1)=1, max(.9,0)=.9 -> .9
  //   g = 3: max(1,.9)=1, max(0,1)=1, max(.5,0)=.5, max(.9,.5)=.9 -> .5
  CHECK(guard_shift(profile({1.0, 0.0, 0.5, 0.9}, {1}, 0)) == 2);
  CHECK(guard_shift(profile({1.0, 0.0, 0.5, 0.9}, {}, 0)) == 0);         // nothing weak: no guard
  CHECK(guard_shift(profile({0.5, 0.5, 0.5, 0.5}, {0}, 0)) == 1);        // ties: the smallest shift
  CHECK(guard_shift(profile({0.9, 0.9, 0.9, 0.9, 0.9, 0.0, 0.9, 0.9}, {5}, 0)) == 1);
  CHECK(check_phase_profile(profile({1.0, 0.0}, {2}, 0)).code() == StatusCode::kInvalidArgument);
  CHECK(check_phase_profile(profile({1.0, NAN}, {1}, 0)).code() == StatusCode::kInvalidArgument);
  CHECK(check_phase_profile(profile({1.0}, {}, 0)).code() == StatusCode::kInvalidArgument);  // period 1
  CHECK(check_phase_profile(profile({1.0, 0.2}, {1}, 2)).code() == StatusCode::kInvalidArgument);

  // Top log-probability: logits [0, ln 3] are probabilities [1/4, 3/4].
  const float l[2] = {0.0f, float(std::log(3.0))};
  int32_t arg = -1;
  CHECK(top_logprob(l, 2, &arg) == doctest::Approx(std::log(0.75)).epsilon(1e-7));
  CHECK(arg == 1);
}

TEST_CASE("phase guard: templates ending in text, a special token and whitespace align onto every residue") {
  const Model* m = tiny_vocab_model();  // SmolLM2's tokenizer
  if (!m) {
    MESSAGE("skipped: no tiny_qwen3_vocab.gguf (needs the SmolLM2 GGUF configured)");
    return;
  }
  const Tokenizer& tok = m->tokenizer();
  const uint32_t P = 8;
  const std::vector<std::string> templates = {
      "Read the notes and answer.\nNotes:{{content}}\nAnswer:",                            // text before the slot
      "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>{{content}}<|im_end|>",   // a special token
      "<|im_start|>user\nNotes: {{content}}<|im_end|>\n<|im_start|>assistant\n",          // whitespace
  };
  int moved = 0;
  for (const std::string& t : templates) {
    ProbeTemplate before;
    REQUIRE(parse_template(tok, t, &before).ok());
    for (uint32_t target = 0; target < P; ++target) {
      std::vector<double> acc(P, 0.5);
      acc[target] = 0.9;
      acc[(target + 3) % P] = 0.0;
      TemplateAlignment a;
      REQUIRE(align_template(tok, t, profile(acc, {int32_t((target + 3) % P)}, target), &a).ok());
      CHECK(a.t0 == before.prefix.size());
      CHECK(a.changed == (a.t0 % P != target));
      CHECK(a.aligned_t0 % P == target);
      // Independently of parse_template: encode the aligned text up to the slot again.
      const size_t slot = a.text.find(kContentSlot);
      REQUIRE(slot != std::string::npos);
      CHECK(a.text.substr(slot + std::string(kContentSlot).size()) == t.substr(t.find(kContentSlot) + 11));
      std::vector<int32_t> ids;
      if (tok.add_bos() && tok.bos() >= 0) ids.push_back(tok.bos());
      REQUIRE(tok.encode(a.text.substr(0, slot), true, &ids).ok());
      CHECK(ids.size() == a.aligned_t0);
      CHECK(std::equal(before.prefix.begin(), before.prefix.end(), ids.begin()));  // the template's own tokens kept
      moved += a.changed;
    }
  }
  CHECK(moved == 3 * (P - 1));
  // Nothing weak: the template is returned as it is.
  TemplateAlignment same;
  REQUIRE(align_template(tok, templates[0], profile(std::vector<double>(P, 0.7), {}, 3), &same).ok());
  CHECK_FALSE(same.changed);
  CHECK(same.text == templates[0]);
}

TEST_CASE("phase guard: branches equal plain contexts fed the same tokens, and the more confident one is chosen") {
  // The guard's bookkeeping, not a trained model's answers: 3 random layers with SmolLM2's
  // tokenizer (the template's specials and the pad token are SmolLM2's).
  const Model* m = tiny_vocab_model();
  if (!m) {
    MESSAGE("skipped: no tiny_qwen3_vocab.gguf (needs the SmolLM2 GGUF configured)");
    return;
  }
  const Tokenizer& tok = m->tokenizer();
  const std::string tpl = "<|im_start|>user\nNotes:\n{{content}}<|im_end|>\n<|im_start|>assistant\n";
  ProbeTemplate t;
  REQUIRE(parse_template(tok, tpl, &t).ok());
  std::vector<int32_t> content;
  REQUIRE(tok.encode(" The code is 4417. The colour is green. What is the code?", false, &content).ok());
  const PhaseProfile prof = profile({0.8, 0.9, 0.7, 0.8, 0.6, 0.0, 0.7, 0.8}, {5}, 1);
  const uint32_t g = guard_shift(prof);
  REQUIRE(g > 0);
  const int32_t pad = neutral_pad_token(tok);
  REQUIRE(pad >= 0);
  const int vocab = int(m->config().vocab_size);

  ContextParams cp;
  cp.n_ctx = 160;
  cp.n_threads = 1;
  cp.kernels = "reference";
  // Reference branches: plain contexts, A = prefix + content + suffix, B = prefix + g pads + content + suffix.
  std::vector<int32_t> ids_a = t.prefix, ids_b = t.prefix;
  ids_b.insert(ids_b.end(), g, pad);
  for (std::vector<int32_t>* v : {&ids_a, &ids_b}) {
    v->insert(v->end(), content.begin(), content.end());
    v->insert(v->end(), t.suffix.begin(), t.suffix.end());
  }
  std::unique_ptr<Context> ra, rb;
  REQUIRE(Context::create(*m, cp, &ra).ok());
  REQUIRE(Context::create(*m, cp, &rb).ok());
  REQUIRE(ra->prefill(ids_a.data(), ids_a.size()).ok());
  REQUIRE(rb->prefill(ids_b.data(), ids_b.size()).ok());

  SUBCASE("always guarded: each step's logits are the more confident branch's, bit for bit") {
    PhaseGuardParams gp;
    gp.threshold = 2.0;
    std::unique_ptr<PhaseGuard> guard;
    REQUIRE(PhaseGuard::create(*m, cp, tpl, prof, gp, &guard).ok());
    REQUIRE(guard->start(content.data(), content.size()).ok());
    CHECK(guard->stats().guarded);
    CHECK(guard->stats().prefill_b == int64_t(g + content.size() + t.suffix.size()));
    int from_b = 0;
    for (int step = 0; step < 12; ++step) {
      const double la = top_logprob(ra->logits(), vocab), lb = top_logprob(rb->logits(), vocab);
      const float* want = lb > la ? rb->logits() : ra->logits();
      CHECK(guard->branch() == (lb > la ? 1 : 0));
      CHECK(std::equal(want, want + vocab, guard->logits()));
      from_b += lb > la;
      int32_t next = 0;
      top_logprob(guard->logits(), vocab, &next);
      REQUIRE(guard->accept(next).ok());
      REQUIRE(ra->decode(next).ok());
      REQUIRE(rb->decode(next).ok());
    }
    CHECK(guard->stats().steps == 12);
    CHECK(guard->stats().steps_b == from_b);
    MESSAGE("branch B chosen at " << from_b << " of 12 steps");
  }
  SUBCASE("never guarded (threshold 0): branch A alone, the plain context's logits") {
    PhaseGuardParams gp;
    gp.threshold = 0.0;
    std::unique_ptr<PhaseGuard> guard;
    REQUIRE(PhaseGuard::create(*m, cp, tpl, prof, gp, &guard).ok());
    REQUIRE(guard->start(content.data(), content.size()).ok());
    CHECK_FALSE(guard->stats().guarded);
    CHECK(guard->stats().prefill_b == 0);
    for (int step = 0; step < 6; ++step) {
      CHECK(std::equal(ra->logits(), ra->logits() + vocab, guard->logits()));
      int32_t next = 0;
      top_logprob(guard->logits(), vocab, &next);
      REQUIRE(guard->accept(next).ok());
      REQUIRE(ra->decode(next).ok());
    }
  }
  SUBCASE("a request that does not fit is refused and the guard stays usable") {
    std::unique_ptr<PhaseGuard> guard;
    REQUIRE(PhaseGuard::create(*m, cp, tpl, prof, PhaseGuardParams(), &guard).ok());
    std::vector<int32_t> lots(200, content[0]);
    const Status s = guard->start(lots.data(), lots.size());
    CHECK(s.code() == StatusCode::kInvalidArgument);
    CHECK(s.message().find("the context holds 160") != std::string::npos);
    REQUIRE(guard->start(content.data(), content.size()).ok());
    CHECK(std::equal(ra->logits(), ra->logits() + vocab, guard->branch() == 0 ? guard->logits() : ra->logits()));
  }
}
