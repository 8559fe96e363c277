// Model file round trips: what is written is what is read, bit for bit, including tensors
// placed beyond 4 GiB.
#include <doctest/doctest.h>

#include <sys/stat.h>

#include <cstring>

#include "test_util.h"

using namespace phasekv;
using namespace phasekv::test;

TEST_CASE("write -> read gives identical config, layers, tokenizer, template, provenance and tensor bytes") {
  TinyModel m = make_tiny_model(7);
  const std::string path = tmp_path("roundtrip.pkv");
  REQUIRE(write_model_file(path, m.spec, m.data()).ok());

  std::unique_ptr<ModelFile> mf;
  Status s = ModelFile::open(path, &mf);
  REQUIRE_MESSAGE(s.ok(), s.to_string());
  const ModelSpec& r = mf->spec();
  CHECK(r.config == m.spec.config);
  CHECK(r.layers == m.spec.layers);
  CHECK(r.tokenizer == m.spec.tokenizer);
  CHECK(r.tokenizer.tokens[5] == "日本🚀");
  CHECK(r.tokenizer.tokens[6] == "");
  CHECK(r.chat_template == m.spec.chat_template);
  CHECK(r.provenance == m.spec.provenance);
  REQUIRE(r.tensors.size() == m.spec.tensors.size());
  for (size_t i = 0; i < r.tensors.size(); ++i) {
    const TensorInfo& t = r.tensors[i];
    CHECK(t.name == m.spec.tensors[i].name);
    CHECK(t.dtype == m.spec.tensors[i].dtype);
    CHECK(t.shape == m.spec.tensors[i].shape);
    CHECK(t.offset % kTensorAlign == 0);
    REQUIRE(t.size == m.bytes[i].size());
    CHECK(std::memcmp(mf->tensor_data(t), m.bytes[i].data(), t.size) == 0);
    // In place: the pointer lies inside the mapping and is 64-byte aligned.
    CHECK(reinterpret_cast<uintptr_t>(mf->tensor_data(t)) % 64 == 0);
  }
  CHECK(mf->header().blob_offset % kBlobAlign == 0);
  CHECK(mf->file_size() == mf->header().blob_offset + mf->header().blob_size);

  // The in-memory path reads the same file image identically.
  std::vector<uint8_t> img = read_bytes(path);
  std::unique_ptr<ModelFile> mm;
  REQUIRE(ModelFile::from_memory(img.data(), img.size(), &mm).ok());
  CHECK(mm->spec().config == r.config);
  CHECK(mm->spec().tensors == r.tensors);
  std::remove(path.c_str());
}

TEST_CASE("a tensor at a blob offset beyond 4 GiB is represented and verified (sparse file)") {
  TinyModel m = make_tiny_model(3);
  // A 4.5 GiB hole tensor first (written as a hole, never touched), then the model's tensors.
  TensorInfo hole;
  hole.name = "test.hole";
  hole.dtype = DType::F32;
  hole.shape = {9, 1ull << 27};  // 9 * 2^27 * 4 bytes = 4.5 GiB
  m.spec.tensors.insert(m.spec.tensors.begin(), hole);
  std::vector<const void*> data = m.data();
  data.insert(data.begin(), nullptr);
  const std::string path = tmp_path("big.pkv");
  Status ws = write_model_file(path, m.spec, data);
  REQUIRE_MESSAGE(ws.ok(), ws.to_string());
  struct stat st;
  REQUIRE(stat(path.c_str(), &st) == 0);
  CHECK(uint64_t(st.st_size) > (4ull << 30));
  CHECK(uint64_t(st.st_blocks) * 512 < (64ull << 20));  // sparse: the hole takes no disk

  std::unique_ptr<ModelFile> mf;
  Status s = ModelFile::open(path, &mf);
  REQUIRE_MESSAGE(s.ok(), s.to_string());
  const TensorInfo* embd = mf->find_tensor("token_embd.weight");
  REQUIRE(embd != nullptr);
  CHECK(embd->offset > (4ull << 30));
  CHECK(embd->offset == 9ull * (1ull << 29));  // right after the 64-aligned hole
  CHECK(std::memcmp(mf->tensor_data(*embd), m.bytes[0].data(), embd->size) == 0);
  const TensorInfo& last = mf->spec().tensors.back();
  CHECK(std::memcmp(mf->tensor_data(last), m.bytes.back().data(), last.size) == 0);
  mf.reset();
  std::remove(path.c_str());
}

TEST_CASE("writer: failures leave nothing behind and name the problem") {
  TinyModel m = make_tiny_model(2);
  SUBCASE("unwritable directory") {
    Status s = write_model_file("/nonexistent-dir/x.pkv", m.spec, m.data());
    CHECK(s.code() == StatusCode::kIoError);
    CHECK(s.message().find("/nonexistent-dir/x.pkv") != std::string::npos);
  }
  SUBCASE("invalid spec is refused before any byte is written") {
    m.spec.config.n_kv_heads = 3;  // 4 heads are not a multiple of 3
    const std::string path = tmp_path("refused.pkv");
    Status s = write_model_file(path, m.spec, m.data());
    CHECK(s.code() == StatusCode::kInvalidFile);
    CHECK(s.message().find("n_kv_heads") != std::string::npos);
    struct stat st;
    CHECK(stat(path.c_str(), &st) != 0);
    CHECK(stat((path + ".partial").c_str(), &st) != 0);
  }
  SUBCASE("data pointer count must match") {
    std::vector<const void*> d = m.data();
    d.pop_back();
    CHECK(write_model_file(tmp_path("n.pkv"), m.spec, d).code() == StatusCode::kInvalidArgument);
  }
}

TEST_CASE("layout_tensors: 64-byte aligned offsets in order, sizes from dtype x shape") {
  std::vector<TensorInfo> ts(3);
  ts[0].name = "a"; ts[0].dtype = DType::F32; ts[0].shape = {3};        // 12 bytes
  ts[1].name = "b"; ts[1].dtype = DType::Q4_1; ts[1].shape = {2, 32};   // 40 bytes
  ts[2].name = "c"; ts[2].dtype = DType::F16; ts[2].shape = {100};      // 200 bytes
  uint64_t blob = 0;
  REQUIRE(layout_tensors(&ts, &blob).ok());
  CHECK(ts[0].offset == 0);
  CHECK(ts[0].size == 12);
  CHECK(ts[1].offset == 64);
  CHECK(ts[1].size == 40);
  CHECK(ts[2].offset == 128);
  CHECK(ts[2].size == 200);
  CHECK(blob == 328);
}
