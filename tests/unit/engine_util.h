// Shared by the engine tests: the SmolLM2 model converted once per test process, and the
// reference fixtures of tests/reference/engine_fixtures.py.
#pragma once

#include <cmath>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "context.h"
#include "gguf_import.h"
#include "test_util.h"

namespace phasekv {
namespace test {

inline bool have_smollm2() { return std::string(PHASEKV_TEST_MODEL_PATH).size() > 0; }

// GGUF -> .pkv (full KV) in the scratch folder, loaded; the mapping outlives the file.
inline std::unique_ptr<Model> convert_and_load(const std::string& gguf, const std::string& name) {
  const std::string out = tmp_path(name);
  Status s = convert_gguf_to_pkv(gguf, out, ImportOptions{});
  PKV_ASSERT(s.ok());
  std::unique_ptr<Model> model;
  s = Model::load(out, &model);
  PKV_ASSERT(s.ok());
  std::remove(out.c_str());
  return model;
}

// SmolLM2 with full KV, converted once per test process (nullptr when no model is configured).
inline const Model* smollm2() {
  static std::unique_ptr<Model> model;
  if (!model && have_smollm2()) model = convert_and_load(PHASEKV_TEST_MODEL_PATH, "smollm2_full.pkv");
  return model.get();
}

// tiny_vocab_gguf() with full KV, converted once per process: for tests of machinery that needs
// the real tokenizer but not a trained model (nullptr when the fixture is missing).
inline const Model* tiny_vocab_model() {
  static std::unique_ptr<Model> model;
  if (!model && std::ifstream(tiny_vocab_gguf()).good())
    model = convert_and_load(tiny_vocab_gguf(), "tiny_qwen3_vocab_full.pkv");
  return model.get();
}

inline std::unique_ptr<Context> make_context(const Model& m, uint32_t n_ctx, uint32_t n_batch, int threads,
                                             const char* kernels = nullptr) {
  ContextParams p;
  p.n_ctx = n_ctx;
  p.n_batch = n_batch;
  p.n_threads = threads;
  p.kernels = kernels;
  std::unique_ptr<Context> c;
  Status s = Context::create(m, p, &c);
  PKV_ASSERT(s.ok());
  return c;
}

inline int32_t argmax(const float* v, int n) {
  int32_t best = 0;
  for (int i = 1; i < n; ++i)
    if (v[i] > v[best]) best = i;
  return best;
}

inline nlohmann::json load_json_file(const std::string& path) {
  std::ifstream f(path);
  PKV_ASSERT(f.good());
  return nlohmann::json::parse(f);
}

inline std::vector<float> load_f32(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::vector<char> b((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<float> v(b.size() / 4);
  std::memcpy(v.data(), b.data(), v.size() * 4);
  return v;
}

inline double rel_l2(const float* a, const float* b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}

}  // namespace test
}  // namespace phasekv
