// Picks the kernel table for this CPU, and the scalar helpers shared by every table.
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "cpu_kernels.h"

namespace phasekv {
namespace cpu {

extern const KernelTable kPortableKernels;
#if defined(__x86_64__) && defined(PHASEKV_HAVE_AVX2_KERNELS)
extern const KernelTable kAvx2Kernels;
#endif
#if defined(__aarch64__)
extern const KernelTable kNeonKernels;
#endif

namespace {
[[maybe_unused]] bool cpu_has_avx2() {
#if defined(__x86_64__) && defined(PHASEKV_HAVE_AVX2_KERNELS)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
#else
  return false;
#endif
}
}  // namespace

const KernelTable* kernels_by_name(const char* name) {
  if (std::strcmp(name, "portable") == 0) return &kPortableKernels;
#if defined(__x86_64__) && defined(PHASEKV_HAVE_AVX2_KERNELS)
  if (std::strcmp(name, "avx2") == 0 && cpu_has_avx2()) return &kAvx2Kernels;
#endif
#if defined(__aarch64__)
  if (std::strcmp(name, "neon") == 0) return &kNeonKernels;
#endif
  return nullptr;
}

const KernelTable& kernels() {
  static const KernelTable* table = [] {
    // PHASEKV_KERNELS=portable forces the portable kernels (debugging, comparisons).
    const char* force = std::getenv("PHASEKV_KERNELS");
    if (force) {
      if (const KernelTable* t = kernels_by_name(force)) return t;
    }
#if defined(__aarch64__)
    return &kNeonKernels;
#else
    return cpu_has_avx2() ? kernels_by_name("avx2") : &kPortableKernels;
#endif
  }();
  return *table;
}

void rmsnorm(const float* x, const float* w, float eps, float* out, int n) {
  float ss = 0.0f;
  for (int i = 0; i < n; ++i) ss = ss + x[i] * x[i];
  const float scale = 1.0f / std::sqrt(ss / float(n) + eps);
  for (int i = 0; i < n; ++i) out[i] = (x[i] * scale) * w[i];
}

void rope_apply(float* vec, const float* cos_t, const float* sin_t, int rope_dim, bool interleaved) {
  const int half = rope_dim / 2;
  for (int i = 0; i < half; ++i) {
    const int a = interleaved ? 2 * i : i;
    const int b = interleaved ? 2 * i + 1 : i + half;
    const float x0 = vec[a], x1 = vec[b];
    vec[a] = x0 * cos_t[i] - x1 * sin_t[i];
    vec[b] = x0 * sin_t[i] + x1 * cos_t[i];
  }
}

void silu_mul(const float* g, const float* u, float* out, int n) {
  for (int i = 0; i < n; ++i) out[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
}

void softmax(float* x, int n) {
  float mx = x[0];
  for (int i = 1; i < n; ++i) mx = x[i] > mx ? x[i] : mx;
  float sum = 0.0f;
  for (int i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum = sum + x[i];
  }
  const float inv = 1.0f / sum;
  for (int i = 0; i < n; ++i) x[i] = x[i] * inv;
}

}  // namespace cpu
}  // namespace phasekv
