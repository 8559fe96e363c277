// Reading compressor tensors (gates, payload maps, entry norms, sinks) from a safetensors
// file for `phasekv convert --gates`. The format: an 8-byte little-endian header length N,
// N bytes of JSON {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__"?},
// then the data (offsets relative to its start, row-major, little-endian).
#pragma once

#include <string>
#include <vector>

#include "gguf_import.h"

namespace phasekv {

// Reads every tensor of `path` (F32, F16 or BF16; names must be compressor tensor names,
// see compressor_tensors() in model_spec.h). Values must be finite. Errors name the tensor
// and field at fault.
Status read_safetensors(const std::string& path, std::vector<ExtraTensor>* out);

}  // namespace phasekv
