// Randomised damage: thousands of seeded byte flips, truncations and splices of valid
// model and GGUF files. Each must be either accepted or rejected with a message; none may
// crash or read out of bounds (the suite also runs under ASan + UBSan). A short smoke of
// what the libFuzzer targets will do at length.
#include <doctest/doctest.h>

#include <cstring>
#include <random>

#include "gguf_import.h"
#include "test_util.h"

using namespace phasekv;
using namespace phasekv::test;

namespace {

std::vector<uint8_t> mutate(const std::vector<uint8_t>& src, std::mt19937& rng) {
  std::vector<uint8_t> b = src;
  switch (rng() % 4) {
    case 0:  // flip a few bytes anywhere
      for (int i = 0, n = 1 + int(rng() % 8); i < n; ++i) b[rng() % b.size()] ^= uint8_t(1 + rng() % 255);
      break;
    case 1:  // flip bytes in the first 4 KiB (headers, metadata, tensor records)
      for (int i = 0, n = 1 + int(rng() % 8); i < n; ++i) b[rng() % std::min<size_t>(4096, b.size())] = uint8_t(rng());
      break;
    case 2:  // truncate
      b.resize(rng() % b.size());
      break;
    default: {  // overwrite a 64-bit field with an extreme value
      const size_t at = rng() % std::min<size_t>(4096, b.size() - 8);
      const uint64_t vals[] = {0, ~0ull, 1ull << 63, 1ull << 32, 0x7fffffff};
      const uint64_t v = vals[rng() % 5];
      std::memcpy(&b[at], &v, 8);
      break;
    }
  }
  return b;
}

}  // namespace

TEST_CASE("random damage to .pkv files: rejected with a message or accepted, never a crash") {
  TinyModel m = make_tiny_model(23);
  const std::string p = tmp_path("mut_src.pkv");
  REQUIRE(write_model_file(p, m.spec, m.data()).ok());
  const std::vector<uint8_t> src = read_bytes(p);
  std::remove(p.c_str());
  std::mt19937 rng(2026);
  int rejected = 0, accepted = 0;
  for (int i = 0; i < 5000; ++i) {
    const std::vector<uint8_t> b = mutate(src, rng);
    std::unique_ptr<ModelFile> mf;
    Status s = ModelFile::from_memory(b.data(), b.size(), &mf);
    if (s.ok()) {
      ++accepted;
      // Whatever was accepted is consistent: every tensor lies inside the image.
      for (const TensorInfo& t : mf->spec().tensors)
        CHECK(mf->header().blob_offset + t.offset + t.size <= b.size());
    } else {
      ++rejected;
      CHECK(!s.message().empty());
    }
  }
  MESSAGE("5000 damaged .pkv images: " << rejected << " rejected, " << accepted
                                       << " accepted (damage inside tensor bytes is not detectable)");
  CHECK(rejected > 2000);
}

TEST_CASE("random damage to GGUF files: rejected with a message or imported, never a crash") {
  const std::vector<uint8_t> src = read_bytes(data_dir() + "/tiny.gguf");
  REQUIRE(!src.empty());
  std::mt19937 rng(1130);
  int rejected = 0, imported = 0;
  for (int i = 0; i < 5000; ++i) {
    const std::vector<uint8_t> b = mutate(src, rng);
    std::unique_ptr<GgufFile> g;
    Status s = GgufFile::from_memory(b.data(), b.size(), &g);
    if (s.ok()) {
      ModelSpec spec;
      std::vector<const void*> data;
      s = import_gguf(*g, ImportOptions{}, &spec, &data);
      if (s.ok()) {
        uint64_t blob = 0;
        s = layout_tensors(&spec.tensors, &blob);
        if (s.ok()) s = validate_spec(spec, blob);
      }
    }
    if (s.ok()) {
      ++imported;
    } else {
      ++rejected;
      CHECK(!s.message().empty());
    }
  }
  MESSAGE("5000 damaged GGUF images: " << rejected << " rejected, " << imported << " imported");
  CHECK(rejected > 2000);
}
