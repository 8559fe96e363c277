// phasekv.hpp: a thin C++ (RAII) wrapper over the C API in phasekv.h. Errors become
// phasekv::api::Error exceptions here, in the application's code, never inside the runtime.
#pragma once

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "phasekv.h"

namespace phasekv {
namespace api {

struct Error : std::runtime_error {
  Error(pkv_status s, const std::string& what) : std::runtime_error(what), status(s) {}
  pkv_status status;
};

inline void check(pkv_status s) {
  if (s != PKV_OK) throw Error(s, std::string(pkv_status_string(s)) + ": " + pkv_last_error());
}

class Model {
 public:
  explicit Model(const std::string& path) : Model(path, pkv_model_default_params()) {}
  Model(const std::string& path, const pkv_model_params& params) {
    pkv_model* m = nullptr;
    check(pkv_model_load_with_params(path.c_str(), &params, &m));
    m_.reset(m);
  }
  const pkv_model* get() const { return m_.get(); }
  int32_t n_vocab() const { return pkv_model_n_vocab(get()); }
  bool is_end(int32_t t) const { return pkv_token_is_end(get(), t) != 0; }
  std::vector<int32_t> tokenize(const std::string& text, bool parse_special, bool add_bos) const {
    size_t n = 0;
    pkv_status s = pkv_tokenize(get(), text.data(), text.size(), parse_special, add_bos, nullptr, 0, &n);
    if (s != PKV_OK && n == 0) check(s);
    std::vector<int32_t> ids(n);
    check(pkv_tokenize(get(), text.data(), text.size(), parse_special, add_bos, ids.data(), ids.size(), &n));
    return ids;
  }

 private:
  struct Free {
    void operator()(pkv_model* m) const { pkv_model_free(m); }
  };
  std::unique_ptr<pkv_model, Free> m_;
};

class Context {
 public:
  Context(const Model& model, const pkv_context_params& p) {
    pkv_context* c = nullptr;
    check(pkv_context_init(model.get(), &p, &c));
    c_.reset(c);
  }
  void prefill(const std::vector<int32_t>& tokens) { check(pkv_prefill(c_.get(), tokens.data(), tokens.size())); }
  void decode(int32_t token) { check(pkv_decode(c_.get(), token)); }
  const float* logits() const { return pkv_logits(c_.get()); }
  uint32_t n_past() const { return pkv_context_n_past(c_.get()); }
  void reset() { pkv_context_reset(c_.get()); }
  const pkv_context* get() const { return c_.get(); }

 private:
  struct Free {
    void operator()(pkv_context* c) const { pkv_context_free(c); }
  };
  std::unique_ptr<pkv_context, Free> c_;
};

class Sampler {
 public:
  Sampler(const Model& model, const pkv_sampler_params& p) {
    pkv_sampler* s = nullptr;
    check(pkv_sampler_init(model.get(), &p, &s));
    s_.reset(s);
  }
  int32_t sample(const Context& ctx) {
    int32_t t = -1;
    check(pkv_sampler_sample(s_.get(), ctx.get(), &t));
    pkv_sampler_accept(s_.get(), t);
    return t;
  }

 private:
  struct Free {
    void operator()(pkv_sampler* s) const { pkv_sampler_free(s); }
  };
  std::unique_ptr<pkv_sampler, Free> s_;
};

}  // namespace api
}  // namespace phasekv
