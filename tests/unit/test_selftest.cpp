// The phase self-test's template parsing, probe construction and run-level errors (the
// statistics have their own tests in test_selftest_stats.cpp; the planted-weakness runs are
// CLI tests on SmolLM2).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>

#include "engine_util.h"
#include "gguf_import.h"
#include "phasekv.h"
#include "selftest.h"
#include "selftest_report.h"

using namespace phasekv;
using namespace phasekv::test;

namespace {
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kInstrumented = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kInstrumented = true;
#else
constexpr bool kInstrumented = false;
#endif
#else
constexpr bool kInstrumented = false;
#endif
}  // namespace

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
    for (uint32_t P : {4u, 8u})
    for (uint32_t K : {1u, 8u}) {
      CAPTURE(P);
      CAPTURE(K);
      ProbeLayout L;
      L.period = P;
      L.length = 200;
      L.min_distance = 40;
      L.protocol = pr;
      L.targets = K;
      for (int32_t c = 0; c < int32_t(P); ++c) {
        std::vector<Probe> probes;
        REQUIRE(make_cluster(t, v, L, 7, c, &probes).ok());
        REQUIRE(probes.size() == P);
        std::set<int32_t> residues;
        std::vector<std::set<int32_t>> target_residues(K);
        for (const Probe& p : probes) {
          CHECK(p.ids.size() == 200);
          CHECK(p.ids[p.value_pos] == p.gold);
          CHECK(p.ids[p.value_pos - 1] == v.sep);
          CHECK(int32_t(p.value_pos % P) == p.residue);
          // The query ends with the last looked-up target's key and the separator.
          CHECK(p.ids[199] == v.sep);
          REQUIRE(p.golds.size() == K);
          REQUIRE(p.score_end.size() == K);
          CHECK(p.score_end.back() == 200);
          CHECK(p.ids[198] == p.ids[p.value_positions.back() - 2]);
          std::set<uint32_t> slots;
          for (uint32_t i = 0; i < K; ++i) {
            // Target i's record "key = value": its lookup ends with the same key and "=", the
            // gold is its value, and (all but the last) the answer follows, teacher-forced.
            const uint32_t vp = p.value_positions[i], e = p.score_end[i];
            CHECK(p.ids[vp] == p.golds[i]);
            CHECK(p.ids[vp - 1] == v.sep);
            CHECK(p.ids[e - 1] == v.sep);
            CHECK(p.ids[e - 2] == p.ids[vp - 2]);
            if (i + 1 < K) {
              CHECK(p.score_end[i + 1] == e + 4);
              CHECK(p.ids[e] == p.golds[i]);
            }
            CHECK(p.residues[i] == int32_t(vp % P));
            // Targets stand on consecutive lines starting at the first target's.
            CHECK((vp - p.value_pos) % 4 == 0);
            slots.insert((vp - p.value_pos) / 4);
            // Every target keeps the distance to the first lookup's "=".
            CHECK(p.score_end[0] - 1 - vp >= 40);
            target_residues[i].insert(p.residues[i]);
          }
          CHECK(slots.size() == K);
          CHECK(*slots.rbegin() == K - 1);
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
        for (const auto& tr : target_residues) CHECK(tr.size() == P);  // and so for each target
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

TEST_CASE("selftest: a long probe holds a fixed number of records among varied filler sentences") {
  const Model* m = smollm2();
  if (!m) {
    MESSAGE("skipped: no SmolLM2 GGUF");
    return;
  }
  const Tokenizer& tok = m->tokenizer();
  ProbeTemplate t;
  REQUIRE(parse_template(tok, "{{content}}", &t).ok());
  ProbeVocab v;
  REQUIRE(build_probe_vocab(tok, 64, &v).ok());
  REQUIRE(v.sentences.size() >= 8);
  for (Protocol pr : {Protocol::Outer, Protocol::InSequence}) {
    CAPTURE(protocol_name(pr));
    ProbeLayout L;
    L.period = 8;
    L.length = 1024;
    L.min_distance = 300;  // a long local window: the target sits in the first 2/3
    L.records = 16;
    L.protocol = pr;
    uint32_t n = 0;
    REQUIRE(probe_records(t, L, &n).ok());
    CHECK(n == 16);
    double target_sum = 0;
    for (int32_t c = 0; c < 16; ++c) {
      std::vector<Probe> probes;
      REQUIRE(make_cluster(t, v, L, 3, c, &probes).ok());
      const Probe& p = probes[0];
      CHECK(1023 - p.value_pos >= 300);
      target_sum += p.value_pos;
      // Split the text into lines and classify them independently of the builder: a record
      // is "<key> = <value>", everything else with letters is a filler sentence.
      std::string text;
      REQUIRE(tok.decode(p.ids, &text).ok());
      std::map<std::string, int> sentences;
      std::set<std::string> record_keys;
      int records = 0;
      size_t at = 0;
      while (at < text.size()) {
        size_t nl = text.find('\n', at);
        if (nl == std::string::npos) nl = text.size();
        std::string line = text.substr(at, nl - at);
        at = nl + 1;
        while (!line.empty() && (line[0] == ' ' || line[0] == '-')) line.erase(0, 1);
        while (!line.empty() && (line.back() == ' ' || line.back() == '-')) line.pop_back();
        if (line.empty()) continue;
        const size_t eq = line.find(" = ");
        if (eq != std::string::npos && line.find(' ') == eq && eq + 3 < line.size() &&
            line.find(' ', eq + 3) == std::string::npos) {
          ++records;
          record_keys.insert(line.substr(0, eq));
        } else if (line.back() == '.') {
          ++sentences[line];
        }
      }
      // 16 records in the haystack plus 4 demonstrations, the query line ends in "=".
      CHECK(records == 16 + 4);
      CHECK(record_keys.size() == 16);
      // Filler: many different sentences, none making up most of it.
      int total = 0, most = 0;
      for (const auto& kv : sentences) {
        total += kv.second;
        most = std::max(most, kv.second);
      }
      CHECK(sentences.size() >= 20);
      CHECK(most * 5 < total);
      // The haystack's pads are only the shift and what no sentence could fill.
      int pads = 0;
      for (int32_t id : p.ids) pads += id == v.pad ? 1 : 0;
      CHECK(pads <= int(2 * L.period - 2) + 2 * 3);
    }
    // Targets spread over the room they have (not always at one end).
    const double mean = target_sum / 16;
    CHECK(mean > 150);
    CHECK(mean < 1023 - 300 - 100);
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

TEST_CASE("selftest: the C API entry point runs the same self-test as the C++ one") {
  if (!have_smollm2()) {
    MESSAGE("skipped: no SmolLM2 GGUF");
    return;
  }
  // Under AddressSanitizer the run is on tiny_qwen3_vocab.gguf (3 random layers with SmolLM2's
  // vocabulary): SmolLM2's instrumented matmul tiles ran ~40x slower, 450 s of CI for the C API
  // run alone. The wrapper's memory use, which the sanitizer is there to check, is the same.
  const std::string gguf = kInstrumented ? tiny_vocab_gguf() : std::string(PHASEKV_TEST_MODEL_PATH);
  if (kInstrumented && !std::ifstream(gguf).good()) {
    MESSAGE("skipped: no tiny_qwen3_vocab.gguf");
    return;
  }
  const std::string path = tmp_path("selftest_capi.pkv");
  REQUIRE(convert_gguf_to_pkv(gguf, path, ImportOptions{}).ok());
  pkv_model* cm = nullptr;
  REQUIRE(pkv_model_load(path.c_str(), &cm) == PKV_OK);
  pkv_selftest_params p = pkv_selftest_default_params();
  CHECK(p.records == 16);
  CHECK(p.probe_tokens == 512);
  p.probe_tokens = 72;  // small: P = 2, 4 samples per stage
  p.period = 2;
  p.samples = 4;
  p.n_threads = 2;
  p.seed = 5;
  pkv_selftest_result r;
  REQUIRE_MESSAGE(pkv_selftest_run(cm, &p, &r) == PKV_OK, pkv_last_error());
  CHECK(r.period == 2);
  CHECK(r.probes == 2 * 2 * 4 * 2);  // protocols x stages x samples x residues
  CHECK(r.naive_prefill_tokens == 72 * r.probes);
  CHECK(r.prefill_tokens > 0);
  CHECK(r.prefill_tokens <= r.naive_prefill_tokens);
  for (int i = 0; i < 2; ++i)
    for (int res = 0; res < 2; ++res) {
      CHECK(r.ci_lo[i][res] <= r.accuracy[i][res]);
      CHECK(r.accuracy[i][res] <= r.ci_hi[i][res]);
      CHECK(r.ci_lo[i][res] >= 0.0);
      CHECK(r.ci_hi[i][res] <= 1.0);
    }

  // The C++ twin with the same options must give the same run.
  {
    SelftestOptions o;
    o.probe_tokens = 72;
    o.period = 2;
    o.samples = 4;
    o.n_threads = 2;
    o.seed = 5;
    std::unique_ptr<Model> tiny;
    const Model* m = nullptr;
    if (kInstrumented) {
      REQUIRE(Model::load(path, &tiny).ok());
      m = tiny.get();
    } else {
      m = smollm2();
    }
    REQUIRE(m);
    SelftestResult want;
    REQUIRE(run_selftest(*m, o, &want).ok());
    CHECK(r.probes == want.probes);
    CHECK(r.prefill_tokens == want.prefill_tokens);
    for (const ProtocolResult& pr : want.protocols) {
      const int i = pr.protocol == Protocol::Outer ? 0 : 1;
      for (int32_t res = 0; res < 2; ++res) CHECK(r.accuracy[i][res] == pr.summary.residues[size_t(res)].accuracy);
    }
  }
  // A bad parameter is refused with its value named; the model stays usable.
  p.records = 7;
  CHECK(pkv_selftest_run(cm, &p, &r) == PKV_ERR_INVALID_ARGUMENT);
  CHECK_MESSAGE(std::string(pkv_last_error()).find("7 records per probe") != std::string::npos, pkv_last_error());
  pkv_model_free(cm);
  std::remove(path.c_str());
}

TEST_CASE("selftest: the --control twin is given exactly the compressed run's probes") {
  if (!have_smollm2()) {
    MESSAGE("skipped: no SmolLM2 GGUF");
    return;
  }
  // A retrofit whose compressed layers have a local window (L = 16): targets must stay
  // L + P + 4 = 28 tokens from the query. The twin has no window of its own.
  const std::string path = tmp_path("selftest_control.pkv");
  ImportOptions io;
  io.kv_specs = {"20-29:compressed:W=8,S=8,L=16,gate=uniform"};
  REQUIRE(convert_gguf_to_pkv(PHASEKV_TEST_MODEL_PATH, path, io).ok());
  std::unique_ptr<Model> comp, twin;
  REQUIRE(Model::load(path, &comp).ok());
  Model::LoadOptions lo;
  lo.full_attention = true;
  REQUIRE(Model::load(path, lo, &twin).ok());
  std::remove(path.c_str());

  SelftestOptions o;
  o.probe_tokens = 256;
  o.samples = 4;
  o.seed = 3;
  o.plan_only = true;
  SelftestResult rc;
  REQUIRE(run_selftest(*comp, o, &rc).ok());
  CHECK(rc.period == 8);
  CHECK(rc.max_local == 16);
  CHECK(rc.min_distance == 16 + 8 + 4);
  CHECK(rc.probes == 2 * 2 * 4 * 8);
  CHECK(rc.naive_prefill_tokens == 256 * rc.probes);
  CHECK(rc.prefill_tokens == 0);  // nothing evaluated

  // What --control passes: the same period, samples and distance -> the same probes.
  SelftestOptions oc = o;
  oc.period = 8;
  oc.min_distance = rc.min_distance;
  SelftestResult same;
  REQUIRE(run_selftest(*twin, oc, &same).ok());
  CHECK(same.max_local == 0);
  CHECK(same.probes == rc.probes);
  CHECK(same.probe_digest == rc.probe_digest);
  // Left to itself the twin would keep targets only P + 4 from the query: other probes.
  oc.min_distance = 0;
  SelftestResult own;
  REQUIRE(run_selftest(*twin, oc, &own).ok());
  CHECK(own.min_distance == 8 + 4);
  CHECK(own.probe_digest != rc.probe_digest);
  // The digest follows the content: another seed, other probes.
  o.seed = 4;
  SelftestResult other;
  REQUIRE(run_selftest(*comp, o, &other).ok());
  CHECK(other.probe_digest != rc.probe_digest);
  // plan_only evaluates nothing, so it cannot time a budget.
  o.samples = 0;
  o.budget_s = 60;
  CHECK(run_selftest(*comp, o, &other).code() == StatusCode::kInvalidArgument);
}

TEST_CASE("selftest: a qwen3 model with a compressed retrofit (real vocabulary): probes, prefix sharing, threads") {
  // tiny_qwen3_vocab.gguf: 3 random qwen3 layers (per-head q/k norms, NeoX RoPE) carrying
  // SmolLM2's vocabulary, written by make_gguf_fixtures.py when SmolLM2 is configured. A random
  // model retrieves nothing, so this checks the machinery on the architecture, not accuracy.
  const std::string gguf = tiny_vocab_gguf();
  if (!std::ifstream(gguf).good()) {
    MESSAGE("skipped: no tiny_qwen3_vocab.gguf (needs the SmolLM2 GGUF configured)");
    return;
  }
  ImportOptions io;
  io.kv_specs = {"all:compressed:W=8,S=4,L=16,gate=planted:K=2,V=5"};
  const std::string pkv = tmp_path("selftest_qwen3.pkv");
  REQUIRE(convert_gguf_to_pkv(gguf, pkv, io).ok());
  std::unique_ptr<Model> m;
  REQUIRE(Model::load(pkv, &m).ok());
  std::remove(pkv.c_str());
  CHECK(m->config().architecture == "qwen3");
  SelftestOptions o;
  o.probe_tokens = 72;
  o.samples = 4;
  o.seed = 9;
  SelftestResult one, three, plan;
  o.n_threads = 1;
  REQUIRE(run_selftest(*m, o, &one).ok());
  o.n_threads = 3;
  REQUIRE(run_selftest(*m, o, &three).ok());
  o.plan_only = true;
  REQUIRE(run_selftest(*m, o, &plan).ok());
  CHECK(one.period == 4);  // the compressed stride
  CHECK(one.probes == 2 * 2 * 4 * 4);  // protocols x stages x samples x residues
  CHECK(one.naive_prefill_tokens == 72 * one.probes);
  CHECK(one.prefill_tokens < one.naive_prefill_tokens);  // shared prefixes restored from snapshots
  CHECK(one.probe_digest == plan.probe_digest);
  CHECK(three.probe_digest == one.probe_digest);
  REQUIRE(one.protocols.size() == 2);
  REQUIRE(three.protocols.size() == 2);
  for (size_t p = 0; p < 2; ++p)
    for (size_t r = 0; r < 4; ++r) {
      const selftest::ResidueRow& a = one.protocols[p].summary.residues[r];
      const selftest::ResidueRow& b = three.protocols[p].summary.residues[r];
      CHECK(std::isfinite(a.nll));
      CHECK(a.nll > 0.0);
      CHECK(a.nll == b.nll);  // bit-identical across thread counts
      CHECK(a.accuracy == b.accuracy);
    }
}

namespace {
// A finished run by hand: P = 8, two protocols with the given per-residue accuracies.
SelftestResult hand_run(uint32_t t0, const std::vector<double>& outer, const std::vector<double>& in_seq,
                        std::vector<int32_t> flagged) {
  SelftestResult r;
  r.period = 8;
  r.period_source = "strides";
  r.t0 = t0;
  r.flagged = flagged;
  for (int k = 0; k < 2; ++k) {
    const std::vector<double>& acc = k == 0 ? outer : in_seq;
    ProtocolResult p;
    p.protocol = k == 0 ? Protocol::Outer : Protocol::InSequence;
    p.clusters = 4;
    p.summary.n_residues = 8;
    p.summary.residues.resize(8);
    double sum = 0, lo = 1, hi = 0;
    for (size_t q = 0; q < 8; ++q) {
      p.summary.residues[q].accuracy = acc[q];
      sum += acc[q];
      lo = std::min(lo, acc[q]);
      hi = std::max(hi, acc[q]);
    }
    p.summary.mean_accuracy = sum / 8;
    p.summary.worst.naive_min = lo;
    p.summary.gap.gap = hi - lo;
    p.flagged = flagged;
    r.protocols.push_back(p);
  }
  r.probes = 128;
  r.prefill_tokens = 1000;
  r.naive_prefill_tokens = 4000;
  r.seconds = 2;
  return r;
}
}  // namespace

TEST_CASE("selftest report: map, advice, control gap and gates derived by hand") {
  const std::string path = tmp_path("selftest_report_tiny.pkv");
  REQUIRE(convert_gguf_to_pkv(data_dir() + "/tiny.gguf", path, ImportOptions{}).ok());
  std::unique_ptr<Model> m;
  REQUIRE(Model::load(path, &m).ok());
  std::remove(path.c_str());

  // Averaged over protocols: 0.90 0.85 0.95 0.70 0.80 0.25 0.25 0.85 -> strongest residue 2.
  const std::vector<double> outer = {0.9, 0.8, 0.95, 0.7, 0.8, 0.2, 0.3, 0.85};
  const std::vector<double> in_seq = {0.9, 0.9, 0.95, 0.7, 0.8, 0.3, 0.2, 0.85};
  const SelftestResult run = hand_run(11, outer, in_seq, {5, 6});  // slot phase 11 mod 8 = 3
  SelftestResult ctl = hand_run(11, std::vector<double>(8, 0.9), std::vector<double>(8, 0.8), {});
  SelftestGates g;
  g.min_acc = 0.25;  // the worst residue is 0.2 in both protocols: fails
  g.max_gap = 0.8;   // the gap is 0.95 - 0.2 = 0.75: passes
  SelftestReport rep;
  REQUIRE(make_selftest_report(*m, run, m.get(), &ctl, "t.txt", g, &rep).ok());
  CHECK(rep.advice.strongest_residue == 2);
  CHECK(rep.advice.change_needed);
  CHECK(rep.advice.pad_tokens_before_slot == 7);  // 3 + 7 = 10 = 2 (mod 8)
  REQUIRE(rep.map.size() == 8);
  for (uint32_t k = 0; k < 8; ++k) {
    CHECK(rep.map[k].offset == k);
    CHECK(rep.map[k].residue == (11 + k) % 8);
    CHECK(rep.map[k].weak == (k == 2 || k == 3));  // residues 5 and 6
  }
  CHECK(rep.map[2].accuracy == doctest::Approx(0.25));
  REQUIRE(rep.advice.complementary.size() == 2);
  CHECK(rep.advice.complementary[0].weak_residue == 5);
  CHECK(rep.advice.complementary[0].copy_offset == 5);  // 5 + 5 = 2 (mod 8)
  CHECK(rep.advice.complementary[1].weak_residue == 6);
  CHECK(rep.advice.complementary[1].copy_offset == 4);
  REQUIRE(rep.advice.text.size() == 5);
  CHECK(rep.advice.text[0].find("offsets = 2 (mod 8) from the slot start land on weak residue 5") != std::string::npos);
  CHECK(rep.advice.text[2].find("Adding 7 neutral tokens before the slot") != std::string::npos);
  CHECK(rep.compression_gap == doctest::Approx(0.85 - (5.5 / 8 + 5.6 / 8) / 2));
  CHECK(rep.min_accuracy == doctest::Approx(0.2));
  CHECK(rep.max_gap == doctest::Approx(0.75));
  REQUIRE(rep.checks.size() == 2);
  CHECK(rep.checks[0].name == "min_acc");
  CHECK_FALSE(rep.checks[0].pass);
  CHECK(rep.checks[1].name == "max_gap");
  CHECK(rep.checks[1].pass);
  CHECK_FALSE(rep.pass);
  CHECK(rep.probes == 256);
  CHECK(rep.prefill_tokens == 2000);
  CHECK(rep.n_layers == m->config().n_layers);
  CHECK(rep.memories == rep.control_memories);

  // The slot already on the strongest residue: nothing to pad, the copies still advised.
  REQUIRE(make_selftest_report(*m, hand_run(10, outer, in_seq, {5, 6}), nullptr, nullptr, "t", SelftestGates{}, &rep).ok());
  CHECK_FALSE(rep.advice.change_needed);
  CHECK(rep.advice.pad_tokens_before_slot == 0);
  CHECK(rep.advice.complementary.size() == 2);
  CHECK(rep.pass);
  CHECK(rep.checks.empty());
  CHECK_FALSE(rep.has_control);
  // Nothing weak and every residue tied: the slot keeps its phase, no change needed.
  const std::vector<double> flat(8, 1.0);
  REQUIRE(make_selftest_report(*m, hand_run(13, flat, flat, {}), nullptr, nullptr, "t", SelftestGates{}, &rep).ok());
  CHECK(rep.advice.strongest_residue == 5);
  CHECK_FALSE(rep.advice.change_needed);
  REQUIRE(rep.advice.text.size() == 1);
  CHECK(rep.advice.text[0].find("No residue is weak") != std::string::npos);
  // Thresholds that are not accuracies are refused, naming the gate.
  SelftestGates bad;
  bad.max_gap = std::nan("");
  Status s = make_selftest_report(*m, run, nullptr, nullptr, "t", bad, &rep);
  CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK(s.message().find("gate max_gap = nan") != std::string::npos);
  bad.max_gap = 1.5;
  CHECK(make_selftest_report(*m, run, nullptr, nullptr, "t", bad, &rep).code() == StatusCode::kInvalidArgument);
}
