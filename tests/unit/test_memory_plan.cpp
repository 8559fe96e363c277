// Memory plan against hand-computed byte counts (SmolLM2-135M's shapes).
#include <doctest/doctest.h>

#include "memory_plan.h"

using namespace phasekv;

namespace {
ModelSpec smollm2_like() {
  ModelSpec s;
  s.config.n_layers = 30;
  s.config.n_kv_heads = 3;
  s.config.head_dim = 64;
  s.config.max_positions = 8192;
  s.layers.assign(30, AttentionMemory{});
  return s;
}
}  // namespace

TEST_CASE("full attention: n_ctx rows of K and V per layer") {
  ModelSpec s = smollm2_like();
  MemoryPlan p;
  REQUIRE(plan_memory(s, 1000, 8192, &p).ok());
  // 8192 tokens x 3 heads x 64 x 4 bytes x 2 (K,V) = 12,582,912 per layer
  CHECK(p.layers[0].kv_bytes == 12582912ull);
  CHECK(p.kv_bytes_total == 30ull * 12582912ull);
  CHECK(p.weights_bytes == 1000);
}

TEST_CASE("sliding and compressed layers") {
  ModelSpec s = smollm2_like();
  s.layers[0].kind = MemoryKind::Sliding;
  s.layers[0].local = 512;
  AttentionMemory c;
  c.kind = MemoryKind::Compressed;
  c.window = 8;
  c.stride = 4;
  c.local = 64;
  s.layers[1] = c;
  c.stride = 8;
  c.local = 16;
  s.layers[2] = c;
  MemoryPlan p;
  REQUIRE(plan_memory(s, 0, 8192, &p).ok());
  CHECK(p.layers[0].exact_entries == 512);
  CHECK(p.layers[0].kv_bytes == 512ull * 1536);
  // W8/S4/L64: 64 exact + 2048 entries, rows of 1536 bytes; accumulators:
  // 2 branches x 3 heads x ceil(8/4)=2 open windows x (2 + 64) floats x 4 bytes = 3,168.
  CHECK(p.layers[1].exact_entries == 64);
  CHECK(p.layers[1].compressed_entries == 2048);
  CHECK(p.layers[1].accumulator_bytes == 3168);
  CHECK(p.layers[1].kv_bytes == 2112ull * 1536 + 3168);
  // W8/S8/L16: 16 + 1024 entries; 1 open window -> 1,584 bytes of accumulators.
  CHECK(p.layers[2].kv_bytes == 1040ull * 1536 + 1584);
  CHECK(p.kv_bytes_total == 512ull * 1536 + 2112ull * 1536 + 3168 + 1040ull * 1536 + 1584 + 27ull * 12582912);
  // Short context: sliding keeps min(T, L).
  REQUIRE(plan_memory(s, 0, 100, &p).ok());
  CHECK(p.layers[0].exact_entries == 100);
  CHECK(p.layers[1].exact_entries == 64);
  CHECK(p.layers[1].compressed_entries == 25);
}

TEST_CASE("plan errors: n_ctx 0 or above the model's limit") {
  ModelSpec s = smollm2_like();
  MemoryPlan p;
  Status st = plan_memory(s, 0, 0, &p);
  CHECK(st.code() == StatusCode::kInvalidArgument);
  CHECK(st.message().find("n_ctx = 0") != std::string::npos);
  st = plan_memory(s, 0, 8193, &p);
  CHECK(st.message().find("max_positions = 8192") != std::string::npos);
}
