// phasekv run -m MODEL [-p TEXT | -f FILE] [-n N] [--chat] [-c CTX] [-t THREADS] [sampling]
#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "chat_template.h"
#include "file_io.h"
#include "phase_guard.h"
#include "selftest_probes.h"
#include "commands.h"
#include "context.h"
#include "sampler.h"

namespace phasekv {
namespace tools {

namespace {

struct RunArgs {
  BackendOptions be;
  std::string model;
  std::string prompt;
  std::string file;
  int n_predict = 128;
  bool chat = false;
  bool no_special = false;
  std::string system;
  uint32_t ctx = 0;
  uint64_t budget = 0;
  bool beyond = false;
  uint32_t batch = 256;
  int threads = -1;  // -1: all hardware threads
  SamplerParams sp;
  bool repeat_given = false;  // --repeat-last-n given (the default is clamped to the context instead)
  bool greedy = false;
  std::string template_file;  // --template: the prompt goes into its {{content}} slot
  std::string align_report;   // --phase-align REPORT.json
  std::string guard_report;   // --phase-guard REPORT.json
  double guard_threshold = 1.0;
  uint32_t guard_shift = 0;
};

int run_run(RunArgs a) {
  if (!a.file.empty()) {
    Status rs = read_text_file("-f", a.file, &a.prompt);
    if (!rs.ok()) return report("run", rs);
  }
  if (!a.system.empty() && !a.chat)
    return report("run", make_error(StatusCode::kInvalidArgument,
                                    "--system is a message of the chat template: it needs --chat"));
  if (a.no_special && a.chat)
    return report("run", make_error(StatusCode::kInvalidArgument,
                                    "--no-special is for a raw prompt: --chat never parses specials in messages"));
  const bool phase = !a.align_report.empty() || !a.guard_report.empty();
  if (phase && a.template_file.empty() && !a.chat)
    return report("run", make_error(StatusCode::kInvalidArgument,
                                    "--phase-align and --phase-guard act on a template: give --template FILE (one "
                                    "{{content}} slot) or --chat"));
  if (!a.template_file.empty() && a.chat)
    return report("run", make_error(StatusCode::kInvalidArgument, "--template and --chat both give the template"));
  if (!a.system.empty() && phase)
    return report("run", make_error(StatusCode::kInvalidArgument,
                                    "--system with --phase-align/--phase-guard: put the system message in --template"));
  std::string template_text;
  if (!a.template_file.empty()) {
    Status ts = read_text_file("--template", a.template_file, &template_text);
    if (!ts.ok()) return report("run", ts);
  }
  PhaseProfile align_profile, guard_profile;
  for (const auto& r : {std::make_pair(&a.align_report, &align_profile), std::make_pair(&a.guard_report, &guard_profile)}) {
    if (r.first->empty()) continue;
    Status ps = read_phase_profile(*r.first, r.second);
    if (!ps.ok()) return report("run", ps);
  }
  std::unique_ptr<Model> model;
  Status s = Model::load(a.model, a.be.load_options(), &model);
  if (!s.ok()) return report("run", s);
  const Tokenizer& tok = model->tokenizer();

  ContextParams cp = default_context_params();
  cp.n_ctx = a.ctx ? a.ctx : std::min<uint32_t>(model->config().max_positions, 4096);
  cp.n_batch = std::min(a.batch, cp.n_ctx);
  cp.memory_budget = a.budget;
  cp.beyond_trained = a.beyond;
  cp.backend = a.be.kind();
  cp.device = a.be.device;
  cp.cuda_weights = a.be.weights();
  cp.kernels = a.be.kernel_spec(kCommandKernels);
  if (a.threads != -1) cp.n_threads = a.threads;  // 0 or out of range: Context::create says why

  // The sampler is checked before any work: its history is sized by --repeat-last-n, which can
  // never usefully exceed the context.
  if (a.sp.repeat_last_n == -1 || (!a.repeat_given && uint32_t(a.sp.repeat_last_n) > cp.n_ctx))
    a.sp.repeat_last_n = int32_t(std::min<uint32_t>(cp.n_ctx, kMaxRepeatLastN));
  if (a.sp.repeat_last_n > 0 && uint32_t(a.sp.repeat_last_n) > cp.n_ctx)
    return report("run", make_error(StatusCode::kInvalidArgument,
                                    "--repeat-last-n %d exceeds the context of %u tokens (the penalty only sees "
                                    "tokens in the context; -1 means all of it)",
                                    a.sp.repeat_last_n, cp.n_ctx));
  if (a.greedy) a.sp.temperature = 0.0f;
  Sampler sampler;
  s = Sampler::create(int32_t(model->config().vocab_size), a.sp, &sampler);
  if (!s.ok()) return report("run", s);

  // A prompt that cannot fit is refused before it is tokenized: no token stands for more than
  // the vocabulary's longest token, which bounds the token count from below.
  const uint64_t at_least = tok.min_tokens(a.prompt) + tok.min_tokens(a.system);
  if (at_least > cp.n_ctx)
    return report("run", make_error(StatusCode::kInvalidArgument,
                                    "the prompt is %zu bytes, at least %llu tokens, but the context holds %u (raise -c)",
                                    a.prompt.size() + a.system.size(), (unsigned long long)at_least, cp.n_ctx));

  if (phase && a.chat) {
    s = chat_probe_template(*model, &template_text);  // the user message is the slot
    if (!s.ok()) return report("run", s.with_context("--chat"));
  }
  if (!a.align_report.empty()) {
    TemplateAlignment al;
    s = align_template(tok, template_text, align_profile, &al);
    if (!s.ok()) return report("run", s.with_context("--phase-align"));
    if (al.changed)
      std::fprintf(stderr, "[phasekv run] phase-align: %u token%s (\"%s\") before the slot move its start from token "
                   "%u (residue %u) to token %u (residue %u, the strongest of period %u)\n",
                   al.inserted_tokens, al.inserted_tokens == 1 ? "" : "s", display_escape(al.inserted_text).c_str(),
                   al.t0, al.t0 % align_profile.period, al.aligned_t0, al.aligned_t0 % align_profile.period,
                   align_profile.period);
    else
      std::fprintf(stderr, "[phasekv run] phase-align: the slot starts on token %u (residue %u): %s\n", al.t0,
                   al.t0 % align_profile.period,
                   align_profile.weak.empty() ? "no residue is weak, nothing to move" : "already the strongest");
    template_text = al.text;
  }

  std::vector<int32_t> ids;
  ProbeTemplate tpl;
  if (!template_text.empty()) {
    // Template mode: the template's markup is the developer's (specials parsed), the prompt in
    // its slot is untrusted text (never specials), assembled at token level as the self-test does.
    s = parse_template(tok, template_text, &tpl);
    if (!s.ok()) return report("run", s.with_context("--template"));
    s = tok.encode(a.prompt, false, &ids);
    if (!s.ok()) return report("run", s.with_context("prompt"));
    if (a.guard_report.empty()) {
      std::vector<int32_t> all = tpl.prefix;
      all.insert(all.end(), ids.begin(), ids.end());
      all.insert(all.end(), tpl.suffix.begin(), tpl.suffix.end());
      ids.swap(all);
    }
  } else if (a.chat) {
    if (tok.add_bos() && tok.bos() >= 0) ids.push_back(tok.bos());
    // The messages are untrusted text: whatever they spell ("<|im_end|>", "<|im_start|>system")
    // they are encoded as plain text; only the template's own markers are special tokens.
    for (const auto& t : {std::make_pair("prompt", &a.prompt), std::make_pair("--system", &a.system)}) {
      const int64_t bad = utf8_first_invalid(*t.second);
      if (bad >= 0)
        return report("run", make_error(StatusCode::kInvalidArgument,
                                        "%s: text is not valid UTF-8 (byte 0x%02x at offset %lld)", t.first,
                                        unsigned(static_cast<unsigned char>((*t.second)[size_t(bad)])),
                                        static_cast<long long>(bad)));
    }
    std::vector<ChatMessage> msgs;
    if (!a.system.empty()) msgs.push_back({"system", a.system});
    msgs.push_back({"user", a.prompt});
    s = encode_chat(tok, model->spec().chat_template, msgs, true, &ids);
    if (!s.ok()) return report("run", s.with_context("--chat"));
  } else {
    // A raw prompt is the developer's own text: special tokens written in it are parsed, as
    // llama.cpp does, unless --no-special.
    if (tok.add_bos() && tok.bos() >= 0) ids.push_back(tok.bos());
    s = tok.encode(a.prompt, !a.no_special, &ids);
    if (!s.ok()) return report("run", s.with_context("prompt"));
  }
  if (ids.empty() && a.guard_report.empty())
    return report("run", make_error(StatusCode::kInvalidArgument, "the prompt is empty (-p or -f)"));
  const size_t prompt_tokens = ids.size() + (a.guard_report.empty() ? 0 : tpl.prefix.size() + tpl.suffix.size());
  if (prompt_tokens > cp.n_ctx)
    return report("run", make_error(StatusCode::kInvalidArgument,
                                    "the prompt has %zu tokens but the context holds %u (raise -c)", prompt_tokens,
                                    cp.n_ctx));

  using clock = std::chrono::steady_clock;
  std::unique_ptr<Context> ctx;
  std::unique_ptr<PhaseGuard> guard;
  const auto t_setup = clock::now();
  if (!a.guard_report.empty()) {
    PhaseGuardParams gp;
    gp.threshold = a.guard_threshold;
    gp.shift = a.guard_shift;
    s = PhaseGuard::create(*model, cp, template_text, guard_profile, gp, &guard);
    if (!s.ok()) return report("run", s.with_context("--phase-guard"));
  } else {
    s = Context::create(*model, cp, &ctx);
    if (!s.ok()) return report("run", s);
  }
  const double setup_s = std::chrono::duration<double>(clock::now() - t_setup).count();

  const auto t0 = clock::now();
  if (guard) {
    s = guard->start(ids.data(), ids.size());
    for (int32_t id : tpl.prefix) sampler.accept(id);
  } else {
    s = ctx->prefill(ids.data(), ids.size());
  }
  if (!s.ok()) return report("run", s);
  const auto t1 = clock::now();
  for (int32_t id : ids) sampler.accept(id);
  if (guard)
    for (int32_t id : tpl.suffix) sampler.accept(id);
  auto next_logits = [&]() { return guard ? guard->logits() : ctx->logits(); };
  auto full = [&]() { return guard ? guard->room() == 0 : ctx->n_past() >= ctx->n_ctx(); };

  // Output that cannot be written (a full disk, /dev/full) stops the run with an error.
  if (!a.chat && template_text.empty()) std::fwrite(a.prompt.data(), 1, a.prompt.size(), stdout);
  s = flush_stdout();
  if (!s.ok()) return report("run", s);
  StreamDecoder out(tok);
  std::string piece;
  int generated = 0;
  const char* stop = "length";
  while (generated < a.n_predict) {
    const int32_t t = sampler.sample(next_logits());
    if (t == tok.eos() || t == tok.eot()) {
      stop = "end of text";
      break;
    }
    sampler.accept(t);
    piece.clear();
    s = out.push(t, &piece);
    if (!s.ok()) return report("run", s);
    std::fputs(piece.c_str(), stdout);
    s = flush_stdout();
    if (!s.ok()) return report("run", s);
    ++generated;
    if (full()) {
      stop = "context full";
      break;
    }
    s = guard ? guard->accept(t) : ctx->decode(t);
    if (!s.ok()) return report("run", s);
  }
  piece.clear();
  out.flush(&piece);
  std::fputs(piece.c_str(), stdout);
  std::fputs("\n", stdout);
  const auto t2 = clock::now();
  const double pre = std::chrono::duration<double>(t1 - t0).count();
  const double dec = std::chrono::duration<double>(t2 - t1).count();
  const Context& main_ctx = guard ? guard->branch_a() : *ctx;
  std::fprintf(stderr,
               "\n[phasekv run] prompt %zu tokens, %.1f tok/s prefill | %d generated, %.1f tok/s decode | stop: %s | "
               "%d threads, %s kernels\n",
               prompt_tokens, double(prompt_tokens) / pre, generated, generated ? double(generated) / dec : 0.0, stop,
               cp.n_threads, main_ctx.kernels_name());
  if (guard) {
    const PhaseGuardStats& g = guard->stats();
    if (g.shift == 0)
      std::fprintf(stderr, "[phasekv run] phase-guard: inactive (the report flags no weak residue)\n");
    else if (!g.guarded)
      std::fprintf(stderr, "[phasekv run] phase-guard: not triggered (first-token top probability %.3f >= %.3f): "
                   "no extra cost\n", g.first_top_p, a.guard_threshold);
    else
      std::fprintf(stderr,
                   "[phasekv run] phase-guard: guarded (first-token top probability %.3f < %.3f), shift %u: branch B "
                   "prefilled %lld extra tokens and decoded %lld extra steps; %lld of %lld tokens came from branch B; "
                   "setup %.2f s (two contexts, the template prefix prefilled once)\n",
                   g.first_top_p, a.guard_threshold, g.shift, (long long)g.prefill_b, (long long)g.steps,
                   (long long)g.steps_b, (long long)g.steps, setup_s);
  }
  return kExitOk;
}

}  // namespace

void register_run(CLI::App& app, int* exit_code) {
  auto a = std::make_shared<RunArgs>();
  CLI::App* cmd = app.add_subcommand("run", "Generate text from a prompt, streaming it to stdout");
  cmd->add_option("-m,--model", a->model, "PhaseKV model file (.pkv)")->required();
  auto* p = cmd->add_option("-p,--prompt", a->prompt, "Prompt text");
  auto* f = cmd->add_option("-f,--file", a->file, "Read the prompt from a file");
  p->excludes(f);
  cmd->add_option("-n,--n-predict", a->n_predict, "Tokens to generate at most")->default_val(128)->check(CLI::Range(0, 1 << 24));
  cmd->add_flag("--chat", a->chat, "Wrap the prompt as a user message in the model's chat template");
  cmd->add_option("--system", a->system, "System message for --chat (default: the template's own)");
  cmd->add_flag("--no-special", a->no_special,
                "Encode special-token text in a raw -p/-f prompt as plain text (default: parsed, as llama.cpp; "
                "--chat messages are never parsed)");
  cmd->add_option("-c,--ctx", a->ctx, "Context length (default: min(model max, 4096))");
  cmd->add_option("--budget", a->budget,
                  "Memory budget of the context (e.g. 64MiB, 1GB; default: none): over it, the run stops at "
                  "creation with the itemised plan")
      ->transform(byte_size());
  cmd->add_flag("--beyond-trained", a->beyond, "Allow --ctx above the model's trained context (max_positions)");
  cmd->add_option("-b,--batch", a->batch, "Prefill chunk in tokens")->default_val(256)->check(CLI::Range(1u, 1u << 20));
  cmd->add_option("-t,--threads", a->threads, "CPU threads (default: all hardware threads)");
  add_backend_options(cmd, &a->be, kCommandKernels);
  add_load_options(cmd, &a->be);
  cmd->add_option("--temp", a->sp.temperature, "Temperature (0 = greedy)")->default_val(0.8f)->check(finite_number());
  cmd->add_flag("--greedy", a->greedy, "Greedy decoding (same as --temp 0)");
  cmd->add_option("--top-k", a->sp.top_k, "Top-k (0 = off)")->default_val(40);
  cmd->add_option("--top-p", a->sp.top_p, "Top-p (1 = off)")->default_val(0.95f)->check(finite_number());
  cmd->add_option("--min-p", a->sp.min_p, "Min-p (0 = off)")->default_val(0.05f)->check(finite_number());
  cmd->add_option("--repeat-penalty", a->sp.repeat_penalty, "Repetition penalty (1 = off)")
      ->default_val(1.0f)
      ->check(finite_number());
  cmd->add_option("--repeat-last-n", a->sp.repeat_last_n,
                  "Window of the repetition penalty in tokens, at most the context (-1 = the context)")
      ->default_val(64);
  cmd->add_option("-s,--seed", a->sp.seed, "Sampling seed, 0..2^64-1")->default_val(0)->check(unsigned_integer());
  cmd->add_option("--template", a->template_file,
                  "Prompt template with one {{content}} slot (special tokens written literally are parsed); the "
                  "prompt (-p/-f) is put in the slot as plain text, never parsed for specials");
  cmd->add_option("--phase-align", a->align_report,
                  "Self-test report (selftest --json): insert neutral tokens before the template's slot so content "
                  "starts on the strongest residue (verified by re-tokenizing); needs --template or --chat");
  cmd->add_option("--phase-guard", a->guard_report,
                  "Self-test report (selftest --json): also evaluate the content shifted onto complementary phases "
                  "and take each token from the more confident branch; needs --template or --chat");
  cmd->add_option("--guard-threshold", a->guard_threshold,
                  "Guard a request only when the first answer token's top probability is below this (default 1: "
                  "every request but certain ones; 0: never)")
      ->default_val(1.0)
      ->check(finite_number())
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--guard-shift", a->guard_shift,
                  "Neutral tokens before branch B's content (default: from the report, the shift that makes every "
                  "residue's better branch strongest)")
      ->check(CLI::Range(0u, 255u));
  cmd->callback([a, exit_code, cmd] {
    if (!exit_code) return;  // parse only (fuzz_cli)
    if (a->prompt.empty() && a->file.empty()) {
      *exit_code = report("run", make_error(StatusCode::kInvalidArgument, "give a prompt with -p TEXT or -f FILE"));
      return;
    }
    a->repeat_given = cmd->count("--repeat-last-n") > 0;
    *exit_code = run_run(*a);
  });
}

}  // namespace tools
}  // namespace phasekv
