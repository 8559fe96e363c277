// Static analysis of a model's compressor gates (`phasekv inspect MODEL --gates TEXT`, issue 17):
// how concentrated each compressed layer's gates are over a calibration text, which window
// offsets they favour, and which residues (value-token position mod P) the gates alone predict
// to be weak for the self-test's key = value records.
//
// Definitions (per compressed layer, branch B in {k, v}, KV head h; a vector gate's channels
// each count as one distribution and are averaged):
//   alpha_j       the gate weights of entry j over its W slots (softmax of Z_i x + b_i over the
//                 valid slots), for every complete entry of the calibration text
//   mean_alpha    E_j[alpha_j]                       (the static weight of each offset)
//   N_static      exp(H(mean_alpha))                 (effective offsets of the average gate)
//   N_window      E_j[exp(H(alpha_j))]               (effective offsets of one entry's gate)
//   favoured      offsets whose mean weight is at least 1.5/W, strongest first
// Prediction, for the self-test's records ("key = value": the key token two positions before
// the value): a value token at position p sits in slots i = (p + W - S*m) for the entries that
// hold p; a layer and head can hold a record whose value is at residue r when its value gate
// gives weight to a slot of residue r and its key gate to a slot of residue r - 2:
//   cover(r) = max over layers, heads of min(max_i mean_alpha_k[i of r-2], max_i mean_alpha_v[i of r])
// and residues with cover(r) < 0.5 * max_r cover(r) are predicted weak (P = lcm of the strides).
// A heuristic from the phase paper's mechanism (static, concentrated gates cannot see records
// at other offsets); docs/VALIDATION.md reports how often it agrees with the self-test.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model.h"
#include "status.h"

namespace phasekv {
namespace tools {

struct GateBranchStats {
  uint32_t layer = 0;
  int branch = 0;  // 0 key, 1 value
  int kv_head = 0;
  uint64_t entries = 0;             // complete entries seen (times channels for vector gates)
  std::vector<double> mean_alpha;   // [W]
  double n_static = 0, n_window = 0;
  std::vector<int> favoured;        // offsets, strongest first
};

struct GateAnalysis {
  uint32_t tokens = 0;     // calibration tokens
  uint32_t period = 0;     // P
  std::vector<GateBranchStats> branches;
  std::vector<double> cover;    // [P]
  std::vector<int> predicted_weak;
};

// Runs the calibration text (tokenized with the model's tokenizer, BOS as the tokenizer adds
// it, specials not parsed) through a CPU context in one chunk and collects the statistics.
// kInvalidArgument when the model has no compressed layer or the text is too short to complete
// an entry in every compressed layer; the context's own errors otherwise.
Status analyze_gates(const Model& model, const std::string& text, int n_threads, GateAnalysis* out);

}  // namespace tools
}  // namespace phasekv
