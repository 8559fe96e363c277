// --kv specification parsing.
#include <doctest/doctest.h>

#include "kv_spec.h"

using namespace phasekv;

namespace {
std::vector<AttentionMemory> layers(size_t n) { return std::vector<AttentionMemory>(n); }
Status apply(std::vector<AttentionMemory>& l, const std::string& spec) { return apply_kv_spec(spec, &l); }
}  // namespace

TEST_CASE("kv specs: kinds, parameters, layer sets, later specs win") {
  auto l = layers(30);
  REQUIRE(apply(l, "compressed:W=8,S=4,L=64,gate=uniform").ok());
  for (const auto& m : l) {
    CHECK(m.kind == MemoryKind::Compressed);
    CHECK(m.window == 8);
    CHECK(m.stride == 4);
    CHECK(m.local == 64);
    CHECK(m.gate == GateKind::Uniform);
  }
  REQUIRE(apply(l, "0-1:full").ok());
  CHECK(l[0].kind == MemoryKind::Full);
  CHECK(l[1].kind == MemoryKind::Full);
  CHECK(l[2].kind == MemoryKind::Compressed);
  REQUIRE(apply(l, "3,5-6,29:sliding:L=128").ok());
  CHECK(l[3].kind == MemoryKind::Sliding);
  CHECK(l[3].local == 128);
  CHECK(l[4].kind == MemoryKind::Compressed);
  CHECK(l[5].kind == MemoryKind::Sliding);
  CHECK(l[6].kind == MemoryKind::Sliding);
  CHECK(l[7].kind == MemoryKind::Compressed);
  CHECK(l[29].kind == MemoryKind::Sliding);
  REQUIRE(apply(l, "all:full").ok());
  for (const auto& m : l) CHECK(m.kind == MemoryKind::Full);
}

TEST_CASE("kv specs: defaults and options") {
  auto l = layers(4);
  REQUIRE(apply(l, "compressed:W=8,S=8").ok());
  CHECK(l[0].local == 7);  // default L = S-1, the smallest that leaves no gap
  REQUIRE(apply(l, "2:compressed:W=4,S=4,L=0,gap=1,rope=entry,sink=1").ok());
  CHECK(l[2].gap_accepted);
  CHECK(l[2].entry_rope == EntryRope::RotateEntry);
  CHECK(l[2].sink);
  REQUIRE(apply(l, "compressed:W=1,S=1,L=0").ok());  // W=S=1, L=0: the full-attention equivalent
  CHECK(l[3].local == 0);
}

TEST_CASE("kv specs: errors name the spec and the problem") {
  auto l = layers(30);
  struct Case {
    const char* spec;
    const char* msg;
  } cases[] = {
      {"", "expected a kind"},
      {"dense", "expected a kind"},
      {"0-1:dense", "found 'dense'"},
      {"compressed", "needs W=.. and S=.."},
      {"compressed:W=8", "needs W=.. and S=.."},
      {"compressed:W=4,S=8", "window W = 4 is smaller than stride S = 8"},
      {"compressed:W=8,S=0", "stride S = 0"},
      {"compressed:W=8,S=8,L=3", "L = 3 < S-1 = 7"},
      {"compressed:W=8,S=4,gate=planted", "gate = 'planted'"},
      {"compressed:W=x,S=4", "W = 'x'"},
      {"compressed:W=8,S=4,Q=1", "unknown parameter 'Q'"},
      {"compressed:W=8,S=4,L", "not KEY=VALUE"},
      {"compressed:W=8,S=4,rope=sideways", "rope = 'sideways'"},
      {"sliding", "sliding needs L=N"},
      {"sliding:L=0", "sliding L = 0"},
      {"sliding:W=4,L=8", "unknown parameter 'W'"},
      {"full:L=4", "unknown parameter 'L' for full"},
      {"30:full", "layer 30 does not exist"},
      {"5-3:full", "reversed"},
      {"1-:full", "not N or N-M"},
      {"0:full:x:y", "too many"},
      {"compressed:W=99999999999,S=4", "W = '99999999999'"},
  };
  for (const Case& c : cases) {
    INFO("spec: " << c.spec);
    auto before = l;
    Status s = apply(l, c.spec);
    CHECK(s.code() == StatusCode::kInvalidArgument);
    CHECK_MESSAGE(s.message().find(c.msg) != std::string::npos, s.message());
    CHECK(l == before);  // a rejected spec changes nothing
  }
}

TEST_CASE("kv specs: gates, maps, entry norm, sinks") {
  auto l = layers(3);
  REQUIRE(apply(l, "0:full:sink=1").ok());
  CHECK(l[0].sink);
  REQUIRE(apply(l, "1:sliding:L=6,sink=1").ok());
  CHECK(l[1].sink);
  REQUIRE(apply(l, "2:compressed:W=8,S=4,L=4,gate=vector,gate_maps=offset,payload=map,payload_maps=offset,"
                   "rope=entry,entry_norm=1")
              .ok());
  CHECK(l[2].gate == GateKind::Vector);
  CHECK(l[2].gate_maps == MapSharing::PerOffset);
  CHECK(l[2].payload == PayloadSource::CompressorMap);
  CHECK(l[2].payload_maps == MapSharing::PerOffset);
  CHECK(l[2].entry_norm);
  CHECK(l[2].describe() ==
        "compressed:W=8,S=4,L=4,gate=vector,gate_maps=offset,payload=map,payload_maps=offset,rope=entry,entry_norm=1");
}

TEST_CASE("kv specs: planted gates (parameters and the biases they imply)") {
  auto l = layers(3);
  std::vector<PlantedGate> pg;
  REQUIRE(apply_kv_specs({"compressed:W=8,S=8,L=16,gate=planted:K=2,V=5,strength=7.5", "0:full"}, &l, &pg).ok());
  REQUIRE(pg.size() == 3);
  CHECK(!pg[0].on);  // the later spec made layer 0 full again
  CHECK(pg[1].on);
  CHECK(pg[1].k_offset == 2);
  CHECK(pg[1].v_offset == 5);
  CHECK(pg[1].strength == 7.5f);
  CHECK(l[1].gate == GateKind::Scalar);
  CHECK(l[1].gate_maps == MapSharing::Shared);
  std::vector<float> bk, bv;
  planted_gate_biases(pg[1], 8, 3, &bk, &bv);
  REQUIRE(bk.size() == 24);
  for (uint32_t i = 0; i < 8; ++i)
    for (uint32_t h = 0; h < 3; ++h) {
      CHECK(bk[i * 3 + h] == (i == 2 ? 7.5f : 0.0f));
      CHECK(bv[i * 3 + h] == (i == 5 ? 7.5f : 0.0f));
    }
  REQUIRE(apply_kv_specs({"compressed:W=4,S=2,L=2,gate=planted:weak=1,3"}, &l, &pg).ok());
  CHECK(pg[2].weak == std::vector<uint32_t>{1, 3});
  CHECK(pg[2].strength == 10.0f);  // the default
  planted_gate_biases(pg[2], 4, 1, &bk, &bv);
  CHECK(bk == std::vector<float>{0.0f, -10.0f, 0.0f, -10.0f});
  CHECK(bv == bk);

  struct Bad {
    const char* spec;
    const char* msg;
  } const bad[] = {
      {"compressed:W=8,S=8,gate=planted:K=2", "K=k needs V=v"},
      {"compressed:W=8,S=8,gate=planted:K=2,V=9", "offsets in [0, W-1 = 7]"},
      {"compressed:W=8,S=8,gate=planted:weak=8", "weak offset 8 is outside"},
      {"compressed:W=2,S=2,gate=planted:weak=0,1", "every offset is weak"},
      {"compressed:W=8,S=8,gate=planted:K=1,V=2,weak=3", "either K=k,V=v or weak"},
      {"compressed:W=8,S=8,gate=planted:weak=1,strength=-1", "strength = '-1'"},
      {"compressed:W=8,S=8,gate=planted:weak=1,strength=nan", "strength = 'nan'"},
      {"compressed:W=8,S=8,gate=planted:Q=1", "'Q=1' is not K=k"},
      {"compressed:W=8,S=8,gate=sideways", "gate = 'sideways'"},
      {"compressed:W=8,S=8,gate_maps=everywhere", "gate_maps = 'everywhere'"},
      {"compressed:W=8,S=8,payload=mine", "payload = 'mine'"},
      {"compressed:W=8,S=8,entry_norm=1", "entry_norm is set but entry_rope is rotate-tokens"},
      {"sliding:L=4,gate=planted:weak=1", "gate= is a compressed parameter"},
  };
  for (const Bad& b : bad) {
    CAPTURE(b.spec);
    auto l2 = layers(3);
    Status s = apply(l2, b.spec);
    CHECK(s.code() == StatusCode::kInvalidArgument);
    CHECK_MESSAGE(s.message().find(b.msg) != std::string::npos, s.message());
  }
}
