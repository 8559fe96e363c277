// Parsing of `--kv` specifications: which attention memory each layer gets.
//
//   SPEC    := [LAYERS ':'] KIND [':' PARAMS]
//   LAYERS  := 'all' | RANGE (',' RANGE)*        RANGE := N | N '-' M   (inclusive)
//   KIND    := 'full' | 'sliding' | 'compressed'
//   PARAMS  := KEY '=' VALUE (',' KEY '=' VALUE)*
//     sliding:    L (required)
//     compressed: W, S (required), L (default S-1), gate=uniform, rope=token|entry,
//                 sink=0|1, gap=0|1 (declare L < S-1 intentional)
//
// Specs apply in order; later ones override earlier ones for the layers they name.
// Layers that no spec names keep their current memory (full after GGUF import).
#pragma once

#include <string>
#include <vector>

#include "model_spec.h"

namespace phasekv {

Status apply_kv_spec(const std::string& spec, std::vector<AttentionMemory>* layers);
Status apply_kv_specs(const std::vector<std::string>& specs, std::vector<AttentionMemory>* layers);

}  // namespace phasekv
