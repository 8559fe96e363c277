// The phase self-test's template parsing, probe construction and run-level errors (the
// statistics have their own tests in test_selftest_stats.cpp; the planted-weakness runs are
// CLI tests on SmolLM2).
#include <doctest/doctest.h>

#include <map>
#include <set>

#include "engine_util.h"
#include "selftest.h"

using namespace phasekv;
using namespace phasekv::test;

TEST_CASE("selftest: templates need exactly one slot outside special tokens") {
  const Model* m = smollm2();
  if (!m) {
    MESSAGE("skipped: no SmolLM2 GGUF");
    return;
  }
  const Tokenizer& tok = m->tokenizer();
  ProbeTemplate t;
  Status s = parse_template(tok, "no slot here", &t);
  CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK(s.message().find("has no {{content}} slot") != std::string::npos);
  s = parse_template(tok, "{{content}} and {{content}}", &t);
  CHECK(s.message().find("has 2 {{content}} slots") != std::string::npos);
  s = parse_template(tok, "<|im_st{{content}}art|>user\n", &t);
  CHECK_MESSAGE(s.message().find("inside the special token '<|im_start|>'") != std::string::npos, s.message());
  s = parse_template(tok, "<|im_start|>user\n{{content}}<|im_end|>\n<|im_start|>assistant\n", &t);
  REQUIRE(s.ok());
  // Specials written literally are parsed as specials: <|im_start|> is one token.
  CHECK(t.prefix.size() == 3);
  CHECK(t.prefix[0] == tok.find("<|im_start|>"));
  CHECK(t.suffix.front() == tok.find("<|im_end|>"));
  std::string chat;
  REQUIRE(chat_probe_template(*m, &chat).ok());
  REQUIRE(parse_template(tok, chat, &t).ok());
  CHECK(chat.find("{{content}}") != std::string::npos);
}

TEST_CASE("selftest: probes keep length and query fixed and visit every residue once per sample") {
  const Model* m = smollm2();
  if (!m) {
    MESSAGE("skipped: no SmolLM2 GGUF");
    return;
  }
  const Tokenizer& tok = m->tokenizer();
  ProbeTemplate t;
  REQUIRE(parse_template(tok, "<|im_start|>user\n{{content}}<|im_end|>\n<|im_start|>assistant\n", &t).ok());
  ProbeVocab v;
  REQUIRE(build_probe_vocab(tok, 64, &v).ok());
  CHECK(v.keys.size() >= 64);
  std::set<int32_t> keys(v.keys.begin(), v.keys.end());
  for (int32_t x : v.values) CHECK(keys.count(x) == 0);  // keys and values are disjoint
  for (Protocol pr : {Protocol::Outer, Protocol::InSequence}) {
    CAPTURE(protocol_name(pr));
    for (uint32_t P : {4u, 8u}) {
      ProbeLayout L;
      L.period = P;
      L.length = 200;
      L.min_distance = 40;
      L.protocol = pr;
      for (int32_t c = 0; c < int32_t(P); ++c) {
        std::vector<Probe> probes;
        REQUIRE(make_cluster(t, v, L, 7, c, &probes).ok());
        REQUIRE(probes.size() == P);
        std::set<int32_t> residues;
        for (const Probe& p : probes) {
          CHECK(p.ids.size() == 200);
          CHECK(p.ids[p.value_pos] == p.gold);
          CHECK(p.ids[p.value_pos - 1] == v.sep);
          CHECK(int32_t(p.value_pos % P) == p.residue);
          CHECK(199 - p.value_pos >= 40);
          // The query ends with the target key and the separator.
          CHECK(p.ids[199] == v.sep);
          CHECK(p.ids[198] == p.ids[p.key_pos]);
          // Shared prefix identical across the sample.
          CHECK(std::equal(p.ids.begin(), p.ids.begin() + p.shared, probes[0].ids.begin()));
          // Re-tokenizing the text gives the same ids.
          std::string text;
          std::vector<int32_t> again;
          REQUIRE(tok.decode(p.ids, &text).ok());
          REQUIRE(tok.encode(text, true, &again).ok());
          CHECK(again == p.ids);
          residues.insert(p.residue);
        }
        CHECK(residues.size() == P);  // every residue once
        if (pr == Protocol::Outer) {
          // The whole content moves with the shift: the key moves by exactly s.
          for (const Probe& p : probes) CHECK(p.key_pos - p.shift == probes[0].key_pos - probes[0].shift);
          CHECK(probes[0].shared == t.prefix.size());
        }
      }
      // Over P consecutive samples every residue's mean target position is the same.
      std::map<int32_t, double> pos_sum;
      for (int32_t c = 3; c < 3 + int32_t(P); ++c) {
        std::vector<Probe> probes;
        REQUIRE(make_cluster(t, v, L, 7, c, &probes).ok());
        CHECK(probes[0].residue == c % int32_t(P));  // the first shift starts at residue c mod P
        for (const Probe& p : probes) {
          CHECK(p.shift >= 0);
          CHECK(p.shift <= int32_t(2 * P - 2));
          pos_sum[p.residue] += p.value_pos;
        }
      }
      REQUIRE(pos_sum.size() == P);
      for (const auto& kv : pos_sum) CHECK(kv.second == pos_sum.begin()->second);
    }
  }
}

TEST_CASE("selftest: bad designs are refused with the reason") {
  const Model* m = smollm2();
  if (!m) {
    MESSAGE("skipped: no SmolLM2 GGUF");
    return;
  }
  SelftestOptions o;
  o.n_threads = 2;
  o.samples = 4;
  o.probe_tokens = 40;
  SelftestResult r;
  Status s = run_selftest(*m, o, &r);  // full attention: a 16-shift scan sweep needs room
  CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK_MESSAGE(s.message().find("a probe of 40 tokens is too small") != std::string::npos, s.message());
  o.probe_tokens = 256;
  o.period = 1;
  s = run_selftest(*m, o, &r);
  CHECK(s.message().find("period 1") != std::string::npos);
  o.period = 8;
  o.template_text = "{{content}}{{content}}";
  s = run_selftest(*m, o, &r);
  CHECK(s.message().find("2 {{content}} slots") != std::string::npos);
  o.template_text = "{{content}}";
  o.samples = 2;
  s = run_selftest(*m, o, &r);
  CHECK(s.message().find("at least 4 are needed") != std::string::npos);
}
