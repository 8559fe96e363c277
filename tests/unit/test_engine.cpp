// The CPU engine end to end on SmolLM2-135M-Instruct Q4_1: against an independent numpy
// implementation (tests/reference/llama_ref.py), and the invariants the design promises.
#include <doctest/doctest.h>

#include <cstring>
#include <set>
#include <thread>

#include "cpu_kernels.h"
#include "engine_util.h"

using namespace phasekv;
using namespace phasekv::test;

#define REQUIRE_MODEL(m)                                                              \
  const Model* m = smollm2();                                                         \
  if (!m) {                                                                           \
    MESSAGE("skipped: no SmolLM2 GGUF (configure with -DPHASEKV_TEST_MODEL=PATH)");   \
    return;                                                                           \
  }

namespace {

std::vector<int32_t> prompt_ids(const std::string& name) {
  const nlohmann::json j = load_json_file(data_dir() + "/engine/prompts.json");
  for (const auto& p : j["prompts"])
    if (p["name"] == name) return p["ids"].get<std::vector<int32_t>>();
  PKV_ASSERT(!"no such prompt");
  return {};
}

std::vector<int32_t> greedy(Context& c, int n) {
  std::vector<int32_t> out;
  const int vocab = int(c.model().config().vocab_size);
  for (int i = 0; i < n; ++i) {
    const int32_t t = argmax(c.logits(), vocab);
    out.push_back(t);
    if (i + 1 < n) REQUIRE(c.decode(t).ok());
  }
  return out;
}

}  // namespace

TEST_CASE("engine = numpy reference: tokens, final logits (rel L2 < 1e-3), 32 greedy tokens") {
  REQUIRE_MODEL(m);
  const nlohmann::json j = load_json_file(data_dir() + "/engine/prompts.json");
  REQUIRE(j["prompts"].size() == 5);
  const int vocab = int(m->config().vocab_size);
#if defined(PHASEKV_TEST_SANITIZED)
  // Sanitized builds (10-50x slower) check the default kernels on two prompts; the full
  // matrix runs in the optimised build.
  const char* isas[] = {cpu::kernels().name};
  const std::set<std::string> only = {"plain", "code"};
#else
  const char* isas[] = {"avx2", "neon", "portable"};
  const std::set<std::string> only;
#endif
  for (const char* isa : isas) {
    if (!cpu::kernels_by_name(isa)) continue;
    for (const auto& p : j["prompts"]) {
      const std::string name = p["name"];
      if (!only.empty() && !only.count(name)) continue;
      INFO("prompt " << name << ", kernels " << std::string(isa));
      const std::vector<int32_t> ref_ids = p["ids"].get<std::vector<int32_t>>();
      std::vector<int32_t> ids;
      REQUIRE(m->tokenizer().encode(p["text"].get<std::string>(), p["parse_special"].get<bool>(), &ids).ok());
      CHECK(ids == ref_ids);  // our tokenizer agrees with HF tokenizers on the prompt

      auto c = make_context(*m, 256, 64, 1, isa);
      REQUIRE(c->prefill(ref_ids.data(), ref_ids.size()).ok());
      const std::vector<float> ref = load_f32(data_dir() + "/engine/ref_" + name + ".f32");
      REQUIRE(ref.size() == size_t(vocab));
      const double err = rel_l2(c->logits(), ref.data(), ref.size());
      MESSAGE("prompt " << name << " (" << std::string(isa) << "): relative L2 error of the logits = " << err);
      CHECK(err < 1e-3);
      const nlohmann::json r = load_json_file(data_dir() + "/engine/ref_" + name + ".json");
      CHECK(greedy(*c, 32) == r["greedy"].get<std::vector<int32_t>>());
    }
  }
}

TEST_CASE("one chunk, several chunks and token by token give bit-identical logits") {
  REQUIRE_MODEL(m);
  const std::vector<int32_t> ids = prompt_ids("digits");  // 58 tokens
  const size_t vocab = m->config().vocab_size;
  auto one = make_context(*m, 128, 64, 1);
  REQUIRE(one->prefill(ids.data(), ids.size()).ok());
  for (uint32_t batch : {7u, 1u, 29u}) {
    INFO("n_batch " << batch);
    auto c = make_context(*m, 128, batch, 1);
    REQUIRE(c->prefill(ids.data(), ids.size()).ok());
    CHECK(std::memcmp(c->logits(), one->logits(), vocab * 4) == 0);
  }
  auto steps = make_context(*m, 128, 64, 1);
  for (int32_t t : ids) REQUIRE(steps->decode(t).ok());
  CHECK(std::memcmp(steps->logits(), one->logits(), vocab * 4) == 0);
  // And the continuations stay identical.
  CHECK(greedy(*steps, 8) == greedy(*one, 8));
}

TEST_CASE("1, 2 and 3 threads give bit-identical logits") {
  REQUIRE_MODEL(m);
  const std::vector<int32_t> ids = prompt_ids("code");
  const size_t vocab = m->config().vocab_size;
  auto t1 = make_context(*m, 128, 16, 1);
  REQUIRE(t1->prefill(ids.data(), ids.size()).ok());
  for (int threads : {2, 3}) {
    auto c = make_context(*m, 128, 16, threads);
    REQUIRE(c->prefill(ids.data(), ids.size()).ok());
    CHECK(std::memcmp(c->logits(), t1->logits(), vocab * 4) == 0);
    REQUIRE(c->decode(42).ok());
    REQUIRE(t1->decode(42).ok());
    CHECK(std::memcmp(c->logits(), t1->logits(), vocab * 4) == 0);
    t1->reset();
    REQUIRE(t1->prefill(ids.data(), ids.size()).ok());
  }
}

TEST_CASE("two contexts interleaved produce the same tokens as each run alone") {
  REQUIRE_MODEL(m);
  const std::vector<int32_t> a = prompt_ids("plain"), b = prompt_ids("nonenglish");
  auto solo_a = make_context(*m, 128, 32, 1);
  auto solo_b = make_context(*m, 128, 32, 1);
  REQUIRE(solo_a->prefill(a.data(), a.size()).ok());
  const std::vector<int32_t> ga = greedy(*solo_a, 12);
  REQUIRE(solo_b->prefill(b.data(), b.size()).ok());
  const std::vector<int32_t> gb = greedy(*solo_b, 12);

  auto ca = make_context(*m, 128, 32, 1);
  auto cb = make_context(*m, 128, 32, 1);
  REQUIRE(ca->prefill(a.data(), a.size()).ok());
  REQUIRE(cb->prefill(b.data(), b.size()).ok());
  std::vector<int32_t> ia, ib;
  const int vocab = int(m->config().vocab_size);
  for (int i = 0; i < 12; ++i) {
    ia.push_back(argmax(ca->logits(), vocab));
    ib.push_back(argmax(cb->logits(), vocab));
    REQUIRE(ca->decode(ia.back()).ok());
    REQUIRE(cb->decode(ib.back()).ok());
  }
  CHECK(ia == ga);
  CHECK(ib == gb);

  // And concurrently, from two application threads sharing the model (tokenizer included).
  std::vector<int32_t> ta, tb;
  auto work = [&](const std::string& text, std::vector<int32_t>* out) {
    std::vector<int32_t> ids;
    if (!m->tokenizer().encode(text, false, &ids).ok()) return;
    auto c = make_context(*m, 128, 32, 1);
    if (!c->prefill(ids.data(), ids.size()).ok()) return;
    for (int i = 0; i < 12; ++i) {
      out->push_back(argmax(c->logits(), vocab));
      if (!c->decode(out->back()).ok()) return;
    }
  };
  const nlohmann::json j = load_json_file(data_dir() + "/engine/prompts.json");
  std::string text_a, text_b;
  for (const auto& p : j["prompts"]) {
    if (p["name"] == "plain") text_a = p["text"];
    if (p["name"] == "nonenglish") text_b = p["text"];
  }
  std::thread th_a(work, text_a, &ta), th_b(work, text_b, &tb);
  th_a.join();
  th_b.join();
  CHECK(ta == ga);
  CHECK(tb == gb);
}

TEST_CASE("bad input: clear errors, and the context stays usable") {
  REQUIRE_MODEL(m);
  const std::vector<int32_t> ids = prompt_ids("chat");  // 39 tokens
  const size_t vocab = m->config().vocab_size;
  auto c = make_context(*m, 48, 16, 1);
  REQUIRE(c->prefill(ids.data(), 30).ok());
  const std::vector<float> before(c->logits(), c->logits() + vocab);

  Status s = c->prefill(ids.data(), 20);  // 30 + 20 > 48
  CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK(s.message().find("do not fit") != std::string::npos);
  s = c->prefill(ids.data(), 0);
  CHECK(s.message().find("empty") != std::string::npos);
  const int32_t bad[2] = {5, int32_t(vocab)};
  s = c->prefill(bad, 2);
  CHECK(s.message().find("tokens[1] = 49152") != std::string::npos);
  CHECK(c->n_past() == 30);
  CHECK(std::memcmp(c->logits(), before.data(), vocab * 4) == 0);
  // Still usable: continuing gives what an undisturbed context gives.
  REQUIRE(c->prefill(ids.data() + 30, 9).ok());
  auto fresh = make_context(*m, 48, 16, 1);
  REQUIRE(fresh->prefill(ids.data(), 39).ok());
  CHECK(std::memcmp(c->logits(), fresh->logits(), vocab * 4) == 0);

  std::vector<int32_t> out;
  s = m->tokenizer().encode(std::string("ok \xC3\x28 bad", 8), false, &out);
  CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK(s.message().find("offset 3") != std::string::npos);
  CHECK(out.empty());

  ContextParams p;
  p.n_batch = 16;
  p.n_threads = 2;
  std::unique_ptr<Context> none;
  p.n_ctx = 0;
  CHECK(Context::create(*m, p, &none).message().find("n_ctx = 0") != std::string::npos);
  p.n_ctx = 9000;
  CHECK(Context::create(*m, p, &none).message().find("max_positions = 8192") != std::string::npos);
  p.n_ctx = 64;
  p.n_threads = 0;
  CHECK(Context::create(*m, p, &none).message().find("n_threads = 0") != std::string::npos);
  p.n_threads = 1;
  p.n_batch = 0;
  CHECK(Context::create(*m, p, &none).message().find("n_batch = 0") != std::string::npos);
  p.n_batch = 8;
  p.kernels = "sse9";
  CHECK(Context::create(*m, p, &none).message().find("'sse9'") != std::string::npos);
  CHECK(none == nullptr);
}

TEST_CASE("a model file of an unsupported architecture is refused at load") {
  TinyModel t = make_tiny_model(5);
  t.spec.config.architecture = "mamba";
  const std::string p = tmp_path("mamba.pkv");
  WriteOptions o;
  o.validate = false;
  REQUIRE(write_model_file(p, t.spec, t.data(), o).ok());
  std::unique_ptr<Model> m;
  Status s = Model::load(p, &m);
  CHECK(s.code() == StatusCode::kUnsupported);
  CHECK(s.message().find("'mamba'") != std::string::npos);
  std::remove(p.c_str());
}
