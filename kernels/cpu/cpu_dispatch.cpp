// Picks the kernel table for this CPU, and the scalar helpers shared by every table.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <string>

#include "cpu_kernels.h"

#if defined(__aarch64__)
#include <asm/hwcap.h>
#include <sys/auxv.h>
#endif

namespace phasekv {
namespace cpu {

extern const KernelTable kPortableKernels;
#if defined(__x86_64__) && defined(PHASEKV_HAVE_AVX2_KERNELS)
extern const KernelTable kAvx2Kernels;
extern const KernelTable kAvx2RowsKernels;
extern const KernelTable kAvx2VnniKernels;
extern const KernelTable kAvx512VnniRowsKernels;
extern const KernelTable kAvx512VnniR4Kernels;
#endif
#if defined(__aarch64__)
extern const KernelTable kNeonKernels;
extern const KernelTable kNeonDotprodKernels;
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
[[maybe_unused]] bool cpu_has_avx512vnni() {
#if defined(__x86_64__) && defined(PHASEKV_HAVE_AVX2_KERNELS)
  __builtin_cpu_init();
  return cpu_has_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vl");
#else
  return false;
#endif
}

[[maybe_unused]] bool cpu_has_dotprod() {
#if defined(__aarch64__)
  return (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0;
#else
  return false;
#endif
}
}  // namespace

const KernelTable* kernels_by_name(const char* name) {
  if (std::strcmp(name, "portable") == 0) return &kPortableKernels;
#if defined(__x86_64__) && defined(PHASEKV_HAVE_AVX2_KERNELS)
  // "avx2": the best x86 table (its q8 lanes with VNNI when the CPU has it); the others pin one.
  if (std::strcmp(name, "avx2") == 0 && cpu_has_avx2()) return cpu_has_avx512vnni() ? &kAvx2VnniKernels : &kAvx2Kernels;
  if (std::strcmp(name, "avx2-maddubs") == 0 && cpu_has_avx2()) return &kAvx2Kernels;
  // ... without its R16 copies (every matrix on the file's rows: the other instruction sets' bits).
  if (std::strcmp(name, "avx2-rows") == 0 && cpu_has_avx2()) return &kAvx2RowsKernels;
  if (std::strcmp(name, "avx512vnni") == 0 && cpu_has_avx512vnni()) return &kAvx2VnniKernels;
  // The same kernels on the file's rows only (no R4 copies of the weights): comparisons.
  if (std::strcmp(name, "avx512vnni-rows") == 0 && cpu_has_avx512vnni()) return &kAvx512VnniRowsKernels;
  // ... and with R4 copies only (no R16: the other instruction sets' bits).
  if (std::strcmp(name, "avx512vnni-r4") == 0 && cpu_has_avx512vnni()) return &kAvx512VnniR4Kernels;
#endif
#if defined(__aarch64__)
  if (std::strcmp(name, "neon") == 0) return cpu_has_dotprod() ? &kNeonDotprodKernels : &kNeonKernels;
  if (std::strcmp(name, "neon-nodotprod") == 0) return &kNeonKernels;
  if (std::strcmp(name, "neon-dotprod") == 0 && cpu_has_dotprod()) return &kNeonDotprodKernels;
#endif
  return nullptr;
}

const char* matmul_mode_name(MatmulMode m) {
  return m == MatmulMode::Q8 ? "q8" : m == MatmulMode::Q8X2 ? "q8x2" : "reference";
}

bool parse_kernel_spec(const char* spec, MatmulMode* mode, const KernelTable** table, std::string* bad) {
  std::string s = spec ? spec : "";
  size_t at = 0;
  while (at <= s.size()) {
    const size_t end = std::min(s.find(':', at), s.size());
    const std::string tok = s.substr(at, end - at);
    if (tok == "reference") *mode = MatmulMode::Reference;
    else if (tok == "q8") *mode = MatmulMode::Q8;
    else if (tok == "q8x2") *mode = MatmulMode::Q8X2;
    else if (const KernelTable* t = tok.empty() ? nullptr : kernels_by_name(tok.c_str())) *table = t;
    else {
      if (bad) *bad = tok;
      return false;
    }
    at = end + 1;
  }
  return true;
}

const KernelTable& kernels() {
  static const KernelTable* table = [] {
    // PHASEKV_KERNELS=portable (or q8:portable, ...) forces an instruction set (debugging, comparisons).
    const char* force = std::getenv("PHASEKV_KERNELS");
    if (force) {
      MatmulMode m = MatmulMode::Reference;
      const KernelTable* t = nullptr;
      if (parse_kernel_spec(force, &m, &t, nullptr) && t) return t;
    }
#if defined(__aarch64__)
    return kernels_by_name("neon");
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
