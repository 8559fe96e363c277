// libFuzzer target: the safetensors reader behind `phasekv convert --gates` (read_safetensors).
//
// Input: a whole safetensors file (8-byte little-endian header length, JSON header, data).
// Invariants (docs/FUZZING.md):
//   * a failure is a Status with a known code and a message, never kInternal;
//   * on success every tensor has a compressor tensor's name (blk.N.cmp_*, blk.N.attn_sink),
//     dtype F32, F16 or BF16, bytes = elements x dtype size, and only finite values;
//   * the result does not depend on anything but the bytes: reading twice gives the same.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "safetensors.h"

using namespace phasekv;
using namespace phasekv::fuzz;

namespace {

bool finite_value(DType t, const uint8_t* p) {
  if (t == DType::F32) {
    float v;
    std::memcpy(&v, p, 4);
    return std::isfinite(v);
  }
  uint16_t h;
  std::memcpy(&h, p, 2);
  const uint16_t exp = t == DType::F16 ? 0x7c00 : 0x7f80;
  return (h & exp) != exp;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = input_as_file("fuzz_safetensors", data, size);
  std::vector<ExtraTensor> tensors;
  Status s = read_safetensors(path, &tensors);
  if (!s.ok()) {
    check_error(s, "read_safetensors");
    FUZZ_CHECK(tensors.empty(), "read_safetensors failed but filled its output");
    return 0;
  }
  for (const ExtraTensor& t : tensors) {
    FUZZ_CHECK(t.name.compare(0, 4, "blk.") == 0, "tensor '%s' is not a compressor tensor", t.name.c_str());
    FUZZ_CHECK(t.dtype == DType::F32 || t.dtype == DType::F16 || t.dtype == DType::BF16, "tensor '%s': dtype %s",
               t.name.c_str(), dtype_name(t.dtype));
    uint64_t need = 0;
    FUZZ_CHECK(tensor_byte_size(t.dtype, t.shape, &need).ok(), "tensor '%s': shape without a size", t.name.c_str());
    FUZZ_CHECK(need == t.bytes.size(), "tensor '%s': %zu bytes for %llu", t.name.c_str(), t.bytes.size(),
               (unsigned long long)need);
    const size_t es = t.dtype == DType::F32 ? 4 : 2;
    for (size_t i = 0; i + es <= t.bytes.size(); i += es)
      FUZZ_CHECK(finite_value(t.dtype, t.bytes.data() + i), "tensor '%s' element %zu is not finite", t.name.c_str(),
                 i / es);
  }
  std::vector<ExtraTensor> again;
  FUZZ_CHECK(read_safetensors(path, &again).ok(), "a second read failed");
  FUZZ_CHECK(again.size() == tensors.size(), "a second read gave %zu tensors, not %zu", again.size(), tensors.size());
  for (size_t i = 0; i < again.size(); ++i)
    FUZZ_CHECK(again[i].name == tensors[i].name && again[i].bytes == tensors[i].bytes, "a second read differs");
  return 0;
}
