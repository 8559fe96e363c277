// The core is not CPU-shaped: a context runs on any Backend through the seam alone. Checked on
// the CPU with a backend that behaves like a GPU's as far as the core can tell — its state lives
// in "device" memory (host memory it hands out as such), the weights are a copy at other
// addresses, logits and scores reach the host only through the planned pinned staging buffers,
// and it can be told to fail — while computing with the CPU kernels. Everything the context
// does must then be bit-identical to the plain CPU backend; a failure must surface as a status.
#include <doctest/doctest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "context.h"
#include "cpu_backend.h"
#include "engine_util.h"
#include "gguf_import.h"
#include "safetensors.h"

using namespace phasekv;
using namespace phasekv::test;

namespace {

struct Allocation {
  MemorySpace space;
  uint8_t* p;
  size_t bytes;
};

// Weights copied to other addresses, as a device copy would be.
class CopiedWeights final : public WeightMapping {
 public:
  const uint8_t* lo = nullptr;
  const uint8_t* hi = nullptr;
  CopiedWeights(const HostRegion* r, int n) {
    size_t total = 0;
    for (int i = 0; i < n; ++i) total += (r[i].bytes + 255) & ~size_t(255);
    copy_.assign(total, 0);
    size_t at = 0;
    for (int i = 0; i < n; ++i) {
      if (r[i].bytes) std::memcpy(copy_.data() + at, r[i].data, r[i].bytes);
      regions_.push_back({static_cast<const uint8_t*>(r[i].data), r[i].bytes, copy_.data() + at});
      at += (r[i].bytes + 255) & ~size_t(255);
    }
    lo = copy_.data();
    hi = copy_.data() + copy_.size();
    mode_ = "test copy";
    space_ = MemorySpace::Device;
    bytes_ = total;
  }

 private:
  std::vector<uint8_t> copy_;
};

// A GPU-shaped backend over the CPU kernels.
class StagingBackend final : public Backend {
 public:
  explicit StagingBackend(std::vector<Allocation>* log) : cpu_(1), log_(log) {}
  int fail_after = -1;   // synchronize() calls that succeed before one fails (-1: never)
  bool refuse_matmul = false;
  int map_calls = 0;

  const char* name() const override { return "staging-test"; }
  bool supports(BackendOp op, DType t) const override {
    return !(refuse_matmul && op == BackendOp::Matmul) && cpu_.supports(op, t);
  }
  size_t workspace_bytes(const WorkspaceQuery& q) const override { return cpu_.workspace_bytes(q); }
  Status bind_workspace(void* b, size_t n, const WorkspaceQuery& q) override { return cpu_.bind_workspace(b, n, q); }
  MemorySpace state_space() const override { return MemorySpace::Device; }
  MemorySpace weights_space() const override { return MemorySpace::Device; }
  std::string weights_key() const override { return "staging-test"; }
  Status map_weights(const HostRegion* r, int n, std::shared_ptr<WeightMapping>* out) override {
    ++map_calls;
    auto w = std::make_shared<CopiedWeights>(r, n);
    lo_ = w->lo;
    hi_ = w->hi;
    *out = std::move(w);
    return Status::Ok();
  }
  Status allocate(MemorySpace space, size_t bytes, void** out) override {
    PKV_RETURN_IF_ERROR(cpu_.allocate(MemorySpace::Host, bytes, out));
    log_->push_back({space, static_cast<uint8_t*>(*out), bytes});
    return Status::Ok();
  }
  void release(MemorySpace, void* p) override { cpu_.release(MemorySpace::Host, p); }
  Status zero(MemorySpace, void* p, size_t bytes) override {
    std::memset(p, 0, bytes);
    return Status::Ok();
  }
  void copy(void* d, const void* s, size_t n) override { cpu_.copy(d, s, n); }
  void upload(void* d, const void* s, size_t n) override {
    ++uploads;
    cpu_.copy(d, s, n);
  }
  void download(void* d, const void* s, size_t n) override {
    ++downloads;
    cpu_.copy(d, s, n);
  }
  Status synchronize() override {
    if (fail_after == 0) {
      fail_after = -1;
      return make_error(StatusCode::kInternal, "CUDA execution failed: an illegal memory access (injected)");
    }
    if (fail_after > 0) --fail_after;
    return Status::Ok();
  }
  // Every weight an op reads must come from the mapping (the "device" copy), never the file.
  void weight(const void* p) {
    if (lo_ && !(static_cast<const uint8_t*>(p) >= lo_ && static_cast<const uint8_t*>(p) < hi_)) ++foreign_weights;
  }
  void embed(const WeightView& t, const int32_t* tok, int n, float* out) override {
    weight(t.data);
    cpu_.embed(t, tok, n, out);
  }
  void rmsnorm(const float* x, const float* w, float eps, int n, int dim, float* out) override {
    weight(w);
    cpu_.rmsnorm(x, w, eps, n, dim, out);
  }
  void matmul(const WeightView* w, float* const* y, int m, const float* x, int n) override {
    for (int i = 0; i < m; ++i) weight(w[i].data);
    cpu_.matmul(w, y, m, x, n);
  }
  void rope(float* x, int n, int h, int hd, int p0, const float* f, int rd, bool il, float ps) override {
    weight(f);
    cpu_.rope(x, n, h, hd, p0, f, rd, il, ps);
  }
  long foreign_weights = 0;
  void attention(const AttentionArgs& a) override { cpu_.attention(a); }
  void compress(const CompressArgs& a) override { cpu_.compress(a); }
  void compress_reset(float* acc, int w, int h, int dg, int hd) override { cpu_.compress_reset(acc, w, h, dg, hd); }
  void silu_mul(const float* g, const float* u, float* o, size_t n) override { cpu_.silu_mul(g, u, o, n); }
  void add(float* x, const float* y, size_t n) override { cpu_.add(x, y, n); }
  void ring_write(const RingWriteArgs& a) override { cpu_.ring_write(a); }
  void gold_score(const float* l, int n, int32_t g, ScoreResult* o) override { cpu_.gold_score(l, n, g, o); }

  long uploads = 0, downloads = 0;

 private:
  CpuBackend cpu_;
  std::vector<Allocation>* log_;
  const uint8_t* lo_ = nullptr;
  const uint8_t* hi_ = nullptr;
};

std::string cmp_dir() { return data_dir() + "/compressed"; }

// The compressed-attention fixture cases (every memory, gate and payload kind) as models; the
// first `limit` of them.
std::vector<std::unique_ptr<Model>> fixture_models(size_t limit = 1000) {
  std::vector<std::unique_ptr<Model>> out;
  const nlohmann::json j = load_json_file(cmp_dir() + "/cases.json");
  for (const auto& c : j["cases"]) {
    if (out.size() == limit) break;
    ImportOptions o;
    o.kv_specs = c["kv"].get<std::vector<std::string>>();
    if (!c["gates"].is_null()) REQUIRE(read_safetensors(cmp_dir() + "/" + c["gates"].get<std::string>(), &o.extra_tensors).ok());
    const std::string pkv = tmp_path("seam_" + c["name"].get<std::string>() + ".pkv");
    REQUIRE(convert_gguf_to_pkv(cmp_dir() + "/" + c.value("gguf", std::string("tiny_cmp.gguf")), pkv, o).ok());
    std::unique_ptr<Model> m;
    REQUIRE(Model::load(pkv, &m).ok());
    std::remove(pkv.c_str());
    out.push_back(std::move(m));
  }
  return out;
}

ContextParams params(uint32_t n_ctx, uint32_t n_batch) {
  ContextParams p;
  p.n_ctx = n_ctx;
  p.n_batch = n_batch;
  p.n_threads = 1;  // also under qemu, where spinning worker threads crawl
  p.snapshot_slots = 2;
  return p;
}

bool inside(const std::vector<Allocation>& log, MemorySpace s, const void* p) {
  for (const Allocation& a : log)
    if (a.space == s && static_cast<const uint8_t*>(p) >= a.p && static_cast<const uint8_t*>(p) < a.p + a.bytes)
      return true;
  return false;
}

}  // namespace

// (Named for the qemu exclusion of the heavy compressed-memory tests: every fixture model.)
TEST_CASE("compressed memories: a GPU-shaped backend gives the CPU backend's results bit for bit, through staging") {
  const std::vector<std::unique_ptr<Model>> models = fixture_models();
  REQUIRE(!models.empty());
  int checked = 0;
  for (const auto& mp : models) {
    const Model& m = *mp;
    const size_t V = m.config().vocab_size;
    std::vector<int32_t> ids;
    for (int i = 0; i < 40; ++i) ids.push_back(int32_t((i * 7 + 3) % int(V)));
    std::unique_ptr<Context> ref, ctx;
    REQUIRE(Context::create(m, params(64, 16), &ref).ok());
    std::vector<Allocation> log;
    auto* sb = new StagingBackend(&log);
    REQUIRE(Context::create(m, params(64, 16), std::unique_ptr<Backend>(sb), &ctx).ok());
    CHECK(std::string(ctx->backend_name()) == "staging-test");
    // One allocation per memory space the plan uses: the device state and the pinned staging.
    REQUIRE(log.size() == 2);
    CHECK(ctx->plan().space_bytes[int(MemorySpace::Device)] > 0);
    CHECK(ctx->plan().space_bytes[int(MemorySpace::PinnedHost)] > 0);
    CHECK(ctx->plan().space_bytes[int(MemorySpace::Host)] == 0);
    CHECK(ctx->plan().space_bytes[1] + ctx->plan().space_bytes[2] == ctx->plan().arena_bytes);
    CHECK(ctx->plan().weights_space == MemorySpace::Device);
    CHECK(std::string(ctx->weights().mode()) == "test copy");
    CHECK(ctx->weights().translate(m.token_embd().data) != m.token_embd().data);  // the ops read the copy
    // The host sees logits only in the pinned staging buffer.
    CHECK(inside(log, MemorySpace::PinnedHost, ctx->logits()));
    CHECK(!inside(log, MemorySpace::PinnedHost, ref->logits()));

    // Prefill in chunks of 16, then decode: logits at every step equal the CPU's bit for bit.
    REQUIRE(ref->prefill(ids.data(), 24).ok());
    REQUIRE(ctx->prefill(ids.data(), 24).ok());
    CHECK(std::memcmp(ref->logits(), ctx->logits(), V * 4) == 0);
    // Device-resident snapshot slot and a host snapshot, both continuing bit-identically.
    REQUIRE(ctx->save_slot(1).ok());
    std::vector<uint8_t> snap(ctx->snapshot_bytes());
    size_t wrote = 0;
    REQUIRE(ctx->snapshot(snap.data(), snap.size(), &wrote).ok());
    size_t same = 0;
    for (size_t i = 24; i < ids.size(); ++i) {
      REQUIRE(ref->decode(ids[i]).ok());
      REQUIRE(ctx->decode(ids[i]).ok());
      same += std::memcmp(ref->logits(), ctx->logits(), V * 4) == 0;
    }
    CHECK(same == ids.size() - 24);
    std::vector<float> final_logits(ctx->logits(), ctx->logits() + V);
    ScoreResult a, b;
    REQUIRE(ref->score(ids[3], &a).ok());
    REQUIRE(ctx->score(ids[3], &b).ok());
    CHECK(std::memcmp(&a, &b, sizeof a) == 0);
    CHECK(ctx->load_slot(1).ok());
    CHECK(ctx->n_past() == 24);
    for (size_t i = 24; i < ids.size(); ++i) REQUIRE(ctx->decode(ids[i]).ok());
    CHECK(std::memcmp(final_logits.data(), ctx->logits(), V * 4) == 0);
    REQUIRE(ctx->restore(snap.data(), wrote).ok());
    for (size_t i = 24; i < ids.size(); ++i) REQUIRE(ctx->decode(ids[i]).ok());
    CHECK(std::memcmp(final_logits.data(), ctx->logits(), V * 4) == 0);
    CHECK(ctx->load_slot(0).code() == StatusCode::kInvalidArgument);  // never saved
    CHECK(ctx->save_slot(2).code() == StatusCode::kInvalidArgument);  // two slots
    CHECK(sb->uploads > 0);
    CHECK(sb->downloads > 0);
    // Nothing more was allocated after creation; no op read a weight outside the copy.
    CHECK(log.size() == 2);
    CHECK(sb->foreign_weights == 0);
    ++checked;
  }
  CHECK(checked == int(models.size()));
}

TEST_CASE("backend seam: one weight mapping per model and backend kind, shared by its contexts") {
  const std::vector<std::unique_ptr<Model>> models = fixture_models(1);
  const Model& m = *models[0];
  std::vector<Allocation> log;
  auto* a = new StagingBackend(&log);
  auto* b = new StagingBackend(&log);
  std::unique_ptr<Context> c1, c2;
  REQUIRE(Context::create(m, params(32, 8), std::unique_ptr<Backend>(a), &c1).ok());
  REQUIRE(Context::create(m, params(32, 8), std::unique_ptr<Backend>(b), &c2).ok());
  CHECK(a->map_calls + b->map_calls == 1);
  CHECK(&c1->weights() == &c2->weights());
}

TEST_CASE("backend seam: a backend failure is a status, the context refuses work until reset()") {
  const std::vector<std::unique_ptr<Model>> models = fixture_models(1);
  const Model& m = *models[0];
  std::vector<Allocation> log;
  auto* sb = new StagingBackend(&log);
  std::unique_ptr<Context> ctx, ref;
  REQUIRE(Context::create(m, params(64, 16), std::unique_ptr<Backend>(sb), &ctx).ok());
  REQUIRE(Context::create(m, params(64, 16), &ref).ok());
  const int32_t ids[4] = {1, 2, 3, 4};
  sb->fail_after = 0;
  Status s = ctx->prefill(ids, 4);
  CHECK(s.code() == StatusCode::kInternal);
  CHECK(s.message().find("illegal memory access") != std::string::npos);
  s = ctx->decode(1);
  CHECK(s.code() == StatusCode::kInternal);
  CHECK(s.message().find("reset()") != std::string::npos);
  ScoreResult r;
  CHECK(!ctx->score(1, &r).ok());
  CHECK(!ctx->save_slot(0).ok());
  ctx->reset();
  REQUIRE(ctx->prefill(ids, 4).ok());
  REQUIRE(ref->prefill(ids, 4).ok());
  CHECK(std::memcmp(ref->logits(), ctx->logits(), m.config().vocab_size * 4) == 0);
}

TEST_CASE("backend seam: an unsupported op or backend fails at creation, naming it") {
  const std::vector<std::unique_ptr<Model>> models = fixture_models(1);
  const Model& m = *models[0];
  std::vector<Allocation> log;
  auto* sb = new StagingBackend(&log);
  sb->refuse_matmul = true;
  std::unique_ptr<Context> ctx;
  Status s = Context::create(m, params(32, 8), std::unique_ptr<Backend>(sb), &ctx);
  CHECK(s.code() == StatusCode::kUnsupported);
  CHECK(s.message().find("staging-test backend does not support matmul") != std::string::npos);
  CHECK(log.empty());  // refused before any memory was taken
  ContextParams p = params(32, 8);
  p.backend = BackendKind::Cuda;
  std::string why;
  if (!cuda_backend_available(&why)) {
    s = Context::create(m, p, &ctx);
    CHECK(s.code() == StatusCode::kUnsupported);
    CHECK(s.message().find("backend = cuda") != std::string::npos);
    p.backend = BackendKind::Auto;  // falls back to the CPU
    REQUIRE(Context::create(m, p, &ctx).ok());
    CHECK(std::string(ctx->backend_name()) == "cpu");
  }
}
