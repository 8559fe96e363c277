// Corrupt model files: each is rejected with a clear message naming the field or value,
// never a crash (this suite also runs under ASan + UBSan in CI).
#include <doctest/doctest.h>

#include <cstring>
#include <functional>

#include "test_util.h"

using namespace phasekv;
using namespace phasekv::test;

namespace {

struct Expect {
  StatusCode code;
  std::string substring;
};

// Opens `path` both through mmap and from memory; both must fail the same way.
void check_rejected(const std::string& path, const Expect& e) {
  std::unique_ptr<ModelFile> mf;
  Status s = ModelFile::open(path, &mf);
  INFO("status: " << s.to_string());
  CHECK_FALSE(s.ok());
  CHECK(mf == nullptr);
  CHECK(s.code() == e.code);
  CHECK_MESSAGE(s.message().find(e.substring) != std::string::npos, "expected '" << e.substring << "'");
  std::vector<uint8_t> img = read_bytes(path);
  std::unique_ptr<ModelFile> mm;
  Status s2 = ModelFile::from_memory(img.data(), img.size(), &mm);
  CHECK_FALSE(s2.ok());
  CHECK(s2.code() == e.code);
}

// A valid tiny model, written and read back as bytes.
std::vector<uint8_t> valid_image(FileHeader* h) {
  TinyModel m = make_tiny_model(11);
  const std::string p = tmp_path("valid.pkv");
  REQUIRE(write_model_file(p, m.spec, m.data()).ok());
  std::vector<uint8_t> img = read_bytes(p);
  std::remove(p.c_str());
  std::memcpy(h, img.data(), sizeof(FileHeader));
  return img;
}

void byte_case(const char* name, const std::function<void(std::vector<uint8_t>&, const FileHeader&)>& edit,
               const Expect& e) {
  SUBCASE(name) {
    FileHeader h;
    std::vector<uint8_t> img = valid_image(&h);
    edit(img, h);
    const std::string p = tmp_path("bad.pkv");
    write_bytes(p, img);
    check_rejected(p, e);
    std::remove(p.c_str());
  }
}

void spec_case(const char* name, const std::function<void(ModelSpec&)>& edit, const Expect& e) {
  SUBCASE(name) {
    TinyModel m = make_tiny_model(13);
    edit(m.spec);
    const std::string p = tmp_path("badspec.pkv");
    WriteOptions o;
    o.validate = false;
    Status ws = write_model_file(p, m.spec, std::vector<const void*>(m.spec.tensors.size(), nullptr), o);
    REQUIRE_MESSAGE(ws.ok(), ws.to_string());
    check_rejected(p, e);
    std::remove(p.c_str());
  }
}

// Tensor placement edits need the writer to keep the given offsets and sizes.
void layout_case(const char* name, const std::function<void(std::vector<TensorInfo>&)>& edit, const Expect& e) {
  SUBCASE(name) {
    TinyModel m = make_tiny_model(17);
    uint64_t blob = 0;
    REQUIRE(layout_tensors(&m.spec.tensors, &blob).ok());
    edit(m.spec.tensors);
    const std::string p = tmp_path("badlayout.pkv");
    WriteOptions o;
    o.validate = false;
    o.keep_layout = true;
    o.blob_size = blob;
    REQUIRE(write_model_file(p, m.spec, std::vector<const void*>(m.spec.tensors.size(), nullptr), o).ok());
    check_rejected(p, e);
    std::remove(p.c_str());
  }
}

TensorInfo& named(std::vector<TensorInfo>& ts, const std::string& n) {
  for (auto& t : ts)
    if (t.name == n) return t;
  PKV_ASSERT(!"no such tensor");
  return ts[0];
}

}  // namespace

TEST_CASE("corrupt model files are rejected with a message naming the fault") {
  const auto F = StatusCode::kInvalidFile;
  // ---- Byte-level damage ----
  byte_case("empty file", [](auto& b, auto&) { b.clear(); }, {F, "shorter than the 64-byte header"});
  byte_case("truncated inside the header", [](auto& b, auto&) { b.resize(30); }, {F, "shorter than the 64-byte header"});
  byte_case("truncated inside the metadata", [](auto& b, auto& h) { b.resize(h.meta_offset + h.meta_size / 2); },
            {F, "truncated: metadata ends"});
  byte_case("truncated inside the tensor blob", [](auto& b, auto& h) { b.resize(h.blob_offset + h.blob_size / 2); },
            {F, "truncated: the tensor blob ends"});
  byte_case("truncated by one byte", [](auto& b, auto&) { b.pop_back(); }, {F, "truncated"});
  byte_case("trailing bytes", [](auto& b, auto&) { b.push_back(0); }, {F, "after the tensor blob"});
  byte_case("wrong magic", [](auto& b, auto&) { b[0] = 'X'; }, {F, "header.magic"});
  byte_case("a GGUF file given as a model", [](auto& b, auto&) { std::memcpy(b.data(), "GGUF", 4); },
            {F, "phasekv convert"});
  byte_case("future format version", [](auto& b, auto&) { b[8] = 9; }, {StatusCode::kUnsupported, "header.version = 9"});
  byte_case("wrong header size", [](auto& b, auto&) { b[12] = 32; }, {F, "header.header_size = 32"});
  byte_case("absurd metadata size", [](auto& b, auto&) { std::memset(&b[24], 0xff, 8); }, {F, "header.meta_size"});
  byte_case("misaligned blob offset", [](auto& b, auto&) { b[32] += 8; }, {F, "header.blob_offset"});
  byte_case("reserved header bytes set", [](auto& b, auto&) { b[56] = 1; }, {F, "header.reserved"});
  byte_case("garbage metadata", [](auto& b, auto& h) {
    for (uint64_t i = 0; i < h.meta_size; ++i) b[h.meta_offset + i] = uint8_t(i * 37 + 11);
  }, {F, "FlatBuffer failed verification"});
  byte_case("metadata root offset out of range", [](auto& b, auto& h) { std::memset(&b[h.meta_offset], 0xee, 4); },
            {F, "FlatBuffer failed verification"});
  byte_case("wrong file identifier", [](auto& b, auto& h) { b[h.meta_offset + 4] = 'Z'; },
            {F, "FlatBuffer failed verification"});

  // ---- Tensor placement ----
  layout_case("tensor past the end of the blob", [](auto& ts) { named(ts, "output_norm.weight").offset += 1u << 20; },
              {F, "past the end of the tensor blob"});
  layout_case("misaligned tensor offset", [](auto& ts) { named(ts, "blk.0.attn_q.weight").offset += 4; },
              {F, "is not a multiple of 64"});
  layout_case("overlapping tensors", [](auto& ts) { ts[2].offset = ts[1].offset; }, {F, "overlap"});
  layout_case("size != dtype x shape", [](auto& ts) { named(ts, "blk.1.ffn_up.weight").size -= 2; },
              {F, "needs"});
  layout_case("offset + size overflows", [](auto& ts) { named(ts, "blk.2.attn_k.weight").offset = ~0ull - 63; },
              {F, "past the end"});

  // ---- Semantics ----
  layout_case("unknown dtype", [](auto& ts) { named(ts, "blk.0.attn_v.weight").dtype = DType(77); },
              {F, "dtype = 77"});
  spec_case("missing required tensor", [](auto& s) { s.tensors.erase(s.tensors.begin() + 3); },
            {F, "required tensor"});
  spec_case("wrong tensor shape", [](auto& s) { named(s.tensors, "blk.1.attn_k.weight").shape = {64, 64}; },
            {F, "the config implies [32, 64]"});
  layout_case("quantized row not a multiple of 32", [](auto& ts) {
    TensorInfo t; t.name = "extra.odd"; t.dtype = DType::Q4_0; t.shape = {2, 48}; t.offset = 0; t.size = 54;
    ts.push_back(t);
  }, {F, "not a multiple of the Q4_0 block size"});
  spec_case("duplicate tensor name", [](auto& s) { s.tensors.push_back(s.tensors[4]); }, {F, "appears twice"});
  spec_case("five-dimensional tensor", [](auto& s) {
    TensorInfo t; t.name = "extra.5d"; t.dtype = DType::F32; t.shape = {1, 1, 1, 1, 32}; s.tensors.push_back(t);
  }, {F, "5 dimensions"});
  spec_case("absurd d_model", [](auto& s) { s.config.d_model = 1u << 30; }, {F, "config.d_model = 1073741824"});
  spec_case("zero heads", [](auto& s) { s.config.n_heads = 0; }, {F, "config.n_heads = 0"});
  spec_case("heads not a multiple of kv heads", [](auto& s) { s.config.n_kv_heads = 3; },
            {F, "not a multiple of config.n_kv_heads"});
  spec_case("zero vocabulary", [](auto& s) { s.config.vocab_size = 0; }, {F, "config.vocab_size = 0"});
  spec_case("NaN norm epsilon", [](auto& s) { s.config.norm_eps = std::nanf(""); }, {F, "config.norm_eps"});
  spec_case("odd RoPE dimension", [](auto& s) { s.config.rope.dim = 15; }, {F, "config.rope.dim = 15"});
  spec_case("unsupported architecture", [](auto& s) { s.config.architecture = "mamba"; },
            {StatusCode::kUnsupported, "'mamba'"});
  spec_case("bos id out of range", [](auto& s) { s.config.bos_id = 64; }, {F, "config.bos_id = 64"});
  spec_case("layer count != n_layers", [](auto& s) { s.layers.pop_back(); }, {F, "2 memory descriptors"});
  spec_case("compressed L < S-1", [](auto& s) { s.layers[2].local = 2; }, {F, "L = 2 < S-1 = 3"});
  spec_case("compressed W < S", [](auto& s) { s.layers[2].window = 2; }, {F, "window W = 2 is smaller than stride S = 4"});
  spec_case("compressed S = 0", [](auto& s) { s.layers[2].stride = 0; }, {F, "stride S = 0"});
  spec_case("sliding L = 0", [](auto& s) { s.layers[1].local = 0; }, {F, "sliding L = 0"});
  spec_case("full memory with a window", [](auto& s) { s.layers[0].window = 8; }, {F, "full memory has no W/S/L"});
  spec_case("unknown memory kind", [](auto& s) { s.layers[1].kind = MemoryKind(9); }, {F, "memory kind = 9"});
  spec_case("tokenizer larger than the vocabulary", [](auto& s) { s.tokenizer.tokens.push_back("extra"); },
            {F, "tokenizer.tokens has 65 entries"});
  spec_case("token types of the wrong length", [](auto& s) { s.tokenizer.token_types.pop_back(); },
            {F, "tokenizer.token_types has 63"});
  spec_case("tokenizer eos out of range", [](auto& s) { s.tokenizer.eos_id = 500; }, {F, "tokenizer.eos_id = 500"});
}

TEST_CASE("the gap flag makes L < S-1 acceptable") {
  TinyModel m = make_tiny_model(19);
  m.spec.layers[2].local = 0;
  m.spec.layers[2].gap_accepted = true;
  const std::string p = tmp_path("gap.pkv");
  Status s = write_model_file(p, m.spec, m.data());
  REQUIRE_MESSAGE(s.ok(), s.to_string());
  std::unique_ptr<ModelFile> mf;
  CHECK(ModelFile::open(p, &mf).ok());
  CHECK(mf->spec().layers[2].gap_accepted);
  std::remove(p.c_str());
}

TEST_CASE("opening a missing file or a directory is an I/O error naming the path") {
  std::unique_ptr<ModelFile> mf;
  Status s = ModelFile::open("/nonexistent/model.pkv", &mf);
  CHECK(s.code() == StatusCode::kIoError);
  CHECK(s.message().find("/nonexistent/model.pkv") != std::string::npos);
  s = ModelFile::open("/tmp", &mf);
  CHECK(s.code() == StatusCode::kIoError);
}
