// Parsing of `--kv` specifications: which attention memory each layer gets.
//
//   SPEC    := [LAYERS ':'] KIND [':' PARAMS]
//   LAYERS  := 'all' | RANGE (',' RANGE)*        RANGE := N | N '-' M   (inclusive)
//   KIND    := 'full' | 'sliding' | 'compressed'
//   PARAMS  := KEY '=' VALUE (',' KEY '=' VALUE)*
//     sliding:    L (required)
//     full:       sink=0|1
//     sliding:    L (required), sink=0|1
//     compressed: W, S (required), L (default S-1), gate=uniform|scalar|vector,
//                 gate_maps=shared|offset, payload=layer|map, payload_maps=shared|offset,
//                 rope=token|entry, entry_norm=0|1, sink=0|1, gap=0|1 (declare L < S-1 intentional),
//                 or, as the LAST parameter, a planted gate (scalar, bias only, written by the converter):
//                   gate=planted:K=k,V=v[,strength=x]      keys pool offset k, values offset v
//                   gate=planted:weak=a[,b...][,strength=x] the listed offsets get ~0 weight
//                 (strength default 10: bias +x on the chosen offset, or -x on the weak ones)
//
// Specs apply in order; later ones override earlier ones for the layers they name.
// Layers that no spec names keep their current memory (full after GGUF import).
#pragma once

#include <string>
#include <vector>

#include "model_spec.h"

namespace phasekv {

// A planted gate requested by a --kv spec (the converter writes its bias tensors).
struct PlantedGate {
  bool on = false;
  int32_t k_offset = -1, v_offset = -1;  // K=k,V=v form
  std::vector<uint32_t> weak;            // weak=a,b form
  float strength = 10.0f;
};

// `planted` (optional) receives one entry per layer (on = false where no planted gate applies).
Status apply_kv_spec(const std::string& spec, std::vector<AttentionMemory>* layers,
                     std::vector<PlantedGate>* planted = nullptr);
Status apply_kv_specs(const std::vector<std::string>& specs, std::vector<AttentionMemory>* layers,
                      std::vector<PlantedGate>* planted = nullptr);

// The gate biases [W, n_kv_heads] of a planted gate, for the K and V branches.
void planted_gate_biases(const PlantedGate& p, uint32_t window, uint32_t n_kv_heads, std::vector<float>* bias_k,
                         std::vector<float>* bias_v);

}  // namespace phasekv
