#include "read_bandwidth.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace phasekv {
namespace tools {

namespace {

#if defined(__x86_64__)
// Four independent 256-bit accumulators, 128 bytes per iteration: two loads per cycle keep
// far ahead of DRAM, so the memory system, not the loop, sets the time.
__attribute__((target("avx2"))) float read_avx2(const float* p, size_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i + 32 <= n; i += 32) {
    a0 = _mm256_add_ps(a0, _mm256_load_ps(p + i));
    a1 = _mm256_add_ps(a1, _mm256_load_ps(p + i + 8));
    a2 = _mm256_add_ps(a2, _mm256_load_ps(p + i + 16));
    a3 = _mm256_add_ps(a3, _mm256_load_ps(p + i + 24));
  }
  const __m256 s = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
  float out[8];
  _mm256_storeu_ps(out, s);
  return out[0] + out[1] + out[2] + out[3] + out[4] + out[5] + out[6] + out[7];
}
#endif

float read_scalar(const float* p, size_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (size_t i = 0; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) acc[k] += p[i + size_t(k)];
  float s = 0;
  for (float x : acc) s += x;
  return s;
}

bool have_avx2() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2");
#else
  return false;
#endif
}

// Thread t's slice of n floats, in whole 128-byte steps of the vector loop.
void slice(size_t n, int threads, int t, size_t* a, size_t* b) {
  *a = (n * size_t(t) / size_t(threads)) & ~size_t(31);
  *b = (n * size_t(t + 1) / size_t(threads)) & ~size_t(31);
}

float read_slice(const float* p, size_t n) {
#if defined(__x86_64__)
  static const bool avx2 = have_avx2();
  return avx2 ? read_avx2(p, n) : read_scalar(p, n);
#else
  return read_scalar(p, n);
#endif
}

// Allocates n floats, each thread first-touching its own slice; nullptr on failure.
float* alloc_touched(size_t n, int threads) {
  float* buf = static_cast<float*>(std::aligned_alloc(64, n * sizeof(float)));
  if (!buf) return nullptr;
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t)
    ts.emplace_back([=] {
      size_t a, b;
      slice(n, threads, t, &a, &b);
      for (size_t i = a; i < b; ++i) buf[i] = 1.0f;
    });
  for (auto& th : ts) th.join();
  return buf;
}

// One repetition: every thread reads its slice `passes` times; returns the seconds it took.
double read_once(const float* buf, size_t n, int threads, int passes, std::vector<float>* sums) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t)
    ts.emplace_back([=] {
      size_t a, b;
      slice(n, threads, t, &a, &b);
      for (int k = 0; k < passes; ++k) (*sums)[size_t(t)] += read_slice(buf + a, b - a);
    });
  for (auto& th : ts) th.join();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

const char* loop_name() { return have_avx2() ? "avx2, 4 x 256-bit accumulators" : "scalar, 8 accumulators"; }
}  // namespace

WorkingSetReader::WorkingSetReader(int threads, size_t bytes)
    : threads_(std::max(threads, 1)), bytes_(std::max<size_t>(bytes & ~size_t(127), size_t(1) << 20)) {
  n_ = bytes_ / sizeof(float);
  buf_ = alloc_touched(n_, threads_);
}

WorkingSetReader::~WorkingSetReader() { std::free(buf_); }

double WorkingSetReader::measure(int min_reps, double min_seconds) {
  if (!buf_) return 0;
  std::vector<float> sums(size_t(threads_), 0.0f);
  // 4 passes per repetition, so that starting the threads (~0.1 ms) stays below 1 % of it.
  constexpr int kPasses = 4;
  double best = 0;
  read_once(buf_, n_, threads_, kPasses, &sums);  // warm-up
  const auto start = std::chrono::steady_clock::now();
  for (int rep = 0;
       rep < min_reps ||
       std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < min_seconds;
       ++rep)
    best = std::max(best, double(bytes_) * kPasses / read_once(buf_, n_, threads_, kPasses, &sums) / 1e9);
  for (float x : sums) sink_ += x;  // keeps the reads
  return best;
}

ReadBandwidth measure_read_bandwidth(int threads, size_t working_set) {
  ReadBandwidth r;
  r.loop = loop_name();
  if (working_set > 0) {
    // One warm-up repetition, then the best of at least 20 and 0.5 s.
    WorkingSetReader ws(threads, working_set);
    if (!ws.ok()) return r;
    r.buffer_mib = ws.buffer_mib();
    r.gbs = ws.measure(20, 0.5);
    return r;
  }
  // DRAM: a buffer 8x the last-level cache (at least 512 MiB), best of 5 single passes.
  long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
  if (llc <= 0) llc = sysconf(_SC_LEVEL2_CACHE_SIZE);
  const size_t bytes = std::max<size_t>(size_t(512) << 20, size_t(std::max(llc, 0L)) * 8);
  const size_t n = bytes / sizeof(float);
  float* buf = alloc_touched(n, threads);
  if (!buf) return r;
  r.buffer_mib = double(bytes) / (1 << 20);
  std::vector<float> sums(size_t(threads), 0.0f);
  for (int rep = 0; rep < 5; ++rep) r.gbs = std::max(r.gbs, double(bytes) / read_once(buf, n, threads, 1, &sums) / 1e9);
  float total = 0;
  for (float x : sums) total += x;
  if (total < 0) r.gbs = 0;  // keeps the sums alive (never true: every element is 1)
  std::free(buf);
  return r;
}

}  // namespace tools
}  // namespace phasekv
