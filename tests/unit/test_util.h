// Helpers shared by the unit tests: a small but complete Llama-family spec, temp paths,
// file bytes.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "model_file.h"

namespace phasekv {
namespace test {

inline std::string data_dir() { return PHASEKV_TEST_DATA_DIR; }

// tiny_qwen3_vocab.gguf: 3 random qwen3 layers carrying SmolLM2's vocabulary and specials,
// written by make_gguf_fixtures.py when SmolLM2 is configured (absent otherwise).
inline std::string tiny_vocab_gguf() { return data_dir() + "/tiny_qwen3_vocab.gguf"; }

// A path in the build's scratch folder, unique to this process.
inline std::string tmp_path(const std::string& name) {
  return std::string(PHASEKV_TEST_TMP_DIR) + "/" + std::to_string(getpid()) + "_" + name;
}

inline std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

inline void write_bytes(const std::string& path, const std::vector<uint8_t>& b) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
}

struct TinyModel {
  ModelSpec spec;
  std::vector<std::vector<uint8_t>> bytes;  // one buffer per tensor
  std::vector<const void*> data() const {
    std::vector<const void*> p;
    for (const auto& b : bytes) p.push_back(b.data());
    return p;
  }
};

// vocab 64, d_model 64, 3 layers (full, sliding, compressed), 4 heads / 2 KV heads of 16,
// ffn 96; tensors in a mix of all six dtypes filled with seeded random bytes.
inline TinyModel make_tiny_model(uint32_t seed = 1) {
  TinyModel m;
  ModelConfig& c = m.spec.config;
  c.vocab_size = 64;
  c.d_model = 64;
  c.n_layers = 3;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 16;
  c.ffn_dim = 96;
  c.norm_eps = 1e-6f;
  c.rope.theta = 50000.0f;
  c.rope.dim = 16;
  c.rope.style = RopeStyle::NeoX;
  c.rope.scaling = RopeScaling::YaRN;
  c.rope.factor = 4.0f;
  c.rope.original_context = 128;
  c.max_positions = 512;
  c.tied_embeddings = true;
  c.bos_id = 1;
  c.eos_id = 2;
  c.pad_id = -1;
  AttentionMemory full;
  AttentionMemory sliding;
  sliding.kind = MemoryKind::Sliding;
  sliding.local = 32;
  AttentionMemory comp;
  comp.kind = MemoryKind::Compressed;
  comp.window = 8;
  comp.stride = 4;
  comp.local = 16;
  comp.entry_rope = EntryRope::RotateEntry;
  comp.entry_norm = true;
  comp.sink = true;
  comp.gate = GateKind::Vector;
  comp.gate_maps = MapSharing::PerOffset;
  comp.payload = PayloadSource::CompressorMap;
  m.spec.layers = {full, sliding, comp};

  const DType dts[] = {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1};
  size_t k = 0;
  for (const ExpectedTensor& e : llama_expected_tensors(c)) {
    TensorInfo t;
    t.name = e.name;
    t.shape = e.shape;
    t.dtype = e.shape.size() == 1 ? DType::F32 : dts[k++ % 6];
    m.spec.tensors.push_back(t);
  }
  // The compressor tensors layer 2 reads (gates, payload maps, entry norm, sink).
  for (uint32_t l = 0; l < 3; ++l)
    for (const CompressorTensor& e : compressor_tensors(c, m.spec.layers[l], l)) {
      TensorInfo t;
      t.name = e.name;
      t.shape = e.shape;
      t.dtype = e.f32_only ? DType::F32 : DType::F16;
      m.spec.tensors.push_back(t);
    }
  TensorInfo extra;
  extra.name = "extra.rope_freqs";
  extra.dtype = DType::F32;
  extra.shape = {8};
  m.spec.tensors.push_back(extra);

  TokenizerData& tok = m.spec.tokenizer;
  tok.type = TokenizerType::ByteLevelBPE;
  tok.model = "gpt2";
  tok.pre = "smollm";
  for (int i = 0; i < 64; ++i) tok.tokens.push_back(i == 5 ? "日本🚀" : i == 6 ? "" : "t" + std::to_string(i));
  tok.token_types.assign(64, 1);
  tok.token_types[1] = tok.token_types[2] = 3;
  tok.merges = {"Ġ t", "h e"};
  tok.bos_id = 1;
  tok.eos_id = 2;
  tok.eot_id = 2;
  tok.unk_id = 0;
  tok.add_bos = true;
  m.spec.chat_template = "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}";
  m.spec.provenance = {"tiny.gguf", "test", "tiny model", "unit test"};

  uint64_t blob = 0;
  std::vector<TensorInfo> laid = m.spec.tensors;
  Status s = layout_tensors(&laid, &blob);
  PKV_ASSERT(s.ok());
  std::mt19937 rng(seed);
  for (const TensorInfo& t : laid) {
    std::vector<uint8_t> b(t.size);
    for (auto& x : b) x = uint8_t(rng());
    m.bytes.push_back(std::move(b));
  }
  return m;
}

}  // namespace test
}  // namespace phasekv
