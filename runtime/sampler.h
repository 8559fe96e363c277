// Token sampling: greedy, temperature, top-k, top-p, min-p and a repetition penalty, with
// its own seeded generator so a given seed gives the same tokens on every platform.
// Buffers are sized for the vocabulary at creation; sample() allocates nothing.
#pragma once

#include <cstdint>
#include <vector>

#include "status.h"

namespace phasekv {

// The longest repetition-penalty window: the history is allocated at creation (4 bytes per
// token), so a hostile value must not become a multi-gigabyte allocation. A million tokens is
// more than any context a device runs.
constexpr int32_t kMaxRepeatLastN = 1 << 20;

struct SamplerParams {
  float temperature = 0.8f;     // 0: greedy (argmax, lowest id on ties); negative or NaN is refused
  int32_t top_k = 40;           // keep the k most likely tokens; 0 = off
  float top_p = 0.95f;          // keep the smallest set with probability mass >= p; 1 = off
  float min_p = 0.05f;          // drop tokens below min_p x the top probability; 0 = off
  float repeat_penalty = 1.0f;  // > 1 discourages tokens seen in the last repeat_last_n; 1 = off
  int32_t repeat_last_n = 64;   // window of the repetition penalty (tokens), 0..kMaxRepeatLastN
  uint64_t seed = 0;            // generator seed
};

class Sampler {
 public:
  static Status create(int32_t n_vocab, const SamplerParams& p, Sampler* out);
  Sampler() = default;

  // Picks the next token from logits[n_vocab] (not modified).
  int32_t sample(const float* logits);
  // Records a token for the repetition penalty (prompt tokens too, if wanted).
  void accept(int32_t token);
  void reset();  // clears history and re-seeds
  const SamplerParams& params() const { return p_; }

 private:
  struct Candidate {
    int32_t id;
    float logit;
    float p;
  };
  double uniform();  // [0, 1)

  SamplerParams p_;
  int32_t n_vocab_ = 0;
  std::vector<Candidate> cand_;   // [n_vocab]
  std::vector<int32_t> history_;  // ring of repeat_last_n
  size_t hist_pos_ = 0, hist_len_ = 0;
  uint64_t state_[4] = {0, 0, 0, 0};  // xoshiro256**
};

}  // namespace phasekv
