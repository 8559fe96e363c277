// phasekv bench -m MODEL [-p 512] [-n 128] [-d DEPTH] [-c CTX] [-t T] [-r 5] [--json]
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "context.h"
#include "read_bandwidth.h"

namespace phasekv {
namespace tools {

namespace {

struct BenchArgs {
  BackendOptions be;
  std::string model;
  int n_prompt = 512;
  int n_gen = 128;
  int threads = -1;
  int reps = 5;
  uint32_t batch = 512;
  uint32_t ctx = 0;
  int depth = 0;
  bool beyond = false;
  bool json = false;
};

// Resident set size now (bytes), from /proc/self/statm.
// Resident pages that are not a file's (statm's resident less shared): a context's arena and
// scratch, and weight copies -- not the mapped model file's pages, which a copy may drop.
uint64_t current_anon_rss() {
  std::ifstream f("/proc/self/statm");
  uint64_t size = 0, resident = 0, shared = 0;
  f >> size >> resident >> shared;
  return (resident > shared ? resident - shared : 0) * uint64_t(sysconf(_SC_PAGESIZE));
}

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) == 0 || line.rfind("Model", 0) == 0) {
      const size_t c = line.find(':');
      if (c != std::string::npos) return line.substr(c + 2);
    }
  }
  return "unknown";
}

struct Stats {
  double mean = 0, sd = 0;
};
Stats stats(const std::vector<double>& v) {
  Stats s;
  for (double x : v) s.mean += x;
  s.mean /= double(v.size());
  for (double x : v) s.sd += (x - s.mean) * (x - s.mean);
  s.sd = v.size() > 1 ? std::sqrt(s.sd / double(v.size() - 1)) : 0.0;
  return s;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : 0.5 * (v[h - 1] + v[h]);
}

int run_bench(const BenchArgs& a) {
  std::unique_ptr<Model> model;
  Status s = Model::load(a.model, a.be.load_options(), &model);
  if (!s.ok()) return report("bench", s);
  ContextParams cp = default_context_params();
  if (a.threads != -1) cp.n_threads = a.threads;
  cp.n_ctx = a.ctx ? a.ctx : uint32_t(std::max({a.n_prompt, a.depth + a.n_gen, 1}));
  if (uint64_t(a.depth) + uint64_t(a.n_gen) > cp.n_ctx || uint32_t(a.n_prompt) > cp.n_ctx)
    return report("bench", make_error(StatusCode::kInvalidArgument,
                                      "--ctx %u is too small for -p %d or --depth %d + -n %d", cp.n_ctx, a.n_prompt,
                                      a.depth, a.n_gen));
  cp.n_batch = std::min<uint32_t>(a.batch, cp.n_ctx);
  cp.beyond_trained = a.beyond;
  cp.backend = a.be.kind();
  cp.device = a.be.device;
  cp.cuda_weights = a.be.weights();
  cp.kernels = a.be.kernel_spec(kCommandKernels);
  std::unique_ptr<Context> ctx;
  const uint64_t rss_before = current_anon_rss();
  s = Context::create(*model, cp, &ctx);
  if (!s.ok()) return report("bench", s);
  // Every arena page is touched at creation, so the growth of the resident pages that are not the
  // model file's is the context's real footprint -- plus the weight copies the model's first
  // context of a kind makes then (the CPU's R4 copies in the q8 modes, cpu_kernels.h
  // WeightLayout), counted apart: they are the model's, shared.
  const uint64_t anon_after = current_anon_rss();
  const uint64_t rss_grown = anon_after > rss_before ? anon_after - rss_before : 0;
  const uint64_t weights_copy = ctx->weights().space() == MemorySpace::Host ? ctx->weights().bytes() : 0;
  const uint64_t rss_context = rss_grown > weights_copy ? rss_grown - weights_copy : 0;
  const MemoryPlan& plan = ctx->plan();

  // Random non-special tokens (tokenization and sampling are not part of the timings).
  std::mt19937 rng(1234);
  const Tokenizer& tok = model->tokenizer();
  std::vector<int32_t> prompt;
  while (prompt.size() < size_t(std::max({a.n_prompt, a.n_gen, 1}))) {
    const int32_t t = int32_t(rng() % model->config().vocab_size);
    if (!tok.is_special(t)) prompt.push_back(t);
  }
  using clock = std::chrono::steady_clock;
  auto time_prefill = [&]() {
    ctx->reset();
    const auto t0 = clock::now();
    Status st = ctx->prefill(prompt.data(), size_t(a.n_prompt));
    PKV_ASSERT(st.ok());
    return std::chrono::duration<double>(clock::now() - t0).count();
  };
  // Decode at depth: prefill `depth` tokens once, snapshot, and restore before every run.
  std::vector<uint8_t> depth_state;
  if (a.depth > 0 && a.n_gen > 0) {
    std::vector<int32_t> fill;
    while (fill.size() < size_t(a.depth)) fill.push_back(prompt[fill.size() % prompt.size()]);
    if (!a.json) std::fprintf(stderr, "filling the context to depth %d...\n", a.depth);
    Status st = ctx->prefill(fill.data(), fill.size());
    if (!st.ok()) return report("bench", st);
    depth_state.resize(ctx->snapshot_bytes());
    st = ctx->snapshot(depth_state.data(), depth_state.size());
    if (!st.ok()) return report("bench", st);
  }
  auto time_decode = [&]() {
    if (depth_state.empty()) ctx->reset();
    else PKV_ASSERT(ctx->restore(depth_state.data(), depth_state.size()).ok());
    const auto t0 = clock::now();
    for (int i = 0; i < a.n_gen; ++i) {
      Status st = ctx->decode(prompt[size_t(i) % prompt.size()]);
      PKV_ASSERT(st.ok());
    }
    return std::chrono::duration<double>(clock::now() - t0).count();
  };
  std::vector<double> pp, tg;
  if (a.n_prompt > 0) {
    time_prefill();  // warm-up
    for (int r = 0; r < a.reps; ++r) pp.push_back(double(a.n_prompt) / time_prefill());
    if (!a.json) std::fprintf(stderr, "pp%d done\n", a.n_prompt);
  }
  if (a.n_gen > 0) {
    time_decode();
    for (int r = 0; r < a.reps; ++r) tg.push_back(double(a.n_gen) / time_decode());
  }
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  const uint64_t peak_rss = uint64_t(ru.ru_maxrss) * 1024;
  // Bytes a decode step reads: every matmul weight once, plus one embedding row.
  uint64_t per_token = 0;
  for (uint32_t l = 0; l < model->config().n_layers; ++l) {
    const Model::Layer& L = model->layer(int(l));
    for (const WeightView* w : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down})
      per_token += w->row_bytes * uint64_t(w->rows);
  }
  per_token += model->output().row_bytes * uint64_t(model->output().rows) + model->token_embd().row_bytes;
  // The roofline divides by the faster of two read loops on the same threads: over DRAM (a
  // buffer 8x the last-level cache) and over a buffer the size of decode's working set, re-read
  // as decode re-reads its weights. Where the weights fit (in part) in the last-level cache --
  // SmolLM2's 92 MiB on a CPU with 260 MiB of L3 -- the second is the honest ceiling.
  const ReadBandwidth bw_dram = measure_read_bandwidth(cp.n_threads);
  const ReadBandwidth bw_ws = measure_read_bandwidth(cp.n_threads, size_t(per_token));
  const ReadBandwidth& bw = bw_ws.gbs > bw_dram.gbs ? bw_ws : bw_dram;
  const double gbs = bw.gbs;
  const double roofline = gbs * 1e9 / double(per_token);
  // The paired roofline: on the CPU backend, `reps` more decode runs, each followed at once by
  // the working-set loop (best of >= 10 repetitions and 0.25 s) on the same threads; a run's
  // fraction is its tok/s over its own neighbour's ceiling, and the figure is their median. On a
  // shared host the bandwidth drifts with the neighbours and the vCPUs' placement, and a
  // ceiling measured seconds away belongs to another machine (README, "bench"). After the peak
  // RSS above: the loop's buffer is the bench's, not the context's.
  std::vector<double> paired_tok_s, paired_gbs, paired_fraction;
  if (!tg.empty() && std::strcmp(ctx->backend_name(), "cpu") == 0) {
    WorkingSetReader reader(cp.n_threads, size_t(per_token));
    if (reader.ok()) {
      for (int r = 0; r < a.reps; ++r) {
        const double tok_s = double(a.n_gen) / time_decode();
        const double bw_gbs = reader.measure(10, 0.25);
        paired_tok_s.push_back(tok_s);
        paired_gbs.push_back(bw_gbs);
        paired_fraction.push_back(tok_s * double(per_token) / (bw_gbs * 1e9));
      }
    }
  }
  const double paired_median = median(paired_fraction);
  const Stats sp = stats(pp.empty() ? std::vector<double>{0} : pp);
  const Stats sg = stats(tg.empty() ? std::vector<double>{0} : tg);

  if (a.json) {
    nlohmann::json j = {{"model", a.model},
                        {"model_bytes", model->weight_bytes()},
                        {"cpu", cpu_model()},
                        {"threads", cp.n_threads},
                        {"kernels", ctx->kernels_name()},
                        {"n_prompt", a.n_prompt},
                        {"n_gen", a.n_gen},
                        {"depth", a.depth},
                        {"n_ctx", cp.n_ctx},
                        {"memory", {{"kv_bytes_planned", plan.kv_bytes_total},
                                    {"context_bytes_planned", plan.arena_bytes},
                                    {"context_bytes_allocated", ctx->allocated_bytes()},
                                    {"context_rss_bytes_measured", rss_context},
                                    {"weights_copy_bytes", ctx->weights().bytes()},
                                    {"weights_mode", ctx->weights().mode()},
                                    {"scratch_bytes_planned", plan.scratch_bytes},
                                    {"workspace_bytes_planned", plan.workspace_bytes}}},
                        {"reps", a.reps},
                        {"prefill_tok_s", {{"mean", sp.mean}, {"sd", sp.sd}, {"runs", pp}}},
                        {"decode_tok_s", {{"mean", sg.mean}, {"sd", sg.sd}, {"runs", tg}}},
                        {"peak_rss_bytes", peak_rss},
                        {"decode_bytes_per_token", per_token},
                        {"read_bandwidth_gbs", gbs},
                        {"read_bandwidth_loop", bw.loop},
                        {"read_bandwidth_buffer_mib", bw.buffer_mib},
                        {"read_bandwidth_dram_gbs", bw_dram.gbs},
                        {"read_bandwidth_dram_buffer_mib", bw_dram.buffer_mib},
                        {"read_bandwidth_working_set_gbs", bw_ws.gbs},
                        {"read_bandwidth_working_set_mib", bw_ws.buffer_mib},
                        {"decode_roofline_tok_s", roofline},
                        {"decode_roofline_fraction", tg.empty() ? 0.0 : sg.mean / roofline},
                        {"decode_roofline_paired", {{"fraction_median", paired_median},
                                                    {"fractions", paired_fraction},
                                                    {"tok_s", paired_tok_s},
                                                    {"read_bandwidth_gbs", paired_gbs}}}};
    std::printf("%s\n", j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return kExitOk;
  }
  std::printf("model      %s (%.1f MiB of weights)\n", a.model.c_str(), double(model->weight_bytes()) / 1048576.0);
  std::printf("cpu        %s, %d threads, %s kernels\n", cpu_model().c_str(), cp.n_threads, ctx->kernels_name());
  std::printf("context    n_ctx %u: KV planned %llu B (%.1f MiB); context arena planned %llu B, measured RSS growth "
              "at creation %llu B (%.1f MiB)\n",
              cp.n_ctx, (unsigned long long)plan.kv_bytes_total, double(plan.kv_bytes_total) / 1048576.0,
              (unsigned long long)plan.arena_bytes, (unsigned long long)rss_context, double(rss_context) / 1048576.0);
  if (ctx->weights().bytes() > 0)
    std::printf("weights    %s: %.1f MiB (the model's, shared by its contexts; not in the growth above)\n",
                ctx->weights().mode(), double(ctx->weights().bytes()) / 1048576.0);
  if (!pp.empty() || !tg.empty())
    std::printf("| test          | tokens/s            | runs |\n|---------------|---------------------|------|\n");
  if (!pp.empty()) std::printf("| pp%-11d | %8.1f +- %-8.1f | %4d |\n", a.n_prompt, sp.mean, sp.sd, a.reps);
  if (!tg.empty() && a.depth == 0) std::printf("| tg%-11d | %8.1f +- %-8.1f | %4d |\n", a.n_gen, sg.mean, sg.sd, a.reps);
  if (!tg.empty() && a.depth > 0)
    std::printf("| tg%d @ d%-5d | %8.1f +- %-8.1f | %4d |\n", a.n_gen, a.depth, sg.mean, sg.sd, a.reps);
  std::printf("peak RSS   %.1f MiB\n", double(peak_rss) / 1048576.0);
  std::printf("roofline   decode reads %.1f MiB/token; read bandwidth %.1f GB/s (%s, %.0f MiB, %d threads) -> %.1f "
              "tok/s",
              double(per_token) / 1048576.0, gbs, bw.loop, bw.buffer_mib, cp.n_threads, roofline);
  if (!tg.empty()) std::printf("; decode at %.0f %% of it", 100.0 * sg.mean / roofline);
  std::printf("\n           (read loops: DRAM %.1f GB/s over %.0f MiB, decode's working set %.1f GB/s over %.0f MiB; "
              "the roofline takes the faster)\n",
              bw_dram.gbs, bw_dram.buffer_mib, bw_ws.gbs, bw_ws.buffer_mib);
  if (!paired_fraction.empty()) {
    std::printf("           paired: %d more decode runs, each followed by the working-set loop: decode at %.0f %% "
                "(median; runs",
                int(paired_fraction.size()), 100.0 * paired_median);
    for (size_t i = 0; i < paired_fraction.size(); ++i)
      std::printf("%s %.0f %% = %.1f tok/s of %.1f GB/s", i ? "," : "", 100.0 * paired_fraction[i], paired_tok_s[i],
                  paired_gbs[i]);
    std::printf(")\n");
  }
  return kExitOk;
}

}  // namespace

void register_bench(CLI::App& app, int* exit_code) {
  auto a = std::make_shared<BenchArgs>();
  CLI::App* cmd = app.add_subcommand("bench", "Measure prefill and decode speed (tokens/s)");
  cmd->add_option("-m,--model", a->model, "PhaseKV model file (.pkv)")->required();
  cmd->add_option("-p,--n-prompt", a->n_prompt, "Prompt tokens for the prefill test (0 = skip)")
      ->default_val(512)->check(CLI::Range(0, 1 << 20));
  cmd->add_option("-n,--n-gen", a->n_gen, "Tokens for the decode test (0 = skip)")->default_val(128)->check(CLI::Range(0, 1 << 20));
  cmd->add_option("-t,--threads", a->threads, "CPU threads (default: all hardware threads)");
  add_backend_options(cmd, &a->be, kCommandKernels);
  add_load_options(cmd, &a->be);
  cmd->add_option("-r,--reps", a->reps, "Repetitions (after one warm-up)")->default_val(5)->check(CLI::Range(1, 1000));
  cmd->add_option("-b,--batch", a->batch, "Prefill chunk in tokens")->default_val(512)->check(CLI::Range(1u, 1u << 20));
  cmd->add_option("-d,--depth", a->depth, "Tokens already in the context when the decode test starts")
      ->default_val(0)
      ->check(CLI::Range(0, 1 << 24));
  cmd->add_option("-c,--ctx", a->ctx, "Context length (default: what the tests need); -p 0 -n 0 only plans it");
  cmd->add_flag("--beyond-trained", a->beyond, "Allow --ctx above the model's trained context (max_positions)");
  cmd->add_flag("--json", a->json, "Print JSON");
  cmd->callback([a, exit_code] {
    if (!exit_code) return;  // parse only (fuzz_cli)
    if (a->n_prompt == 0 && a->n_gen == 0 && a->ctx == 0) {
      *exit_code = report("bench", make_error(StatusCode::kInvalidArgument,
                                              "-p and -n are both 0 and no --ctx: nothing to time or measure"));
      return;
    }
    *exit_code = run_bench(*a);
  });
}

}  // namespace tools
}  // namespace phasekv
