// The C++ wrapper (phasekv.hpp) against the installed libphasekv.so: greedy continuation of a
// prompt, printed exactly as examples/generate.c prints it, so the two can be compared.
// Usage: consumer_cpp MODEL.pkv "prompt" [n_tokens]
#include <phasekv.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s MODEL.pkv PROMPT [N_TOKENS]\n", argv[0]);
    return 2;
  }
  const int n_predict = argc > 3 ? std::atoi(argv[3]) : 16;
  try {
    std::fprintf(stderr, "libphasekv %s (CUDA backend: %s)\n", pkv_version_string(), pkv_has_cuda() ? "yes" : "no");
    phasekv::api::Model model(argv[1]);
    pkv_context_params cp = pkv_context_default_params();
    cp.n_ctx = std::min<uint32_t>(256, pkv_model_max_positions(model.get()));
    cp.n_batch = cp.n_ctx;
    phasekv::api::Context ctx(model, cp);
    ctx.prefill(model.tokenize(argv[2], false, true));
    pkv_sampler_params sp = pkv_sampler_default_params();
    sp.temperature = 0.0f;  // greedy
    phasekv::api::Sampler sampler(model, sp);
    pkv_detokenizer* detok = nullptr;
    phasekv::api::check(pkv_detokenizer_init(model.get(), &detok));
    std::printf("%s", argv[2]);
    for (int i = 0; i < n_predict && ctx.n_past() < cp.n_ctx; ++i) {
      const int32_t t = sampler.sample(ctx);
      if (model.is_end(t)) break;
      char text[512];
      size_t len = 0;
      phasekv::api::check(pkv_detokenizer_push(detok, t, text, sizeof text, &len));
      std::fputs(text, stdout);
      ctx.decode(t);
    }
    std::printf("\n[%u tokens in context]\n", ctx.n_past());
    pkv_detokenizer_free(detok);
  } catch (const phasekv::api::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
  return 0;
}
