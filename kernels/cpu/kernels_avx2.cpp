// AVX2 + FMA (+ F16C) instantiation of the CPU kernels. Compiled with -mavx2 -mfma -mf16c;
// only called after cpu_dispatch.cpp has checked the CPU supports them.
#if defined(__x86_64__)
#include "kernels_impl.h"
#include "vec8_avx2.h"

namespace phasekv {
namespace cpu {

namespace {

inline float half_to_float(uint16_t h) { return _cvtsh_ss(h); }

// Eight nibbles/bytes -> eight floats. The arithmetic matches dequantize_row exactly:
// x = d*q (Q8_0, Q4_0 after -8) and x = d*q + m (Q4_1, no fused multiply-add).
inline __m256 u8x8_to_ps(__m128i bytes8) { return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(bytes8)); }
inline __m256 i8x8_to_ps(__m128i bytes8) { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes8)); }

void dequant_avx2(DType t, const void* src, float* out, int n) {
  switch (t) {
    case DType::Q4_1: {
      const BlockQ4_1* b = static_cast<const BlockQ4_1*>(src);
      const __m128i mask = _mm_set1_epi8(0x0f);
      for (int k = 0; k < n / 32; ++k, out += 32) {
        const __m256 d = _mm256_set1_ps(half_to_float(b[k].d));
        const __m256 m = _mm256_set1_ps(half_to_float(b[k].m));
        const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b[k].qs));
        const __m128i lo = _mm_and_si128(q, mask), hi = _mm_and_si128(_mm_srli_epi16(q, 4), mask);
        _mm256_storeu_ps(out + 0, _mm256_add_ps(_mm256_mul_ps(d, u8x8_to_ps(lo)), m));
        _mm256_storeu_ps(out + 8, _mm256_add_ps(_mm256_mul_ps(d, u8x8_to_ps(_mm_srli_si128(lo, 8))), m));
        _mm256_storeu_ps(out + 16, _mm256_add_ps(_mm256_mul_ps(d, u8x8_to_ps(hi)), m));
        _mm256_storeu_ps(out + 24, _mm256_add_ps(_mm256_mul_ps(d, u8x8_to_ps(_mm_srli_si128(hi, 8))), m));
      }
      return;
    }
    case DType::Q4_0: {
      const BlockQ4_0* b = static_cast<const BlockQ4_0*>(src);
      const __m128i mask = _mm_set1_epi8(0x0f), eight = _mm_set1_epi8(8);
      for (int k = 0; k < n / 32; ++k, out += 32) {
        const __m256 d = _mm256_set1_ps(half_to_float(b[k].d));
        const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b[k].qs));
        const __m128i lo = _mm_sub_epi8(_mm_and_si128(q, mask), eight);
        const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(q, 4), mask), eight);
        _mm256_storeu_ps(out + 0, _mm256_mul_ps(d, i8x8_to_ps(lo)));
        _mm256_storeu_ps(out + 8, _mm256_mul_ps(d, i8x8_to_ps(_mm_srli_si128(lo, 8))));
        _mm256_storeu_ps(out + 16, _mm256_mul_ps(d, i8x8_to_ps(hi)));
        _mm256_storeu_ps(out + 24, _mm256_mul_ps(d, i8x8_to_ps(_mm_srli_si128(hi, 8))));
      }
      return;
    }
    case DType::Q8_0: {
      const BlockQ8_0* b = static_cast<const BlockQ8_0*>(src);
      for (int k = 0; k < n / 32; ++k, out += 32) {
        const __m256 d = _mm256_set1_ps(half_to_float(b[k].d));
        const __m128i q0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b[k].qs));
        const __m128i q1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b[k].qs + 16));
        _mm256_storeu_ps(out + 0, _mm256_mul_ps(d, i8x8_to_ps(q0)));
        _mm256_storeu_ps(out + 8, _mm256_mul_ps(d, i8x8_to_ps(_mm_srli_si128(q0, 8))));
        _mm256_storeu_ps(out + 16, _mm256_mul_ps(d, i8x8_to_ps(q1)));
        _mm256_storeu_ps(out + 24, _mm256_mul_ps(d, i8x8_to_ps(_mm_srli_si128(q1, 8))));
      }
      return;
    }
    case DType::F16: {
      const uint16_t* h = static_cast<const uint16_t*>(src);
      int i = 0;
      for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + i))));
      for (; i < n; ++i) out[i] = half_to_float(h[i]);
      return;
    }
    default:
      dequantize_row(t, src, out, n);
      return;
  }
}

}  // namespace

extern const KernelTable kAvx2Kernels;  // external linkage (a namespace-scope const is internal otherwise)
const KernelTable kAvx2Kernels = {
    "avx2",
    dequant_avx2,
    impl::dot<Vec8Avx2>,
    impl::matmul_rows<Vec8Avx2, dequant_avx2>,
    impl::axpy<Vec8Avx2>,
};

}  // namespace cpu
}  // namespace phasekv
#endif
