#include "sampler.h"

#include <algorithm>
#include <cmath>

namespace phasekv {

namespace {
uint64_t splitmix64(uint64_t* x) {
  uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
// Higher logit first; lower id first on ties: a total order, so results never depend on
// the sort algorithm.
template <class C>
bool by_logit(const C& a, const C& b) { return a.logit > b.logit || (a.logit == b.logit && a.id < b.id); }
}  // namespace

Status Sampler::create(int32_t n_vocab, const SamplerParams& p, Sampler* out) {
  if (n_vocab <= 0) return make_error(StatusCode::kInvalidArgument, "sampler: n_vocab = %d", n_vocab);
  if (!std::isfinite(p.temperature) || p.temperature < 0.0f)
    return make_error(StatusCode::kInvalidArgument, "temperature = %g must be a finite number >= 0 (0 = greedy)",
                      double(p.temperature));
  if (p.top_k < 0) return make_error(StatusCode::kInvalidArgument, "top_k = %d must be >= 0", p.top_k);
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f))
    return make_error(StatusCode::kInvalidArgument, "top_p = %g must be in (0, 1]", double(p.top_p));
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f))
    return make_error(StatusCode::kInvalidArgument, "min_p = %g must be in [0, 1]", double(p.min_p));
  if (!(p.repeat_penalty > 0.0f) || !std::isfinite(p.repeat_penalty))
    return make_error(StatusCode::kInvalidArgument, "repeat_penalty = %g must be > 0", double(p.repeat_penalty));
  if (p.repeat_last_n < 0 || p.repeat_last_n > kMaxRepeatLastN)
    return make_error(StatusCode::kInvalidArgument, "repeat_last_n = %d must be in [0, %d]", p.repeat_last_n,
                      kMaxRepeatLastN);
  Sampler s;
  s.p_ = p;
  s.n_vocab_ = n_vocab;
  s.cand_.resize(size_t(n_vocab));
  s.history_.assign(size_t(p.repeat_last_n), 0);
  s.reset();
  *out = std::move(s);
  return Status::Ok();
}

void Sampler::reset() {
  hist_pos_ = hist_len_ = 0;
  uint64_t x = p_.seed;
  for (uint64_t& w : state_) w = splitmix64(&x);
}

double Sampler::uniform() {
  const uint64_t result = rotl(state_[1] * 5, 7) * 9;
  const uint64_t t = state_[1] << 17;
  state_[2] ^= state_[0];
  state_[3] ^= state_[1];
  state_[1] ^= state_[2];
  state_[0] ^= state_[3];
  state_[2] ^= t;
  state_[3] = rotl(state_[3], 45);
  return double(result >> 11) * (1.0 / 9007199254740992.0);
}

void Sampler::accept(int32_t token) {
  if (history_.empty()) return;
  history_[hist_pos_] = token;
  hist_pos_ = (hist_pos_ + 1) % history_.size();
  hist_len_ = std::min(hist_len_ + 1, history_.size());
}

int32_t Sampler::sample(const float* logits) {
  size_t n = size_t(n_vocab_);
  for (size_t i = 0; i < n; ++i) cand_[i] = Candidate{int32_t(i), logits[i], 0.0f};
  if (p_.repeat_penalty != 1.0f) {
    for (size_t h = 0; h < hist_len_; ++h) {
      const int32_t id = history_[h];
      if (id < 0 || id >= n_vocab_) continue;
      float& l = cand_[size_t(id)].logit;
      // Penalise each distinct token once, even if it repeats in the window.
      bool seen = false;
      for (size_t g = 0; g < h; ++g) seen = seen || history_[g] == id;
      if (!seen) l = l > 0.0f ? l / p_.repeat_penalty : l * p_.repeat_penalty;
    }
  }
  if (p_.temperature <= 0.0f) {
    size_t best = 0;
    for (size_t i = 1; i < n; ++i)
      if (cand_[i].logit > cand_[best].logit) best = i;
    return cand_[best].id;
  }
  if (p_.top_k > 0 && size_t(p_.top_k) < n) {
    std::partial_sort(cand_.begin(), cand_.begin() + p_.top_k, cand_.begin() + long(n),
                      [](const Candidate& a, const Candidate& b) { return by_logit(a, b); });
    n = size_t(p_.top_k);
  } else {
    std::sort(cand_.begin(), cand_.begin() + long(n),
              [](const Candidate& a, const Candidate& b) { return by_logit(a, b); });
  }
  // Softmax with temperature over the sorted candidates (cand_[0] has the highest logit).
  const float mx = cand_[0].logit;
  double sum = 0.0;
  for (size_t i = 0; i < n; ++i) {
    cand_[i].p = std::exp((cand_[i].logit - mx) / p_.temperature);
    sum += cand_[i].p;
  }
  for (size_t i = 0; i < n; ++i) cand_[i].p = float(cand_[i].p / sum);
  if (p_.min_p > 0.0f) {
    const float floor_p = p_.min_p * cand_[0].p;
    size_t keep = 1;
    while (keep < n && cand_[keep].p >= floor_p) ++keep;
    n = keep;
  }
  if (p_.top_p < 1.0f) {
    double cum = 0.0;
    size_t keep = 0;
    while (keep < n) {
      cum += cand_[keep].p;
      ++keep;
      if (cum >= double(p_.top_p)) break;
    }
    n = keep;
  }
  double total = 0.0;
  for (size_t i = 0; i < n; ++i) total += cand_[i].p;
  double r = uniform() * total;
  for (size_t i = 0; i < n; ++i) {
    r -= cand_[i].p;
    if (r < 0.0) return cand_[i].id;
  }
  return cand_[n - 1].id;
}

}  // namespace phasekv
