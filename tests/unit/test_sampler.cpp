// Sampler: hand cases, determinism, and sampled frequencies against softmax probabilities
// computed here.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "sampler.h"

using namespace phasekv;

TEST_CASE("greedy picks the argmax, lowest id on ties") {
  SamplerParams p;
  p.temperature = 0.0f;
  Sampler s;
  REQUIRE(Sampler::create(5, p, &s).ok());
  const float l[5] = {0.5f, 2.0f, -1.0f, 2.0f, 1.9f};
  CHECK(s.sample(l) == 1);
}

TEST_CASE("top_k = 1 and a tiny top_p reduce to greedy") {
  const float l[6] = {0.1f, 0.2f, 3.0f, 0.3f, 2.9f, -5.0f};
  SamplerParams p;
  p.temperature = 1.0f;
  p.top_k = 1;
  p.min_p = 0.0f;
  p.top_p = 1.0f;
  Sampler s;
  REQUIRE(Sampler::create(6, p, &s).ok());
  for (int i = 0; i < 50; ++i) CHECK(s.sample(l) == 2);
  p.top_k = 0;
  p.top_p = 0.01f;
  REQUIRE(Sampler::create(6, p, &s).ok());
  for (int i = 0; i < 50; ++i) CHECK(s.sample(l) == 2);
}

TEST_CASE("the same seed gives the same tokens and another seed differs") {
  std::vector<float> l(1000);
  for (int i = 0; i < 1000; ++i) l[size_t(i)] = float(std::sin(i * 0.37) * 3.0);
  SamplerParams p;
  p.temperature = 1.5f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.seed = 7;
  Sampler a, b, c;
  REQUIRE(Sampler::create(1000, p, &a).ok());
  REQUIRE(Sampler::create(1000, p, &b).ok());
  p.seed = 8;
  REQUIRE(Sampler::create(1000, p, &c).ok());
  std::vector<int32_t> ta, tb, tc;
  for (int i = 0; i < 200; ++i) {
    ta.push_back(a.sample(l.data()));
    tb.push_back(b.sample(l.data()));
    tc.push_back(c.sample(l.data()));
  }
  CHECK(ta == tb);
  CHECK(ta != tc);
  a.reset();
  CHECK(a.sample(l.data()) == ta[0]);
}

TEST_CASE("sampled frequencies match softmax(logits / T)") {
  const float l[4] = {1.0f, 0.0f, -1.0f, 0.5f};
  const float T = 0.7f;
  double z = 0, prob[4];
  for (int i = 0; i < 4; ++i) z += std::exp(l[i] / T);
  for (int i = 0; i < 4; ++i) prob[i] = std::exp(l[i] / T) / z;
  SamplerParams p;
  p.temperature = T;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.seed = 123;
  Sampler s;
  REQUIRE(Sampler::create(4, p, &s).ok());
  const int n = 40000;
  int count[4] = {0, 0, 0, 0};
  for (int i = 0; i < n; ++i) ++count[s.sample(l)];
  for (int i = 0; i < 4; ++i) {
    const double sd = std::sqrt(prob[i] * (1 - prob[i]) / n);
    CHECK(std::fabs(double(count[i]) / n - prob[i]) < 5 * sd);
  }
}

TEST_CASE("min_p and top_p cut the tail and the repetition penalty demotes seen tokens") {
  // p ~ [0.64, 0.24, 0.09, 0.03] at T = 1
  const float l[4] = {2.0f, 1.0f, 0.0f, -1.0f};
  SamplerParams p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.2f;  // keeps p >= 0.128: tokens 0 and 1
  Sampler s;
  REQUIRE(Sampler::create(4, p, &s).ok());
  for (int i = 0; i < 300; ++i) CHECK(s.sample(l) <= 1);
  p.min_p = 0.0f;
  p.top_p = 0.7f;  // 0.64 < 0.7 <= 0.64 + 0.24: tokens 0 and 1
  REQUIRE(Sampler::create(4, p, &s).ok());
  for (int i = 0; i < 300; ++i) CHECK(s.sample(l) <= 1);
  p.temperature = 0.0f;
  p.repeat_penalty = 3.0f;  // 2.0 / 3 < 1.0: token 0 loses to token 1 once seen
  REQUIRE(Sampler::create(4, p, &s).ok());
  CHECK(s.sample(l) == 0);
  s.accept(0);
  CHECK(s.sample(l) == 1);
}

TEST_CASE("bad sampler parameters are refused with the name of the field") {
  Sampler s;
  SamplerParams p;
  p.top_p = 0.0f;
  CHECK(Sampler::create(10, p, &s).message().find("top_p") != std::string::npos);
  p = SamplerParams{};
  p.top_k = -1;
  CHECK(Sampler::create(10, p, &s).message().find("top_k") != std::string::npos);
  p = SamplerParams{};
  p.repeat_penalty = 0.0f;
  CHECK(Sampler::create(10, p, &s).message().find("repeat_penalty") != std::string::npos);
}
