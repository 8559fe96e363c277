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

// A tensor that does not come from the GGUF (compressor gates and maps from --gates).
struct ExtraTensor {
  std::string name;
  DType dtype = DType::F32;
  std::vector<uint64_t> shape;  // outermost first
  std::vector<uint8_t> bytes;   // dtype x shape, row-major
};

struct ImportOptions {
  std::vector<std::string> kv_specs;       // --kv specifications, applied in order (kv_spec.h)
  std::vector<ExtraTensor> extra_tensors;  // added to the model; a name clash with the GGUF is an error
  bool replace = true;                     // convert_gguf_to_pkv: replace an existing output (WriteOptions)
};

// Fills *spec (offsets not yet laid out) and *data (one pointer per tensor: into g's mapping,
// into opts.extra_tensors, or into *owned, which holds tensors the import itself makes, e.g.
// planted gate biases; keep it alive until the file is written).
Status import_gguf(const GgufFile& g, const ImportOptions& opts, ModelSpec* spec, std::vector<const void*>* data,
                   std::vector<std::vector<float>>* owned = nullptr);

// Reads `in_path` (GGUF), imports it and writes `out_path` (.pkv). *spec_out, if given,
// receives the spec as written (with offsets).
Status convert_gguf_to_pkv(const std::string& in_path, const std::string& out_path, const ImportOptions& opts,
                           ModelSpec* spec_out = nullptr);

}  // namespace phasekv
