// AVX2 + FMA (+ F16C) instantiation of the CPU kernels. Compiled with -mavx2 -mfma -mf16c;
// only called after cpu_dispatch.cpp has checked the CPU supports them.
#if defined(__x86_64__)
#include "kernels_impl.h"
#include "vec8_avx2.h"

namespace phasekv {
namespace cpu {

namespace {

inline float half_to_float(uint16_t h) { return _cvtsh_ss(h); }

// Eight nibbles/bytes -> eight floats. The results equal dequantize_row's bit for bit:
// x = d*q (Q8_0, Q4_0 after -8), and x = d*q + m for Q4_1 computed as one fused multiply-add,
// which rounds identically because d*q is exact in f32 (an 11-bit f16 mantissa times a 4-bit
// integer), so the only rounding is that of the addition in both forms.
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
        _mm256_storeu_ps(out + 0, _mm256_fmadd_ps(d, u8x8_to_ps(lo), m));
        _mm256_storeu_ps(out + 8, _mm256_fmadd_ps(d, u8x8_to_ps(_mm_srli_si128(lo, 8)), m));
        _mm256_storeu_ps(out + 16, _mm256_fmadd_ps(d, u8x8_to_ps(hi), m));
        _mm256_storeu_ps(out + 24, _mm256_fmadd_ps(d, u8x8_to_ps(_mm_srli_si128(hi, 8)), m));
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

// Dequantizes 32-element block k of a row into four registers, with exactly the
// arithmetic of dequant_avx2 (and so of dequantize_row).
template <DType T>
inline void block_to_regs(const void* row, int k, __m256 out[4]) {
  if constexpr (T == DType::Q4_1) {
    const BlockQ4_1& b = static_cast<const BlockQ4_1*>(row)[k];
    const __m256 d = _mm256_set1_ps(half_to_float(b.d)), m = _mm256_set1_ps(half_to_float(b.m));
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs));
    const __m128i mask = _mm_set1_epi8(0x0f);
    const __m128i lo = _mm_and_si128(q, mask), hi = _mm_and_si128(_mm_srli_epi16(q, 4), mask);
    out[0] = _mm256_fmadd_ps(d, u8x8_to_ps(lo), m);
    out[1] = _mm256_fmadd_ps(d, u8x8_to_ps(_mm_srli_si128(lo, 8)), m);
    out[2] = _mm256_fmadd_ps(d, u8x8_to_ps(hi), m);
    out[3] = _mm256_fmadd_ps(d, u8x8_to_ps(_mm_srli_si128(hi, 8)), m);
  } else if constexpr (T == DType::Q4_0) {
    const BlockQ4_0& b = static_cast<const BlockQ4_0*>(row)[k];
    const __m256 d = _mm256_set1_ps(half_to_float(b.d));
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs));
    const __m128i mask = _mm_set1_epi8(0x0f), eight = _mm_set1_epi8(8);
    const __m128i lo = _mm_sub_epi8(_mm_and_si128(q, mask), eight);
    const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(q, 4), mask), eight);
    out[0] = _mm256_mul_ps(d, i8x8_to_ps(lo));
    out[1] = _mm256_mul_ps(d, i8x8_to_ps(_mm_srli_si128(lo, 8)));
    out[2] = _mm256_mul_ps(d, i8x8_to_ps(hi));
    out[3] = _mm256_mul_ps(d, i8x8_to_ps(_mm_srli_si128(hi, 8)));
  } else {
    static_assert(T == DType::Q8_0, "block_to_regs: Q4_1, Q4_0 or Q8_0");
    const BlockQ8_0& b = static_cast<const BlockQ8_0*>(row)[k];
    const __m256 d = _mm256_set1_ps(half_to_float(b.d));
    const __m128i q0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs));
    const __m128i q1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs + 16));
    out[0] = _mm256_mul_ps(d, i8x8_to_ps(q0));
    out[1] = _mm256_mul_ps(d, i8x8_to_ps(_mm_srli_si128(q0, 8)));
    out[2] = _mm256_mul_ps(d, i8x8_to_ps(q1));
    out[3] = _mm256_mul_ps(d, i8x8_to_ps(_mm_srli_si128(q1, 8)));
  }
}

// One token (decode): dequantize each block in registers and multiply it in place, four
// rows at a time. The sequence per output is impl::dot's: 8-lane FMAs in index order, the
// fixed lane reduction; so results equal the buffered path bit for bit.
template <DType T>
void matvec_rows_fused(const MatmulArgs& a, int row_begin, int row_end) {
  const int nb = a.k / 32;
  int r = row_begin;
  for (; r + 4 <= row_end; r += 4) {
    const uint8_t* base = static_cast<const uint8_t*>(a.w) + size_t(r) * a.w_row_bytes;
    Vec8Avx2 acc[4] = {Vec8Avx2::zero(), Vec8Avx2::zero(), Vec8Avx2::zero(), Vec8Avx2::zero()};
    for (int k = 0; k < nb; ++k) {
      const float* xb = a.x + size_t(k) * 32;
      const __m256 x0 = _mm256_loadu_ps(xb), x1 = _mm256_loadu_ps(xb + 8), x2 = _mm256_loadu_ps(xb + 16),
                   x3 = _mm256_loadu_ps(xb + 24);
      for (int i = 0; i < 4; ++i) {
        __m256 w[4];
        block_to_regs<T>(base + size_t(i) * a.w_row_bytes, k, w);
        acc[i].v = _mm256_fmadd_ps(w[0], x0, acc[i].v);
        acc[i].v = _mm256_fmadd_ps(w[1], x1, acc[i].v);
        acc[i].v = _mm256_fmadd_ps(w[2], x2, acc[i].v);
        acc[i].v = _mm256_fmadd_ps(w[3], x3, acc[i].v);
      }
    }
    for (int i = 0; i < 4; ++i) a.y[r + i] = acc[i].hsum();
  }
  for (; r < row_end; ++r) {
    const uint8_t* row = static_cast<const uint8_t*>(a.w) + size_t(r) * a.w_row_bytes;
    Vec8Avx2 acc = Vec8Avx2::zero();
    for (int k = 0; k < nb; ++k) {
      __m256 w[4];
      block_to_regs<T>(row, k, w);
      for (int j = 0; j < 4; ++j) acc.v = _mm256_fmadd_ps(w[j], _mm256_loadu_ps(a.x + size_t(k) * 32 + 8 * j), acc.v);
    }
    a.y[r] = acc.hsum();
  }
}

void matmul_rows_avx2(const MatmulArgs& a, int row_begin, int row_end, float* scratch) {
  if (a.n_tok == 1) {
    switch (a.wtype) {
      case DType::Q4_1: return matvec_rows_fused<DType::Q4_1>(a, row_begin, row_end);
      case DType::Q4_0: return matvec_rows_fused<DType::Q4_0>(a, row_begin, row_end);
      case DType::Q8_0: return matvec_rows_fused<DType::Q8_0>(a, row_begin, row_end);
      default: break;  // F32/F16/BF16: the buffered path
    }
  }
  impl::matmul_rows<Vec8Avx2, dequant_avx2>(a, row_begin, row_end, scratch);
}

}  // namespace

extern const KernelTable kAvx2Kernels;  // external linkage (a namespace-scope const is internal otherwise)
const KernelTable kAvx2Kernels = {
    "avx2",
    dequant_avx2,
    impl::dot<Vec8Avx2>,
    matmul_rows_avx2,
    impl::axpy<Vec8Avx2>,
};

}  // namespace cpu
}  // namespace phasekv
#endif
