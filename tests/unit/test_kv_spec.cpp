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
      {"full:L=4", "full takes no parameters"},
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
