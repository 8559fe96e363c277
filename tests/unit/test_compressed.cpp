// Compressed, sliding and full attention memories on the CPU engine (DESIGN.md section 3):
// logits against the independent numpy reference (tests/reference/compressed_ref.py, cases
// from compressed_fixtures.py), the section-3 invariants, snapshots, memory plans and budgets,
// and the rejection of bad descriptors and gate files.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>

#include "engine_util.h"
#include "kv_spec.h"
#include "safetensors.h"

using namespace phasekv;
using namespace phasekv::test;

namespace {

std::string cmp_dir() { return data_dir() + "/compressed"; }

struct LoadedCase {
  std::string name;
  std::vector<int32_t> ids;
  std::vector<float> ref;  // [T, vocab]
  std::unique_ptr<Model> model;
};

Status convert_case(const std::vector<std::string>& kv, const std::string& gates, const std::string& out,
                    const std::string& gguf = "tiny_cmp.gguf") {
  ImportOptions o;
  o.kv_specs = kv;
  if (!gates.empty()) PKV_RETURN_IF_ERROR(read_safetensors(gates, &o.extra_tensors));
  return convert_gguf_to_pkv(cmp_dir() + "/" + gguf, out, o);
}

std::vector<LoadedCase> load_cases() {
  std::vector<LoadedCase> out;
  const nlohmann::json j = load_json_file(cmp_dir() + "/cases.json");
  for (const auto& c : j["cases"]) {
    LoadedCase lc;
    lc.name = c["name"].get<std::string>();
    const std::string gates = c["gates"].is_null() ? "" : cmp_dir() + "/" + c["gates"].get<std::string>();
    const std::string pkv = tmp_path("cmp_" + lc.name + ".pkv");
    Status s = convert_case(c["kv"].get<std::vector<std::string>>(), gates, pkv,
                            c.value("gguf", std::string("tiny_cmp.gguf")));
    INFO(lc.name);
    REQUIRE_MESSAGE(s.ok(), s.to_string());
    s = Model::load(pkv, &lc.model);
    REQUIRE_MESSAGE(s.ok(), s.to_string());
    std::remove(pkv.c_str());
    lc.ids = load_json_file(cmp_dir() + "/" + c["ids"].get<std::string>()).get<std::vector<int32_t>>();
    const std::vector<uint8_t> raw = read_bytes(cmp_dir() + "/" + c["logits"].get<std::string>());
    lc.ref.resize(raw.size() / 4);
    std::memcpy(lc.ref.data(), raw.data(), raw.size());
    REQUIRE(lc.ref.size() == lc.ids.size() * lc.model->config().vocab_size);
    out.push_back(std::move(lc));
  }
  return out;
}

// Logits after every token, fed one at a time.
std::vector<float> logits_token_by_token(const Model& m, const std::vector<int32_t>& ids, int threads = 2) {
  auto ctx = make_context(m, uint32_t(ids.size()) + 8, 64, threads);
  const size_t V = m.config().vocab_size;
  std::vector<float> all;
  for (int32_t t : ids) {
    REQUIRE(ctx->decode(t).ok());
    all.insert(all.end(), ctx->logits(), ctx->logits() + V);
  }
  return all;
}

std::vector<float> final_logits_chunked(const Model& m, const std::vector<int32_t>& ids, uint32_t n_batch,
                                        int threads = 2) {
  auto ctx = make_context(m, uint32_t(ids.size()) + 8, n_batch, threads);
  REQUIRE(ctx->prefill(ids.data(), ids.size()).ok());
  return std::vector<float>(ctx->logits(), ctx->logits() + m.config().vocab_size);
}

std::unique_ptr<Model> tiny_with(const std::vector<std::string>& kv, const std::string& gates = "",
                                 const std::string& gguf = "tiny_cmp.gguf") {
  const std::string pkv = tmp_path("cmp_tiny_with.pkv");
  Status s = convert_case(kv, gates, pkv, gguf);
  REQUIRE_MESSAGE(s.ok(), s.to_string());
  std::unique_ptr<Model> m;
  s = Model::load(pkv, &m);
  REQUIRE_MESSAGE(s.ok(), s.to_string());
  std::remove(pkv.c_str());
  return m;
}

std::vector<int32_t> some_ids(size_t n, uint32_t seed) {
  std::vector<int32_t> ids;
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    ids.push_back(int32_t(3 + (x >> 8) % 93));
  }
  return ids;
}

// A safetensors file written by hand (for the bad-file cases).
void write_safetensors(const std::string& path, const std::string& header, const std::vector<uint8_t>& data) {
  std::ofstream f(path, std::ios::binary);
  uint64_t n = header.size();
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = uint8_t(n >> (8 * i));
  f.write(reinterpret_cast<const char*>(len), 8);
  f.write(header.data(), std::streamsize(n));
  f.write(reinterpret_cast<const char*>(data.data()), std::streamsize(data.size()));
}

std::vector<uint8_t> f32_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

}  // namespace

TEST_CASE("compressed memories: every position's logits equal the numpy reference (rel L2 < 1e-4)") {
  std::vector<LoadedCase> cases = load_cases();
  REQUIRE(cases.size() >= 20);
  double worst = 0;
  std::string worst_case;
  for (const LoadedCase& c : cases) {
    INFO(c.name);
    const size_t V = c.model->config().vocab_size;
    const std::vector<float> got = logits_token_by_token(*c.model, c.ids);
    for (size_t t = 0; t < c.ids.size(); ++t) {
      const double e = rel_l2(got.data() + t * V, c.ref.data() + t * V, V);
      if (e > worst) {
        worst = e;
        worst_case = c.name + " t=" + std::to_string(t);
      }
      CHECK_MESSAGE(e < 1e-4, "position " << t << ": rel L2 " << e);
      // The greedy token too, wherever the reference's top two are not a near tie.
      const float* r = c.ref.data() + t * V;
      const float* g = got.data() + t * V;
      const size_t ra = size_t(std::max_element(r, r + V) - r), ga = size_t(std::max_element(g, g + V) - g);
      float second = -INFINITY;
      for (size_t i = 0; i < V; ++i)
        if (i != ra) second = std::max(second, r[i]);
      if (r[ra] - second > 1e-3f) CHECK_MESSAGE(ga == ra, "position " << t << ": greedy " << ga << " vs " << ra);
    }
  }
  MESSAGE("worst rel L2 over " << cases.size() << " cases: " << worst << " (" << worst_case << ")");
}

TEST_CASE("compressed memories: one chunk, chunks of 7, token by token and 1 or 3 threads are bit-identical") {
  for (const LoadedCase& c : load_cases()) {
    INFO(c.name);
    const size_t V = c.model->config().vocab_size;
    const std::vector<float> steps = logits_token_by_token(*c.model, c.ids);
    const float* last = steps.data() + (c.ids.size() - 1) * V;
    for (uint32_t nb : {64u, 7u, 3u}) {
      const std::vector<float> f = final_logits_chunked(*c.model, c.ids, nb);
      CHECK(std::memcmp(f.data(), last, V * 4) == 0);
    }
    for (int th : {1, 3}) {
      const std::vector<float> f = final_logits_chunked(*c.model, c.ids, 5, th);
      CHECK(std::memcmp(f.data(), last, V * 4) == 0);
    }
  }
}

TEST_CASE("compressed memories: text shifted by 0..S-1 tokens, prefill == step-by-step decode at every length") {
  // A compressor state-machine bug shows up periodic in t mod S: compare every prefix length
  // at every phase.
  for (const char* spec : {"all:compressed:W=8,S=4,L=4", "all:compressed:W=5,S=3,L=2,rope=entry",
                           "all:compressed:W=8,S=8,L=16,gate=planted:weak=5"}) {
    INFO(spec);
    auto m = tiny_with({spec});
    const uint32_t S = m->spec().layers[0].stride;
    const std::vector<int32_t> base = some_ids(26, 3);
    for (uint32_t shift = 0; shift < S; ++shift) {
      std::vector<int32_t> ids(shift, 7);
      ids.insert(ids.end(), base.begin(), base.end());
      const size_t V = m->config().vocab_size;
      const std::vector<float> steps = logits_token_by_token(*m, ids);
      for (size_t len = 1; len <= ids.size(); ++len) {
        const std::vector<int32_t> prefix(ids.begin(), ids.begin() + long(len));
        const std::vector<float> f = final_logits_chunked(*m, prefix, 6);
        CHECK_MESSAGE(std::memcmp(f.data(), steps.data() + (len - 1) * V, V * 4) == 0,
                      "shift " << shift << " length " << len);
      }
    }
  }
}

TEST_CASE("invariants: W=S=1 uniform L=0 and sliding(L >= T) equal full attention bit for bit") {
  const std::vector<int32_t> ids = some_ids(40, 5);
  auto full = tiny_with({"all:full"});
  const std::vector<float> ref = logits_token_by_token(*full, ids);
  auto w1 = tiny_with({"all:compressed:W=1,S=1,L=0"});
  auto rope_entry = tiny_with({"all:compressed:W=1,S=1,L=0,rope=entry"});
  auto sl = tiny_with({"all:sliding:L=40"});
  auto sl_big = tiny_with({"all:sliding:L=1000"});
  CHECK(logits_token_by_token(*w1, ids) == ref);
  CHECK(logits_token_by_token(*sl, ids) == ref);
  CHECK(logits_token_by_token(*sl_big, ids) == ref);
  // rope=entry rotates the pooled (single) key at j*S = its own position: equal up to rounding.
  const std::vector<float> re = logits_token_by_token(*rope_entry, ids);
  const size_t V = full->config().vocab_size;
  for (size_t t = 0; t < ids.size(); ++t) CHECK(rel_l2(re.data() + t * V, ref.data() + t * V, V) < 1e-5);
  // And compression is not full attention.
  auto c = tiny_with({"all:compressed:W=8,S=4,L=4"});
  CHECK(rel_l2(logits_token_by_token(*c, ids).data() + 39 * V, ref.data() + 39 * V, V) > 1e-3);
}

TEST_CASE("snapshot -> restore -> continue is bit-identical to an uninterrupted run") {
  // llama, qwen2 (q/k/v biases) and qwen3 (per-head q/k norms): the state is the same kinds.
  for (const char* gguf : {"tiny_cmp.gguf", "tiny_cmp_qwen2.gguf", "tiny_cmp_qwen3.gguf"}) {
  INFO(gguf);
  auto m = tiny_with({"0:full", "1:sliding:L=6", "2:compressed:W=8,S=4,L=4,gate=planted:K=2,V=5"}, "", gguf);
  const std::vector<int32_t> ids = some_ids(50, 9);
  const size_t V = m->config().vocab_size;
  auto whole = make_context(*m, 64, 16, 2);
  REQUIRE(whole->prefill(ids.data(), ids.size()).ok());
  for (size_t cut : {size_t(1), size_t(13), size_t(22), size_t(37)}) {
    INFO("cut " << cut);
    auto a = make_context(*m, 64, 16, 2);
    REQUIRE(a->prefill(ids.data(), cut).ok());
    std::vector<uint8_t> snap(a->snapshot_bytes());
    size_t written = 0;
    REQUIRE(a->snapshot(snap.data(), snap.size(), &written).ok());
    CHECK(written == snap.size());
    // Into a fresh context that has already seen other tokens, with another chunk size.
    auto b = make_context(*m, 60, 5, 1);
    const std::vector<int32_t> junk = some_ids(30, 77);
    REQUIRE(b->prefill(junk.data(), junk.size()).ok());
    REQUIRE(b->restore(snap.data(), snap.size()).ok());
    CHECK(b->n_past() == cut);
    CHECK(std::memcmp(b->logits(), a->logits(), V * 4) == 0);
    REQUIRE(b->prefill(ids.data() + cut, ids.size() - cut).ok());
    CHECK(std::memcmp(b->logits(), whole->logits(), V * 4) == 0);
  }
  // Errors change nothing.
  auto a = make_context(*m, 64, 16, 2);
  REQUIRE(a->prefill(ids.data(), 40).ok());
  std::vector<uint8_t> snap(a->snapshot_bytes());
  CHECK(a->snapshot(snap.data(), snap.size() - 1).code() == StatusCode::kInvalidArgument);
  REQUIRE(a->snapshot(snap.data(), snap.size()).ok());
  auto small = make_context(*m, 32, 16, 2);
  Status s = small->restore(snap.data(), snap.size());
  CHECK(s.message().find("holds 40 tokens; this context holds 32") != std::string::npos);
  CHECK(small->n_past() == 0);
  CHECK(a->restore(snap.data(), snap.size() - 4).message().find("bytes given") != std::string::npos);
  std::vector<uint8_t> bad = snap;
  bad[0] = 'X';
  CHECK(a->restore(bad.data(), bad.size()).message().find("bad magic") != std::string::npos);
  auto other = tiny_with({"all:compressed:W=8,S=4,L=4"}, "", gguf);
  auto oc = make_context(*other, 64, 16, 2);
  CHECK(oc->restore(snap.data(), snap.size()).message().find("another model or memory layout") != std::string::npos);
  CHECK(a->n_past() == 40);
  }
}

TEST_CASE("memory plan: planned KV bytes by hand, the arena equals the plan, budgets fail with the plan") {
  auto m = tiny_with({"0:full", "1:sliding:L=6", "2:compressed:W=8,S=4,L=4,gate=planted:weak=3"});
  // tiny: 2 KV heads x head_dim 16 = kvd 32; f32 K and V.
  ContextParams p;
  p.n_ctx = 100;
  p.n_batch = 10;
  p.n_threads = 2;
  std::unique_ptr<Context> ctx;
  REQUIRE(Context::create(*m, p, &ctx).ok());
  const MemoryPlan& plan = ctx->plan();
  CHECK(plan.layers[0].kv_bytes == 100u * 32 * 4 * 2);
  CHECK(plan.layers[1].kv_bytes == 6u * 32 * 4 * 2);
  // 25 entries + 4 exact rows, K and V; accumulators: 2 branches x ceil(8/4)=2 windows x 2 heads x
  // (max, denominator: 1 each for a scalar gate; sum: 16) f32.
  CHECK(plan.layers[2].kv_bytes == (25u + 4u) * 32 * 4 * 2 + 2u * 2 * 2 * (2 * 1 + 16) * 4);
  {
    // A vector gate keeps max and denominator per channel; W=9,S=4 leaves 3 windows open.
    ModelSpec v = m->spec();
    v.layers[2].gate = GateKind::Vector;
    v.layers[2].window = 9;
    MemoryPlan vp;
    REQUIRE(plan_memory(v, 0, 100, &vp).ok());
    CHECK(vp.layers[2].accumulator_bytes == 2u * 3 * 2 * (2 * 16 + 16) * 4);
  }
  CHECK(plan.kv_bytes_total == plan.layers[0].kv_bytes + plan.layers[1].kv_bytes + plan.layers[2].kv_bytes);
  CHECK(ctx->allocated_bytes() == plan.arena_bytes);
  CHECK(plan.arena_bytes >= plan.kv_bytes_total + plan.scratch_bytes + plan.workspace_bytes);
  CHECK(plan.arena_bytes < plan.kv_bytes_total + plan.scratch_bytes + plan.workspace_bytes + 64 * plan.buffers.size());

  p.memory_budget = plan.arena_bytes;  // exactly enough
  std::unique_ptr<Context> ok;
  CHECK(Context::create(*m, p, &ok).ok());
  p.memory_budget = plan.arena_bytes - 1;
  std::unique_ptr<Context> none;
  Status s = Context::create(*m, p, &none);
  CHECK(s.code() == StatusCode::kBudgetExceeded);
  CHECK(s.message().find("over its memory budget") != std::string::npos);
  CHECK(s.message().find("compressed layers") != std::string::npos);
  CHECK(s.message().find("context arena (total)") != std::string::npos);
  CHECK(none == nullptr);
}

TEST_CASE("bad gate files and gate tensors are rejected with the tensor and the fault named") {
  const std::string gguf = cmp_dir() + "/tiny_cmp.gguf";
  const std::string st = tmp_path("bad_gates.safetensors");
  const std::string out = tmp_path("bad_gates.pkv");
  const std::vector<std::string> scalar = {"2:compressed:W=4,S=4,L=4,gate=scalar"};
  auto expect = [&](const std::vector<std::string>& kv, const std::string& header, const std::vector<uint8_t>& data,
                    const char* msg) {
    CAPTURE(header);
    write_safetensors(st, header, data);
    Status s = convert_case(kv, st, out);
    CHECK(!s.ok());
    CHECK_MESSAGE(s.message().find(msg) != std::string::npos, s.message());
    std::ifstream f(out);
    CHECK(!f.good());  // nothing written
  };
  const std::vector<float> eight(8, 0.5f);
  // Correct shape for W=4, 2 KV heads: [4, 2].
  const std::string ok_hdr = R"({"blk.2.cmp_k_gate.bias":{"dtype":"F32","shape":[4,2],"data_offsets":[0,32]},)"
                             R"("blk.2.cmp_v_gate.bias":{"dtype":"F32","shape":[4,2],"data_offsets":[32,64]}})";
  {
    write_safetensors(st, ok_hdr, f32_bytes(std::vector<float>(16, 0.25f)));
    Status s = convert_case(scalar, st, out);
    CHECK_MESSAGE(s.ok(), s.to_string());
    std::remove(out.c_str());
  }
  expect(scalar, R"({"blk.2.cmp_k_gate.bias":{"dtype":"F32","shape":[8],"data_offsets":[0,32]},)"
                 R"("blk.2.cmp_v_gate.bias":{"dtype":"F32","shape":[4,2],"data_offsets":[32,64]}})",
         f32_bytes(std::vector<float>(16, 0.25f)), "'blk.2.cmp_k_gate.bias' has shape [8]; layers[2]");
  expect(scalar, R"({"blk.2.cmp_k_gate.bias":{"dtype":"I32","shape":[4,2],"data_offsets":[0,32]}})",
         f32_bytes(eight), "dtype 'I32'");
  expect(scalar, R"({"blk.2.cmp_k_gate.bias":{"dtype":"F16","shape":[4,2],"data_offsets":[0,16]},)"
                 R"("blk.2.cmp_v_gate.bias":{"dtype":"F32","shape":[4,2],"data_offsets":[16,48]}})",
         std::vector<uint8_t>(48, 0), "'blk.2.cmp_k_gate.bias' is F16; it must be F32");
  std::vector<float> nan16(16, 0.25f);
  nan16[11] = std::nanf("");
  expect(scalar, ok_hdr, f32_bytes(nan16), "'blk.2.cmp_v_gate.bias' element 3 is NaN");
  expect(scalar, R"({"blk.2.cmp_k_gate.bias":{"dtype":"F32","shape":[4,2],"data_offsets":[0,32]}})",
         f32_bytes(eight), "needs tensor 'blk.2.cmp_v_gate.bias' [4, 2], which is missing");
  expect({"2:compressed:W=4,S=4,L=4"}, ok_hdr, f32_bytes(std::vector<float>(16, 0.25f)),
         "'blk.2.cmp_k_gate.bias' from the gates file is not read by layer 2 (compressed:W=4,S=4,L=4,gate=uniform)");
  expect(scalar, R"({"blk.2.ffn_up.weight":{"dtype":"F32","shape":[4,2],"data_offsets":[0,32]}})", f32_bytes(eight),
         "is not a compressor tensor");
  expect(scalar, R"({"blk.2.cmp_k_gate.bias":{"dtype":"F32","shape":[4,2],"data_offsets":[0,64]}})",
         f32_bytes(eight), "data_offsets [0, 64) do not hold 32 bytes");
  expect(scalar, R"({"blk.2.cmp_k_gate.bias": 5})", f32_bytes(eight), "needs dtype, shape and data_offsets");
  expect(scalar, R"({not json)", f32_bytes(eight), "not a JSON object");
  expect({"2:compressed:W=4,S=4,L=4,gate=planted:weak=1"}, ok_hdr, f32_bytes(std::vector<float>(16, 0.25f)),
         "is already in the model");
  {
    std::ofstream f(st, std::ios::binary);
    f << "abc";
  }
  Status s = convert_case(scalar, st, out);
  CHECK(s.message().find("too short for a safetensors file") != std::string::npos);
  std::remove(st.c_str());
}

TEST_CASE("a NaN or infinite gate in a model file is refused at load") {
  // Write a valid scalar-gate model, then poison one bias value in the file's blob.
  const std::string st = tmp_path("nan_gates.safetensors");
  const std::string out = tmp_path("nan_gates.pkv");
  write_safetensors(st,
                    R"({"blk.1.cmp_k_gate.bias":{"dtype":"F32","shape":[4,2],"data_offsets":[0,32]},)"
                    R"("blk.1.cmp_v_gate.bias":{"dtype":"F32","shape":[4,2],"data_offsets":[32,64]}})",
                    f32_bytes(std::vector<float>(16, 1.5f)));
  REQUIRE(convert_case({"1:compressed:W=4,S=2,L=2,gate=scalar"}, st, out).ok());
  for (float poison : {std::nanf(""), INFINITY}) {
    std::unique_ptr<ModelFile> mf;
    REQUIRE(ModelFile::open(out, &mf).ok());
    const TensorInfo* t = mf->find_tensor("blk.1.cmp_v_gate.bias");
    REQUIRE(t);
    const uint64_t at = mf->header().blob_offset + t->offset + 5 * 4;
    mf.reset();
    std::vector<uint8_t> bytes = read_bytes(out);
    std::memcpy(bytes.data() + at, &poison, 4);
    const std::string bad = tmp_path("nan_gates_poisoned.pkv");
    write_bytes(bad, bytes);
    std::unique_ptr<Model> m;
    Status s = Model::load(bad, &m);
    CHECK(s.code() == StatusCode::kInvalidFile);
    CHECK_MESSAGE(s.message().find("'blk.1.cmp_v_gate.bias' element 5 is") != std::string::npos, s.message());
    std::remove(bad.c_str());
  }
  std::remove(out.c_str());
  std::remove(st.c_str());
}

TEST_CASE("compressed memories on SmolLM2: every position's logits equal the numpy reference (rel L2 < 1e-4)") {
  if (!have_smollm2()) {
    MESSAGE("skipped: no SmolLM2 GGUF");
    return;
  }
  const std::string dir = data_dir() + "/compressed_smollm2";
  const nlohmann::json j = load_json_file(dir + "/cases.json");
  const std::vector<int32_t> ids = j["ids"].get<std::vector<int32_t>>();
  for (const auto& c : j["cases"]) {
    const std::string name = c["name"].get<std::string>();
    INFO(name);
    ImportOptions o;
    o.kv_specs = c["kv"].get<std::vector<std::string>>();
    const std::string pkv = tmp_path("smollm2_" + name + ".pkv");
    REQUIRE(convert_gguf_to_pkv(PHASEKV_TEST_MODEL_PATH, pkv, o).ok());
    std::unique_ptr<Model> m;
    REQUIRE(Model::load(pkv, &m).ok());
    std::remove(pkv.c_str());
    const std::vector<uint8_t> raw = read_bytes(dir + "/" + c["logits"].get<std::string>());
    const size_t V = m->config().vocab_size;
    REQUIRE(raw.size() == ids.size() * V * 4);
    std::vector<float> ref(raw.size() / 4);
    std::memcpy(ref.data(), raw.data(), raw.size());
    const std::vector<float> got = logits_token_by_token(*m, ids);
    double worst = 0;
    for (size_t t = 0; t < ids.size(); ++t) {
      const double e = rel_l2(got.data() + t * V, ref.data() + t * V, V);
      worst = std::max(worst, e);
      CHECK_MESSAGE(e < 1e-4, "position " << t << ": rel L2 " << e);
    }
    // And one 41-token prefill in chunks of 16 ends on the same bits as token by token.
    const std::vector<float> f = final_logits_chunked(*m, ids, 16);
    CHECK(std::memcmp(f.data(), got.data() + (ids.size() - 1) * V, V * 4) == 0);
    MESSAGE(name << ": worst rel L2 over " << ids.size() << " positions " << worst);
  }
}
