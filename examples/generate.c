/* Embedding PhaseKV from plain C: load a model, prefill a prompt, sample a continuation and
 * stream it as UTF-8. Usage: example_generate MODEL.pkv "prompt" [n_tokens] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "phasekv.h"

static int report(pkv_status s, const char* what) {
  fprintf(stderr, "%s failed: %s: %s\n", what, pkv_status_string(s), pkv_last_error());
  return 2;
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s MODEL.pkv PROMPT [N_TOKENS]\n", argv[0]);
    return 2;
  }
  const int n_predict = argc > 3 ? atoi(argv[3]) : 16;
  pkv_model* model = NULL;
  pkv_status s = pkv_model_load(argv[1], &model);
  if (s != PKV_OK) return report(s, "pkv_model_load");

  pkv_context_params cp = pkv_context_default_params();
  cp.n_ctx = 256 < pkv_model_max_positions(model) ? 256 : pkv_model_max_positions(model);
  cp.n_batch = cp.n_ctx;
  pkv_context* ctx = NULL;
  if ((s = pkv_context_init(model, &cp, &ctx)) != PKV_OK) return report(s, "pkv_context_init");

  size_t n = 0;
  int32_t tokens[256];
  s = pkv_tokenize(model, argv[2], strlen(argv[2]), 0, 1, tokens, 256, &n);
  if (s != PKV_OK) return report(s, "pkv_tokenize");
  if ((s = pkv_prefill(ctx, tokens, n)) != PKV_OK) return report(s, "pkv_prefill");

  /* A bad call reports an error and leaves the context usable. */
  if (pkv_prefill(ctx, tokens, 0) != PKV_ERR_INVALID_ARGUMENT) return 1;

  pkv_sampler_params sp = pkv_sampler_default_params();
  sp.temperature = 0.0f; /* greedy */
  pkv_sampler* smp = NULL;
  if ((s = pkv_sampler_init(model, &sp, &smp)) != PKV_OK) return report(s, "pkv_sampler_init");
  pkv_detokenizer* detok = NULL;
  if ((s = pkv_detokenizer_init(model, &detok)) != PKV_OK) return report(s, "pkv_detokenizer_init");

  printf("%s", argv[2]);
  for (int i = 0; i < n_predict && pkv_context_n_past(ctx) < cp.n_ctx; ++i) {
    int32_t t;
    if ((s = pkv_sampler_sample(smp, ctx, &t)) != PKV_OK) return report(s, "pkv_sampler_sample");
    if (pkv_token_is_end(model, t)) break;
    pkv_sampler_accept(smp, t);
    char text[512];
    size_t len = 0;
    if ((s = pkv_detokenizer_push(detok, t, text, sizeof text, &len)) != PKV_OK) return report(s, "detokenize");
    fputs(text, stdout);
    if ((s = pkv_decode(ctx, t)) != PKV_OK) return report(s, "pkv_decode");
  }
  printf("\n[%u tokens in context]\n", pkv_context_n_past(ctx));
  pkv_detokenizer_free(detok);
  pkv_sampler_free(smp);
  pkv_context_free(ctx);
  pkv_model_free(model);
  return 0;
}
