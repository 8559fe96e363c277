// GGUF -> PhaseKV import: maps a llama-architecture GGUF's metadata, tokenizer and tensors
// onto a ModelSpec. Tensor bytes are referenced in place (quantized blocks stay bit-identical).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "gguf.h"
#include "model_spec.h"

namespace phasekv {

constexpr const char* kConverterVersion = "phasekv-convert 0.1.0";

struct ImportOptions {
  std::vector<std::string> kv_specs;  // --kv specifications, applied in order (kv_spec.h)
};

// Fills *spec (offsets not yet laid out) and *data (pointers into g's mapping, one per tensor).
Status import_gguf(const GgufFile& g, const ImportOptions& opts, ModelSpec* spec, std::vector<const void*>* data);

// Reads `in_path` (GGUF), imports it and writes `out_path` (.pkv). *spec_out, if given,
// receives the spec as written (with offsets).
Status convert_gguf_to_pkv(const std::string& in_path, const std::string& out_path, const ImportOptions& opts,
                           ModelSpec* spec_out = nullptr);

}  // namespace phasekv
