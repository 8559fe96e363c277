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

}  // namespace

ReadBandwidth measure_read_bandwidth(int threads, size_t working_set) {
  ReadBandwidth r;
  long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
  if (llc <= 0) llc = sysconf(_SC_LEVEL2_CACHE_SIZE);
  const size_t bytes = working_set > 0 ? std::max<size_t>(working_set & ~size_t(127), size_t(1) << 20)
                                       : std::max<size_t>(size_t(512) << 20, size_t(std::max(llc, 0L)) * 8);
  const size_t n = bytes / sizeof(float);
  float* buf = static_cast<float*>(std::aligned_alloc(64, n * sizeof(float)));
  if (!buf) return r;
  r.buffer_mib = double(bytes) / (1 << 20);
  const bool avx2 = have_avx2();
  r.loop = avx2 ? "avx2, 4 x 256-bit accumulators" : "scalar, 8 accumulators";
  auto slice = [&](int t, size_t* a, size_t* b) {
    *a = (n * size_t(t) / size_t(threads)) & ~size_t(31);
    *b = (n * size_t(t + 1) / size_t(threads)) & ~size_t(31);
  };
  {  // each thread first-touches its own slice
    std::vector<std::thread> ts;
    for (int t = 0; t < threads; ++t)
      ts.emplace_back([&, t] {
        size_t a, b;
        slice(t, &a, &b);
        for (size_t i = a; i < b; ++i) buf[i] = 1.0f;
      });
    for (auto& th : ts) th.join();
  }
  std::vector<float> sums(static_cast<size_t>(threads));
  // The DRAM buffer: 5 repetitions of one pass over >= 512 MiB. A working set: one warm-up
  // repetition, then at least 20 and 0.5 s, each thread reading its slice 4 times per repetition
  // (so that starting the threads, ~0.1 ms, stays below 1 % of a repetition's time).
  const int min_reps = working_set > 0 ? 21 : 5;
  const int passes = working_set > 0 ? 4 : 1;
  const auto start = std::chrono::steady_clock::now();
  for (int rep = 0; rep < min_reps || (working_set > 0 && std::chrono::duration<double>(
                                                                std::chrono::steady_clock::now() - start)
                                                                    .count() < 0.5);
       ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> ts;
    for (int t = 0; t < threads; ++t)
      ts.emplace_back([&, t] {
        size_t a, b;
        slice(t, &a, &b);
        for (int k = 0; k < passes; ++k) {
#if defined(__x86_64__)
          sums[size_t(t)] += avx2 ? read_avx2(buf + a, b - a) : read_scalar(buf + a, b - a);
#else
          sums[size_t(t)] += read_scalar(buf + a, b - a);
#endif
        }
      });
    for (auto& th : ts) th.join();
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (working_set == 0 || rep > 0) r.gbs = std::max(r.gbs, double(bytes) * passes / secs / 1e9);
  }
  float total = 0;
  for (float x : sums) total += x;
  if (total < 0) std::free(buf), buf = nullptr;  // keeps the sums alive (never true: every element is 1)
  std::free(buf);
  return r;
}

}  // namespace tools
}  // namespace phasekv
