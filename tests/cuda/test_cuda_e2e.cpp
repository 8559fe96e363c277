// End to end on a GPU, against the CPU backend on the same model file:
//   1. logits at every position of five prompts (token by token, and the whole prompt in one
//      chunk) within --bound relative L2 of the CPU backend;
//   2. 32 greedy tokens per prompt identical (the first divergence and its logit margin otherwise);
//   3. a short self-test on both backends: equal probe_digest and hits per probe (differences listed);
//   4. zero CUDA allocations after context creation — prefill, decode, snapshot/restore, snapshot
//      slots, scoring and the self-test's probe loop — counted by interposing every CUDA runtime
//      allocation entry point in this executable (the counter is proven first).
// Usage: phasekv_cuda_e2e [--model M.pkv | --gguf G.gguf [--kv SPEC] [--gates F.safetensors]]...
//                         [--bound 1e-3] [--decode-only N] [--no-selftest] [--time] [--cuda-weights auto|device|mapped]
//   --time: instead of the checks, prefill and decode times on both backends (informational)
//   (--gguf converts in-process to a temporary .pkv, so a GPU machine needs no phasekv tool)
// Exit 0 all held, 1 something failed, 77 "skipped: no CUDA device".
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "context.h"
#include "gguf_import.h"
#include "model.h"
#include "safetensors.h"
#include "selftest.h"

// ---- allocation counter: every CUDA runtime allocation entry point, forwarded ----------------
static std::atomic<long> g_cuda_allocs{0};
#define PKV_FORWARD(ret, name, params, args)                                         \
  extern "C" ret name params {                                                       \
    g_cuda_allocs++;                                                                 \
    using fn_t = ret(*) params;                                                      \
    static fn_t real = reinterpret_cast<fn_t>(dlsym(RTLD_NEXT, #name));              \
    return real args;                                                                \
  }
PKV_FORWARD(cudaError_t, cudaMalloc, (void** p, size_t n), (p, n))
PKV_FORWARD(cudaError_t, cudaMallocHost, (void** p, size_t n), (p, n))
PKV_FORWARD(cudaError_t, cudaHostAlloc, (void** p, size_t n, unsigned f), (p, n, f))
PKV_FORWARD(cudaError_t, cudaMallocManaged, (void** p, size_t n, unsigned f), (p, n, f))
PKV_FORWARD(cudaError_t, cudaMallocAsync, (void** p, size_t n, cudaStream_t s), (p, n, s))
PKV_FORWARD(cudaError_t, cudaMallocPitch, (void** p, size_t* pitch, size_t w, size_t h), (p, pitch, w, h))
PKV_FORWARD(cudaError_t, cudaMallocFromPoolAsync, (void** p, size_t n, cudaMemPool_t m, cudaStream_t s), (p, n, m, s))

using namespace phasekv;

namespace {

int g_failed = 0;
CudaWeights g_weights = CudaWeights::Auto;
bool g_time = false;
void check(bool ok, const char* what) {
  std::printf("%-4s %s\n", ok ? "ok" : "FAIL", what);
  if (!ok) ++g_failed;
}

struct Prompt {
  const char* name;
  const char* text;
  bool special;
};
const Prompt kPrompts[] = {
    {"plain", "The capital of France is", false},
    {"chat",
     "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
     "<|im_start|>user\nWhat is the tallest mountain in the world?<|im_end|>\n<|im_start|>assistant\n",
     true},
    {"code", "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n    if n < 2:\n        return n\n    return",
     false},
    {"nonenglish", "La tour Eiffel se trouve \xc3\xa0 Paris. \xe4\xb8\x9c\xe4\xba\xac\xe6\x98\xaf\xe6\x97\xa5\xe6\x9c\xac"
                   "\xe7\x9a\x84\xe9\xa6\x96\xe9\x83\xbd\xe3\x80\x82",
     false},
    {"digits", "Count: 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12... and then {\"x\": [3.14, -2e5]} ->", false},
};

double rel_l2(const float* a, const float* b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

int32_t argmax(const float* l, size_t n, float* margin) {
  size_t best = 0, second = n > 1 ? 1 : 0;
  for (size_t i = 1; i < n; ++i)
    if (l[i] > l[best]) best = i;
  for (size_t i = 0; i < n; ++i)
    if (i != best && (second == best || l[i] > l[second])) second = i;
  if (margin) *margin = l[best] - l[second];
  return int32_t(best);
}

bool create(const Model& m, BackendKind k, std::unique_ptr<Context>* out, uint32_t slots = 1) {
  ContextParams p = default_context_params();
  p.n_ctx = 512;
  p.n_batch = 64;
  p.n_threads = 2;
  p.backend = k;
  p.cuda_weights = g_weights;
  p.snapshot_slots = slots;
  Status s = Context::create(m, p, out);
  if (!s.ok()) std::printf("FAIL context (%s): %s\n", backend_kind_name(k), s.to_string().c_str());
  return s.ok();
}

// --time: prefill of 256 tokens (chunks of n_batch 64) and 128 decode steps of a fixed token
// sequence, on each backend, median of 3 (the first pass warms up). Informational: prints, asserts
// nothing but that the steps ran.
void time_backends(const Model& model, Context& cpu, Context& gpu) {
  std::vector<int32_t> one, ids;
  (void)model.tokenizer().encode(kPrompts[1].text, true, &one);
  while (ids.size() < 256) ids.insert(ids.end(), one.begin(), one.end());
  ids.resize(256);
  for (Context* c : {&gpu, &cpu}) {
    std::vector<double> pre, dec;
    bool ok = true;
    for (int rep = 0; rep < 4 && ok; ++rep) {
      c->reset();
      auto t0 = std::chrono::steady_clock::now();
      ok = c->prefill(ids.data(), ids.size()).ok();
      auto t1 = std::chrono::steady_clock::now();
      for (int i = 0; ok && i < 128; ++i) ok = c->decode(ids[size_t(i)]).ok();
      auto t2 = std::chrono::steady_clock::now();
      if (rep == 0) continue;
      pre.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
      dec.push_back(std::chrono::duration<double, std::milli>(t2 - t1).count());
    }
    if (!ok) {
      check(false, "timing run");
      return;
    }
    std::sort(pre.begin(), pre.end());
    std::sort(dec.begin(), dec.end());
    std::printf("     time %s (%s): prefill 256 tokens %.1f ms (%.0f tok/s), decode 128 tokens %.1f ms (%.0f tok/s, "
                "%.3f ms/token), median of 3\n",
                c == &gpu ? "gpu" : "cpu", c->kernels_name(), pre[1], 256e3 / pre[1], dec[1], 128e3 / dec[1],
                dec[1] / 128);
  }
}

void run_model(const std::string& path, double bound, int decode_only, bool selftest) {
  std::unique_ptr<Model> model;
  Status s = Model::load(path, &model);
  if (!s.ok()) {
    std::printf("FAIL load %s: %s\n", path.c_str(), s.to_string().c_str());
    ++g_failed;
    return;
  }
  std::printf("== %s (%u layers)\n", path.c_str(), model->config().n_layers);
  std::unique_ptr<Context> cpu, gpu;
  if (!create(*model, BackendKind::Cpu, &cpu) || !create(*model, BackendKind::Cuda, &gpu)) {
    ++g_failed;
    return;
  }
  std::printf("     gpu: %s, weights %s (%llu bytes)\n", gpu->kernels_name(), gpu->weights().mode(),
              (unsigned long long)gpu->weights().bytes());
  const size_t V = model->config().vocab_size;
  if (g_time) {
    time_backends(*model, *cpu, *gpu);
    return;
  }
  const long allocs0 = g_cuda_allocs.load();
  char line[512];
  if (decode_only > 0) {  // the sanitizers' run: a 64-token greedy decode
    std::vector<int32_t> ids;
    (void)model->tokenizer().encode(kPrompts[0].text, false, &ids);
    s = gpu->prefill(ids.data(), ids.size());
    for (int i = 0; s.ok() && i < decode_only; ++i) s = gpu->decode(argmax(gpu->logits(), V, nullptr));
    check(s.ok(), s.ok() ? "64-token decode ran" : s.to_string().c_str());
    return;
  }
  for (const Prompt& p : kPrompts) {
    std::vector<int32_t> ids;
    s = model->tokenizer().encode(p.text, p.special, &ids);
    if (!s.ok() || ids.empty()) {
      check(false, "tokenize");
      continue;
    }
    cpu->reset();
    gpu->reset();
    double worst = 0;
    for (size_t i = 0; i < ids.size(); ++i) {
      if (!cpu->decode(ids[i]).ok() || !(s = gpu->decode(ids[i])).ok()) {
        std::printf("FAIL %s: decode: %s\n", p.name, s.to_string().c_str());
        ++g_failed;
        break;
      }
      worst = std::max(worst, rel_l2(gpu->logits(), cpu->logits(), V));
    }
    std::snprintf(line, sizeof line, "%s: logits at all %zu positions, worst rel L2 %.3g (bound %.0e)", p.name,
                  ids.size(), worst, bound);
    check(worst <= bound, line);
    gpu->reset();
    s = gpu->prefill(ids.data(), ids.size());
    const double chunked = s.ok() ? rel_l2(gpu->logits(), cpu->logits(), V) : INFINITY;
    std::snprintf(line, sizeof line, "%s: one-chunk prefill on the GPU vs token by token on the CPU: rel L2 %.3g",
                  p.name, chunked);
    check(chunked <= bound, line);
    // Snapshot / restore and slots must continue bit-identically on the GPU itself.
    std::vector<uint8_t> snap(gpu->snapshot_bytes());
    std::vector<float> before(gpu->logits(), gpu->logits() + V);
    size_t wrote = 0;
    bool snap_ok = gpu->snapshot(snap.data(), snap.size(), &wrote).ok() && gpu->save_slot(0).ok();
    snap_ok = snap_ok && gpu->decode(ids[0]).ok() && gpu->restore(snap.data(), wrote).ok() &&
              std::memcmp(before.data(), gpu->logits(), V * 4) == 0;
    snap_ok = snap_ok && gpu->decode(ids[0]).ok() && gpu->load_slot(0).ok() &&
              std::memcmp(before.data(), gpu->logits(), V * 4) == 0;
    check(snap_ok, (std::string(p.name) + ": snapshot/restore and save_slot/load_slot give back the same logits").c_str());
    // Greedy continuations.
    cpu->reset();
    gpu->reset();
    (void)cpu->prefill(ids.data(), ids.size());
    (void)gpu->prefill(ids.data(), ids.size());
    int diverged = -1;
    float margin = 0;
    for (int i = 0; i < 32; ++i) {
      float m = 0;
      const int32_t a = argmax(cpu->logits(), V, &m), b = argmax(gpu->logits(), V, nullptr);
      if (a != b && diverged < 0) {
        diverged = i;
        margin = m;
      }
      if (diverged >= 0) break;
      if (!cpu->decode(a).ok() || !gpu->decode(b).ok()) break;
    }
    if (diverged < 0) std::snprintf(line, sizeof line, "%s: 32 greedy tokens identical", p.name);
    else std::snprintf(line, sizeof line, "%s: greedy diverges at token %d (CPU top-2 margin %.4g)", p.name, diverged, margin);
    check(diverged < 0, line);
    ScoreResult sc_c, sc_g;
    const bool sc_ok = cpu->score(ids[0], &sc_c).ok() && gpu->score(ids[0], &sc_g).ok() && sc_c.argmax == sc_g.argmax &&
                       std::fabs(sc_c.nll - sc_g.nll) <= 1e-3 * std::max(1.0, std::fabs(sc_c.nll));
    check(sc_ok, (std::string(p.name) + ": gold score (NLL, argmax) agrees").c_str());
  }
  const long allocs = g_cuda_allocs.load() - allocs0;
  std::snprintf(line, sizeof line, "CUDA allocations during prefill/decode/snapshots/slots/score: %ld", allocs);
  check(allocs == 0, line);

  if (!selftest) return;
  SelftestResult rc, rg;
  SelftestOptions o;
  o.probe_tokens = 128;
  o.samples = 4;
  o.n_threads = 2;
  if (!model->spec().layers.empty()) {
    bool any_compressed = false;
    for (const AttentionMemory& m : model->spec().layers) any_compressed |= m.kind == MemoryKind::Compressed;
    if (!any_compressed) o.period = 8;
  }
  s = run_selftest(*model, o, &rc);
  if (!s.ok()) {
    std::printf("FAIL cpu self-test: %s\n", s.to_string().c_str());
    ++g_failed;
    return;
  }
  o.backend = BackendKind::Cuda;
  long at_first_probe = -1;
  o.progress = [&](const SelftestProgress& pr) {
    if (pr.done == 1) at_first_probe = g_cuda_allocs.load();
    return true;  // go on
  };
  s = run_selftest(*model, o, &rg);
  if (!s.ok()) {
    std::printf("FAIL cuda self-test: %s\n", s.to_string().c_str());
    ++g_failed;
    return;
  }
  std::snprintf(line, sizeof line, "self-test probe_digest cpu %016llx cuda %016llx", (unsigned long long)rc.probe_digest,
                (unsigned long long)rg.probe_digest);
  check(rc.probe_digest == rg.probe_digest, line);
  int differ = 0, total = 0;
  for (size_t pi = 0; pi < rc.protocols.size() && pi < rg.protocols.size(); ++pi)
    for (int stage = 0; stage < 2; ++stage) {
      const auto& a = stage ? rc.protocols[pi].stage2 : rc.protocols[pi].stage1;
      const auto& b = stage ? rg.protocols[pi].stage2 : rg.protocols[pi].stage1;
      for (int32_t c = 0; c < a.hit.n_clusters; ++c)
        for (int32_t r = 0; r < a.hit.n_cols; ++r) {
          ++total;
          if (a.hit.at(c, r) != b.hit.at(c, r)) {
            ++differ;
            std::printf("     probe differs: protocol %zu stage %d sample %d residue %d: cpu hit %g nll %.4f, cuda hit %g nll %.4f\n",
                        pi, stage + 1, c, r, a.hit.at(c, r), a.nll.at(c, r), b.hit.at(c, r), b.nll.at(c, r));
          }
        }
    }
  std::snprintf(line, sizeof line, "self-test hits: %d of %d probes differ between CPU and CUDA", differ, total);
  check(differ == 0, line);
  const long loop_allocs = at_first_probe < 0 ? -1 : g_cuda_allocs.load() - at_first_probe;
  std::snprintf(line, sizeof line, "CUDA allocations in the self-test's probe loop (after its first probe): %ld",
                loop_allocs);
  check(loop_allocs == 0, line);
}

}  // namespace

int main(int argc, char** argv) {
  struct Source {
    std::string pkv, gguf, gates;
    std::vector<std::string> kv;
  };
  std::vector<Source> models;
  double bound = 1e-3;
  int decode_only = 0;
  bool selftest = true;
  for (int i = 1; i < argc; ++i) {
    const bool more = i + 1 < argc;
    if (!std::strcmp(argv[i], "--model") && more) models.push_back({argv[++i], "", "", {}});
    else if (!std::strcmp(argv[i], "--gguf") && more) models.push_back({"", argv[++i], "", {}});
    else if (!std::strcmp(argv[i], "--kv") && more && !models.empty()) models.back().kv.push_back(argv[++i]);
    else if (!std::strcmp(argv[i], "--gates") && more && !models.empty()) models.back().gates = argv[++i];
    else if (!std::strcmp(argv[i], "--bound") && more) bound = std::atof(argv[++i]);
    else if (!std::strcmp(argv[i], "--decode-only") && more) decode_only = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--no-selftest")) selftest = false;
    else if (!std::strcmp(argv[i], "--time")) g_time = true;
    else if (!std::strcmp(argv[i], "--cuda-weights") && more && cuda_weights_from_name(argv[i + 1], &g_weights)) ++i;
    else {
      std::printf("usage: %s [--model M.pkv | --gguf G.gguf [--kv SPEC] [--gates F]]... [--bound 1e-3] "
                  "[--decode-only N] [--no-selftest] [--time] [--cuda-weights auto|device|mapped]\n",
                  argv[0]);
      return std::strcmp(argv[i], "--help") ? 2 : 0;
    }
  }
  std::string why;
  if (!cuda_backend_available(&why)) {
    std::printf("skipped: no CUDA device: %s\n", why.c_str());
    return 77;
  }
  // The counter counts: one allocation through the interposed entry point.
  const long c0 = g_cuda_allocs.load();
  void* probe = nullptr;
  if (cudaMalloc(&probe, 256) == cudaSuccess) cudaFree(probe);
  check(g_cuda_allocs.load() == c0 + 1, "the allocation counter sees a cudaMalloc");
  if (models.empty()) {
    std::printf("no --model or --gguf given\n");
    return 2;
  }
  int k = 0;
  for (Source& m : models) {
    if (m.pkv.empty()) {
      ImportOptions opts;
      opts.kv_specs = m.kv;
      if (!m.gates.empty()) {
        Status gs = read_safetensors(m.gates, &opts.extra_tensors);
        if (!gs.ok()) {
          std::printf("FAIL gates %s: %s\n", m.gates.c_str(), gs.to_string().c_str());
          ++g_failed;
          continue;
        }
      }
      m.pkv = "/tmp/phasekv_e2e_" + std::to_string(k++) + ".pkv";
      ModelSpec spec;
      Status cs = convert_gguf_to_pkv(m.gguf, m.pkv, opts, &spec);
      std::string what = "convert " + m.gguf;
      for (const std::string& s : m.kv) what += " --kv " + s;
      if (!m.gates.empty()) what += " --gates " + m.gates;
      check(cs.ok(), cs.ok() ? what.c_str() : (what + ": " + cs.to_string()).c_str());
      if (!cs.ok()) continue;
    }
    run_model(m.pkv, bound, decode_only, selftest);
  }
  std::printf("%d failed\n", g_failed);
  return g_failed ? 1 : 0;
}
