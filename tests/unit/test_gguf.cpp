// GGUF import against fixtures written by the `gguf` package (tests/reference/make_gguf_fixtures.py):
// tensor bytes must be bit-identical to the bytes at the offsets gguf's own reader reports,
// dequantized values must match gguf.quants, metadata must come through exactly.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>

#include <nlohmann/json.hpp>

#include "gguf_import.h"
#include "model_file.h"
#include "test_util.h"

using namespace phasekv;
using namespace phasekv::test;
using nlohmann::json;

namespace {

json load_json(const std::string& path) {
  std::ifstream f(path);
  REQUIRE_MESSAGE(f.good(), "missing fixture " << path << " (run the gguf_fixtures test first)");
  return json::parse(f);
}

// Every tensor the fixture lists: same dtype, shape (outermost first), bytes identical to the
// source file, and dequantization equal to gguf.quants' (to the last bit, or 1 ulp).
void check_tensors_against_fixture(const ModelFile& mf, const std::vector<uint8_t>& gguf_bytes, const json& fx) {
  for (auto it = fx["tensors"].begin(); it != fx["tensors"].end(); ++it) {
    const std::string name = it.key();
    const json& e = it.value();
    INFO("tensor " << name);
    const TensorInfo* t = mf.find_tensor(name);
    REQUIRE(t != nullptr);
    CHECK(std::string(dtype_name(t->dtype)) == e["type"].get<std::string>());
    CHECK(t->shape == e["shape"].get<std::vector<uint64_t>>());
    const uint64_t off = e["file_offset"], n = e["n_bytes"];
    REQUIRE(t->size == n);
    REQUIRE(off + n <= gguf_bytes.size());
    CHECK(std::memcmp(mf.tensor_data(*t), gguf_bytes.data() + off, n) == 0);
    if (!e["dequant"].is_null()) {
      std::vector<float> ref = e["dequant"].get<std::vector<float>>();
      REQUIRE(ref.size() == t->elements());
      std::vector<float> got(ref.size());
      dequantize_row(t->dtype, mf.tensor_data(*t), got.data(), int64_t(got.size()));
      size_t bad = 0, inexact = 0;
      for (size_t i = 0; i < ref.size(); ++i) {
        if (!(got[i] == ref[i] || std::fabs(got[i] - ref[i]) <= 1.2e-7f * std::fabs(ref[i]))) ++bad;
        inexact += std::memcmp(&got[i], &ref[i], 4) != 0;
      }
      CHECK(bad == 0);
      // The 5-bit and K-quant decoders do gguf.quants' float operations in its order: exact.
      if (name.rfind("test.rand_", 0) == 0) CHECK(inexact == 0);
    }
  }
}

std::string convert_fixture(const std::string& name, const std::vector<std::string>& kv = {}) {
  const std::string out = tmp_path(name + ".pkv");
  ImportOptions o;
  o.kv_specs = kv;
  Status s = convert_gguf_to_pkv(data_dir() + "/" + name + ".gguf", out, o);
  REQUIRE_MESSAGE(s.ok(), s.to_string());
  return out;
}

}  // namespace

TEST_CASE("GGUF import: all six dtypes, bytes identical, values equal to gguf.quants") {
  const std::string out = convert_fixture("tiny");
  std::unique_ptr<ModelFile> mf;
  Status s = ModelFile::open(out, &mf);
  REQUIRE_MESSAGE(s.ok(), s.to_string());
  const std::vector<uint8_t> src = read_bytes(data_dir() + "/tiny.gguf");
  check_tensors_against_fixture(*mf, src, load_json(data_dir() + "/tiny.json"));

  const ModelConfig& c = mf->spec().config;
  CHECK(c.architecture == "llama");
  CHECK(c.vocab_size == 64);
  CHECK(c.d_model == 64);
  CHECK(c.n_layers == 2);
  CHECK(c.n_heads == 4);
  CHECK(c.n_kv_heads == 2);
  CHECK(c.head_dim == 16);
  CHECK(c.ffn_dim == 96);
  CHECK(c.max_positions == 256);
  CHECK(c.norm_eps == 1e-6f);
  CHECK(c.rope.theta == 50000.0f);
  CHECK(c.rope.dim == 16);
  CHECK(c.rope.style == RopeStyle::Interleaved);
  CHECK_FALSE(c.tied_embeddings);
  CHECK(c.bos_id == 1);
  CHECK(c.eos_id == 2);
  CHECK(c.pad_id == 3);
  const TokenizerData& t = mf->spec().tokenizer;
  CHECK(t.type == TokenizerType::ByteLevelBPE);
  CHECK(t.pre == "smollm");
  REQUIRE(t.tokens.size() == 64);
  CHECK(t.tokens[1] == "<|im_start|>");
  CHECK(t.tokens[7] == "日本");
  CHECK(t.tokens[8] == "🚀");
  CHECK(t.tokens[11] == std::string(300, 'x'));
  CHECK(t.tokens[12] == "");
  CHECK(t.token_types[0] == 3);
  CHECK(t.token_types[4] == 1);
  CHECK(t.merges == std::vector<std::string>{"Ġ t", "Ġt he", "h e"});
  CHECK(t.unk_id == 0);
  CHECK_FALSE(t.add_bos);
  CHECK(mf->spec().chat_template.find("<|im_start|>") != std::string::npos);
  CHECK(mf->spec().provenance.source_file == "tiny.gguf");
  CHECK(mf->spec().provenance.source_format == "gguf v3");
  CHECK(mf->spec().provenance.source_name == "tiny-test-model");
  for (const AttentionMemory& m : mf->spec().layers) CHECK(m.kind == MemoryKind::Full);
  std::remove(out.c_str());
}

TEST_CASE("GGUF import: hand-made blocks dequantize to hand-derived values") {
  const std::string out = convert_fixture("tiny");
  std::unique_ptr<ModelFile> mf;
  REQUIRE(ModelFile::open(out, &mf).ok());
  float v[32];
  const TensorInfo* q41 = mf->find_tensor("test.hand_q4_1");  // d = 0.5, m = -1, qs[j] = j
  REQUIRE(q41);
  dequantize_row(q41->dtype, mf->tensor_data(*q41), v, 32);
  for (int j = 0; j < 16; ++j) {
    CHECK(v[j] == 0.5f * j - 1.0f);
    CHECK(v[16 + j] == -1.0f);
  }
  const TensorInfo* q40 = mf->find_tensor("test.hand_q4_0");  // d = 2, qs[j] = 0x8F - j
  REQUIRE(q40);
  dequantize_row(q40->dtype, mf->tensor_data(*q40), v, 32);
  for (int j = 0; j < 16; ++j) {
    const int b = 0x8F - j;
    CHECK(v[j] == 2.0f * ((b & 15) - 8));
    CHECK(v[16 + j] == 2.0f * ((b >> 4) - 8));
  }
  const TensorInfo* q80 = mf->find_tensor("test.hand_q8_0");  // d = 0.25, q[j] = j*9 - 128
  REQUIRE(q80);
  dequantize_row(q80->dtype, mf->tensor_data(*q80), v, 32);
  for (int j = 0; j < 32; ++j) CHECK(v[j] == 0.25f * float(int8_t(uint8_t((j * 9 - 128) & 0xff))));
  const TensorInfo* ramp = mf->find_tensor("test.ramp");
  REQUIRE(ramp);
  const float* r = reinterpret_cast<const float*>(mf->tensor_data(*ramp));
  for (int i = 0; i < 64; ++i) CHECK(r[i] == i * 0.25f - 8.0f);
  std::remove(out.c_str());
}

TEST_CASE("GGUF import: --kv specs land in the per-layer descriptors") {
  const std::string out = convert_fixture("tiny", {"all:compressed:W=8,S=4,L=64,gate=uniform", "0:full"});
  std::unique_ptr<ModelFile> mf;
  REQUIRE(ModelFile::open(out, &mf).ok());
  CHECK(mf->spec().layers[0].kind == MemoryKind::Full);
  CHECK(mf->spec().layers[1].kind == MemoryKind::Compressed);
  CHECK(mf->spec().layers[1].window == 8);
  CHECK(mf->spec().layers[1].stride == 4);
  CHECK(mf->spec().layers[1].local == 64);
  std::remove(out.c_str());
}

TEST_CASE("GGUF reader: edge-case metadata comes through exactly") {
  std::unique_ptr<GgufFile> g;
  Status s = GgufFile::open(data_dir() + "/tiny_edge.gguf", &g);
  REQUIRE_MESSAGE(s.ok(), s.to_string());
  CHECK(g->version() == 3);
  CHECK(g->alignment() == 64);
  bool found = false;
  std::string str;
  REQUIRE(g->get_string("test.unicode.ключ", &str, &found).ok());
  CHECK(found);
  CHECK(str == "värde ✓ 🚀");
  REQUIRE(g->get_string("test.empty", &str, &found).ok());
  CHECK((found && str.empty()));
  REQUIRE(g->get_string("test.long", &str, &found).ok());
  CHECK(str.size() == 100000);
  const GgufValue* u64 = g->find("test.u64");
  REQUIRE(u64);
  CHECK(u64->type == GgufType::U64);
  CHECK(u64->u == (1ull << 63) + 5);
  const GgufValue* i64 = g->find("test.i64");
  REQUIRE(i64);
  CHECK(i64->i == -(int64_t(1) << 62));
  const GgufValue* f64 = g->find("test.f64");
  REQUIRE(f64);
  CHECK(f64->type == GgufType::F64);
  CHECK(f64->f == 1e-300);
  bool b = false;
  REQUIRE(g->get_bool("test.bool", &b, &found).ok());
  CHECK(b);
  const GgufValue* nested = g->find("test.nested");
  REQUIRE(nested);
  REQUIRE(nested->arr.size() == 2);
  CHECK(nested->elem_type == GgufType::ARRAY);
  REQUIRE(nested->arr[0].arr.size() == 2);
  CHECK(nested->arr[0].arr[1].i == 2);
  CHECK(nested->arr[1].arr[0].i == 3);
  int32_t i8 = 0;
  REQUIRE(g->get_i32("test.i8", &i8, &found).ok());
  CHECK(i8 == -7);
  // Integer getters range-check instead of truncating.
  uint32_t u32 = 0;
  Status range = g->get_u32("test.u64", &u32, &found);
  CHECK(range.code() == StatusCode::kInvalidFile);
  CHECK(range.message().find("test.u64") != std::string::npos);
  Status wrong = g->get_u32("test.empty", &u32, &found);
  CHECK(wrong.message().find("has type string") != std::string::npos);

  // head_count as i32 and head_count_kv as u16 import like u32; tensors at 64-byte alignment.
  const std::string out = convert_fixture("tiny_edge");
  std::unique_ptr<ModelFile> mf;
  REQUIRE(ModelFile::open(out, &mf).ok());
  CHECK(mf->spec().config.n_heads == 4);
  CHECK(mf->spec().config.n_kv_heads == 2);
  check_tensors_against_fixture(*mf, read_bytes(data_dir() + "/tiny_edge.gguf"),
                                load_json(data_dir() + "/tiny_edge.json"));
  std::remove(out.c_str());
}

TEST_CASE("GGUF import: unsupported architecture and tensor types are named") {
  ImportOptions o;
  Status s = convert_gguf_to_pkv(data_dir() + "/tiny_gemma.gguf", tmp_path("g.pkv"), o);
  CHECK(s.code() == StatusCode::kUnsupported);
  CHECK(s.message().find("'gemma2'") != std::string::npos);
  // A qwen2 file must carry its q/k/v biases.
  s = convert_gguf_to_pkv(data_dir() + "/tiny_qwen.gguf", tmp_path("q.pkv"), o);
  CHECK(s.code() == StatusCode::kInvalidFile);
  CHECK(s.message().find("'blk.0.attn_q.bias' is missing") != std::string::npos);
  s = convert_gguf_to_pkv(data_dir() + "/tiny_iq4xs.gguf", tmp_path("iq4.pkv"), o);
  CHECK(s.code() == StatusCode::kUnsupported);
  CHECK(s.message().find("'test.iq4_xs'") != std::string::npos);
  CHECK(s.message().find("IQ4_XS") != std::string::npos);
  o.kv_specs = {"5:full"};
  s = convert_gguf_to_pkv(data_dir() + "/tiny.gguf", tmp_path("k.pkv"), o);
  CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK(s.message().find("layer 5 does not exist") != std::string::npos);
}

namespace {

// Byte offset of the tensor-info record of `name` (its u64 length prefix).
size_t find_tensor_record(const std::vector<uint8_t>& b, const std::string& name) {
  std::vector<uint8_t> pat(8);
  uint64_t len = name.size();
  std::memcpy(pat.data(), &len, 8);
  pat.insert(pat.end(), name.begin(), name.end());
  auto it = std::search(b.begin(), b.end(), pat.begin(), pat.end());
  REQUIRE(it != b.end());
  return size_t(it - b.begin());
}

void gguf_case(const char* name, const std::function<void(std::vector<uint8_t>&)>& edit, StatusCode code,
               const std::string& substring) {
  SUBCASE(name) {
    std::vector<uint8_t> b = read_bytes(data_dir() + "/tiny.gguf");
    REQUIRE(b.size() > 1000);
    edit(b);
    std::unique_ptr<GgufFile> g;
    Status s = GgufFile::from_memory(b.data(), b.size(), &g);
    INFO("status: " << s.to_string());
    CHECK_FALSE(s.ok());
    CHECK(s.code() == code);
    CHECK(s.message().find(substring) != std::string::npos);
    // And through the file path, as `phasekv convert` reads it.
    const std::string p = tmp_path("bad.gguf");
    write_bytes(p, b);
    Status s2 = convert_gguf_to_pkv(p, tmp_path("bad_out.pkv"), ImportOptions{});
    CHECK_FALSE(s2.ok());
    std::remove(p.c_str());
  }
}

}  // namespace

TEST_CASE("corrupt GGUF files are rejected with a clear message") {
  const auto F = StatusCode::kInvalidFile;
  gguf_case("empty", [](auto& b) { b.clear(); }, F, "GGUF");
  gguf_case("wrong magic", [](auto& b) { b[0] = 'X'; }, F, "not a GGUF file");
  gguf_case("version 1", [](auto& b) { b[4] = 1; }, StatusCode::kUnsupported, "version 1");
  gguf_case("version 7", [](auto& b) { b[4] = 7; }, StatusCode::kUnsupported, "version 7");
  gguf_case("absurd tensor count", [](auto& b) { std::memset(&b[8], 0x7f, 8); }, F, "tensor count");
  gguf_case("absurd metadata count", [](auto& b) { std::memset(&b[16], 0x7f, 8); }, F, "metadata count");
  gguf_case("key length past the end", [](auto& b) { std::memset(&b[24], 0x7f, 8); }, F, "past the end");
  gguf_case("unknown value type", [](auto& b) {
    uint64_t klen;
    std::memcpy(&klen, &b[24], 8);
    b[32 + klen] = 99;
  }, F, "value type 99");
  gguf_case("five-dimensional tensor", [](auto& b) {
    size_t r = find_tensor_record(b, "token_embd.weight");
    b[r + 8 + 17] = 5;
  }, F, "5 dimensions");
  gguf_case("zero dimension", [](auto& b) {
    size_t r = find_tensor_record(b, "token_embd.weight");
    std::memset(&b[r + 8 + 17 + 4], 0, 8);
  }, F, "implausible");
  gguf_case("misaligned tensor offset", [](auto& b) {
    size_t r = find_tensor_record(b, "output_norm.weight");
    b[r + 8 + 18 + 4 + 8 + 4] += 4;  // n_dims = 1: name, n_dims, ne[0], type, offset
  }, F, "not a multiple of the alignment");
  gguf_case("tensor data past the end", [](auto& b) {
    size_t r = find_tensor_record(b, "output_norm.weight");
    b[r + 8 + 18 + 4 + 8 + 4 + 3] = 0x40;  // offset += 1 GiB
  }, F, "past the end of the file");
  gguf_case("quantized row not a multiple of the block", [](auto& b) {
    size_t r = find_tensor_record(b, "token_embd.weight");
    b[r + 8 + 17 + 4] = 48;  // ne[0] 64 -> 48 for a Q8_0 tensor
  }, F, "not a multiple of the Q8_0 block");
  for (size_t cut : {5, 10, 20, 30, 100, 1000}) {
    const std::string name = "truncated at " + std::to_string(cut);
    gguf_case(name.c_str(), [cut](auto& b) { b.resize(cut); }, F, "truncated");
  }
  gguf_case("truncated inside tensor data", [](auto& b) { b.resize(b.size() - 100); }, F, "past the end of the file");
}

TEST_CASE("SmolLM2-135M-Instruct Q4_1: import matches the gguf package and the model card") {
  const std::string model = PHASEKV_TEST_MODEL_PATH;
  if (model.empty()) {
    MESSAGE("skipped: no SmolLM2 GGUF (configure with -DPHASEKV_TEST_MODEL=PATH)");
    return;
  }
  const json facts = load_json(data_dir() + "/smollm2_facts.json");
  const std::string out = tmp_path("smollm2.pkv");
  ImportOptions o;
  o.kv_specs = {"0-1:full", "2-29:compressed:W=8,S=4,L=64,gate=uniform"};
  Status s = convert_gguf_to_pkv(model, out, o);
  REQUIRE_MESSAGE(s.ok(), s.to_string());
  std::unique_ptr<ModelFile> mf;
  s = ModelFile::open(out, &mf);
  REQUIRE_MESSAGE(s.ok(), s.to_string());
  const ModelSpec& spec = mf->spec();
  const ModelConfig& c = spec.config;
  // Model card facts (hand-checked, independent of any reader).
  CHECK(c.vocab_size == 49152);
  CHECK(c.n_layers == 30);
  CHECK(c.d_model == 576);
  CHECK(c.n_heads == 9);
  CHECK(c.n_kv_heads == 3);
  CHECK(c.head_dim == 64);
  CHECK(c.ffn_dim == 1536);
  CHECK(c.tied_embeddings);
  CHECK(spec.tensors.size() == 272);
  // Against the gguf package's reading of the same file.
  CHECK(c.architecture == facts["architecture"].get<std::string>());
  CHECK(c.vocab_size == facts["vocab_size"].get<uint32_t>());
  CHECK(c.max_positions == facts["max_positions"].get<uint32_t>());
  CHECK(c.rope.theta == facts["rope_theta"].get<float>());
  CHECK(c.norm_eps == facts["norm_eps"].get<float>());
  CHECK(c.bos_id == facts["bos_id"].get<int>());
  CHECK(c.eos_id == facts["eos_id"].get<int>());
  CHECK(spec.tokenizer.tokens.size() == 49152);
  CHECK(spec.tokenizer.merges.size() == facts["n_merges"].get<size_t>());
  CHECK(spec.tokenizer.pre == "smollm");
  CHECK(spec.chat_template == facts["chat_template"].get<std::string>());
  for (auto it = facts["tokens"].begin(); it != facts["tokens"].end(); ++it)
    CHECK(spec.tokenizer.tokens[std::stoul(it.key())] == it.value().get<std::string>());
  CHECK(spec.tokenizer.tokens[0] == "<|endoftext|>");
  CHECK(spec.tokenizer.tokens[1] == "<|im_start|>");
  CHECK(spec.tokenizer.tokens[2] == "<|im_end|>");
  CHECK(spec.layers[1].kind == MemoryKind::Full);
  CHECK(spec.layers[2].kind == MemoryKind::Compressed);
  CHECK(spec.layers[29].stride == 4);

  // Every tensor bit-identical to the GGUF bytes at the offsets gguf's reader reports.
  std::ifstream src(model, std::ios::binary);
  size_t q4_1 = 0, identical = 0;
  std::vector<char> buf;
  for (auto it = facts["tensors"].begin(); it != facts["tensors"].end(); ++it) {
    const TensorInfo* t = mf->find_tensor(it.key());
    REQUIRE(t != nullptr);
    const json& e = it.value();
    std::vector<uint64_t> ne = e["ne"].get<std::vector<uint64_t>>();
    CHECK(t->shape == std::vector<uint64_t>(ne.rbegin(), ne.rend()));
    buf.resize(e["n_bytes"].get<size_t>());
    src.seekg(std::streamoff(e["file_offset"].get<uint64_t>()));
    src.read(buf.data(), std::streamsize(buf.size()));
    REQUIRE(t->size == buf.size());
    if (std::memcmp(mf->tensor_data(*t), buf.data(), buf.size()) == 0) ++identical;
    if (t->dtype == DType::Q4_1) ++q4_1;
  }
  CHECK(identical == 272);
  CHECK(q4_1 == 210);
  std::remove(out.c_str());
}
