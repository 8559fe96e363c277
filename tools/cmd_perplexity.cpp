// phasekv perplexity -m MODEL -f FILE [-c N] [--chunks N] [-t THREADS] [--json]
//
// llama.cpp's llama-perplexity protocol (its default, non-strided mode), so figures compare on
// the same text and GGUF: the whole text tokenized once (with BOS when the model adds one);
// chunks of n_ctx consecutive tokens, chunk i = tokens [i n_ctx, (i + 1) n_ctx), its first token
// replaced by BOS when the model adds one; each chunk evaluated from an empty context; only the
// second half scored: the logits at positions j = n_ctx/2 .. n_ctx-2 against token j + 1
// (n_ctx - 1 - n_ctx/2 predictions per chunk), so every scored token has at least n_ctx/2
// tokens of context. PPL = exp(mean NLL); its uncertainty is llama.cpp's: PPL times the standard
// error of the mean NLL. The memory layout is the model file's (a compressed retrofit is a
// convert-time choice: compare two .pkv files of the same GGUF).
#include <sys/stat.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "commands.h"
#include "context.h"

namespace phasekv {
namespace tools {

namespace {

struct PerplexityArgs {
  BackendOptions be;
  std::string model;
  std::string file;
  uint32_t ctx = 512;
  int chunks = -1;  // -1: all
  uint32_t batch = 512;
  int threads = -1;
  bool json = false;
};

int run_perplexity(const PerplexityArgs& a) {
  std::string text;
  Status rs = read_text_file("-f", a.file, &text);
  if (!rs.ok()) return report("perplexity", rs);

  std::unique_ptr<Model> model;
  Status s = Model::load(a.model, a.be.load_options(), &model);
  if (!s.ok()) return report("perplexity", s);
  const Tokenizer& tok = model->tokenizer();
  const bool bos = tok.add_bos() && tok.bos() >= 0;
  std::vector<int32_t> ids;
  if (bos) ids.push_back(tok.bos());
  s = tok.encode(text, false, &ids);
  if (!s.ok()) return report("perplexity", s.with_context("-f"));
  if (a.ctx < 4)
    return report("perplexity", make_error(StatusCode::kInvalidArgument, "-c %u: a chunk needs at least 4 tokens", a.ctx));
  size_t n_chunks = ids.size() / a.ctx;
  if (a.chunks >= 0 && size_t(a.chunks) < n_chunks) n_chunks = size_t(a.chunks);
  if (n_chunks == 0)
    return report("perplexity", make_error(StatusCode::kInvalidArgument,
                                           "'%s' has %zu tokens: one chunk of -c %u needs at least %u (lower -c or give a "
                                           "longer text)",
                                           a.file.c_str(), ids.size(), a.ctx, a.ctx));

  ContextParams cp = default_context_params();
  cp.n_ctx = a.ctx;
  cp.n_batch = std::min(a.batch, a.ctx);
  cp.backend = a.be.kind();
  cp.device = a.be.device;
  cp.cuda_weights = a.be.weights();
  cp.kernels = a.be.kernel_spec(kCommandKernels);
  if (a.threads != -1) cp.n_threads = a.threads;
  std::unique_ptr<Context> ctx;
  s = Context::create(*model, cp, &ctx);
  if (!s.ok()) return report("perplexity", s);

  const uint32_t n = a.ctx, first = n / 2;
  std::vector<int32_t> chunk(n);
  double sum = 0, sum2 = 0;  // NLL and NLL^2 over every scored token so far
  size_t count = 0;
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  if (!a.json)
    std::fprintf(stderr, "[phasekv perplexity] %zu tokens, %zu chunks of %u, scoring %u per chunk\n", ids.size(),
                 n_chunks, n, n - 1 - first);
  for (size_t c = 0; c < n_chunks; ++c) {
    std::copy(ids.begin() + std::ptrdiff_t(c * n), ids.begin() + std::ptrdiff_t((c + 1) * n), chunk.begin());
    if (bos) chunk[0] = tok.bos();
    ctx->reset();
    // Positions 0..first in one prefill; then one token at a time, each scored against the next.
    s = ctx->prefill(chunk.data(), first + 1);
    for (uint32_t j = first; s.ok(); ++j) {
      ScoreResult r;
      s = ctx->score(chunk[j + 1], &r);
      if (!s.ok()) break;
      sum += r.nll;
      sum2 += r.nll * r.nll;
      ++count;
      if (j + 2 >= n) break;
      s = ctx->decode(chunk[j + 1]);
    }
    if (!s.ok()) return report("perplexity", s.with_context("chunk " + std::to_string(c + 1)));
    if (!a.json) {
      const double el = std::chrono::duration<double>(clock::now() - t0).count();
      std::fprintf(stderr, "[%zu]%.4f%s", c + 1, std::exp(sum / double(count)), c + 1 == n_chunks ? "\n" : ",");
      if (c == 0) std::fprintf(stderr, " (%.1f s per chunk) ", el);
      std::fflush(stderr);
    }
  }
  const double mean = sum / double(count);
  // Standard error of the mean NLL (llama.cpp: sqrt((<x^2> - <x>^2) / (N - 1))).
  const double var = count > 1 ? std::max(0.0, sum2 / double(count) - mean * mean) / double(count - 1) : 0.0;
  const double ppl = std::exp(mean), err = ppl * std::sqrt(var);
  const double secs = std::chrono::duration<double>(clock::now() - t0).count();
  if (a.json) {
    std::printf(
        "{\"ppl\": %.9g, \"ppl_error\": %.9g, \"nll_mean\": %.9g, \"tokens\": %zu, \"scored\": %zu, \"chunks\": %zu, "
        "\"n_ctx\": %u, \"bos\": %s, \"kernels\": \"%s\", \"seconds\": %.3f}\n",
        ppl, err, mean, ids.size(), count, n_chunks, n, bos ? "true" : "false", ctx->kernels_name(), secs);
  } else {
    std::printf("Final estimate: PPL = %.4f +/- %.5f\n", ppl, err);
    std::fprintf(stderr, "[phasekv perplexity] %zu tokens scored in %.1f s | %d threads, %s kernels\n", count, secs,
                 cp.n_threads, ctx->kernels_name());
  }
  return kExitOk;
}

}  // namespace

void register_perplexity(CLI::App& app, int* exit_code) {
  auto a = std::make_shared<PerplexityArgs>();
  CLI::App* cmd = app.add_subcommand(
      "perplexity",
      "Perplexity of a model on a text file, by llama-perplexity's chunked protocol (chunks of -c tokens, the "
      "second half of each scored)");
  cmd->add_option("-m,--model", a->model, "PhaseKV model file (.pkv)")->required();
  cmd->add_option("-f,--file", a->file, "The text (UTF-8)")->required();
  cmd->add_option("-c,--ctx", a->ctx, "Chunk length in tokens, as llama-perplexity's -c")->default_val(512)->check(CLI::Range(4u, 1u << 20));
  cmd->add_option("--chunks", a->chunks, "Evaluate at most this many chunks (default: all)")->check(CLI::Range(1, 1 << 30));
  cmd->add_option("-b,--batch", a->batch, "Prefill chunk in tokens")->default_val(512)->check(CLI::Range(1u, 1u << 20));
  cmd->add_option("-t,--threads", a->threads, "CPU threads (default: all hardware threads)");
  cmd->add_flag("--json", a->json, "Print one JSON object (ppl, ppl_error, nll_mean, tokens, scored, chunks, ...)");
  add_backend_options(cmd, &a->be, kCommandKernels);
  add_load_options(cmd, &a->be);
  cmd->callback([a, exit_code] {
    if (!exit_code) return;  // parse only (fuzz_cli)
    *exit_code = run_perplexity(*a);
  });
}

}  // namespace tools
}  // namespace phasekv
