// AVX2 + FMA (+ F16C) instantiation of the CPU kernels. Compiled with -mavx2 -mfma -mf16c;
// only called after cpu_dispatch.cpp has checked the CPU supports them.
#if defined(__x86_64__)
#include "kernels_impl.h"
#include "q8_avx2.h"
#include "vec8_avx2.h"

namespace phasekv {
namespace cpu {

namespace {

inline float half_to_float(uint16_t h) { return _cvtsh_ss(h); }


// Eight bytes at p, zero- or sign-extended to eight 32-bit lanes (one load+shuffle µop).
inline __m256i u8x8_load(const uint8_t* p) {
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}
inline __m256i i8x8_load(const int8_t* p) {
  return _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}

// Dequantizes 32-element block k of a row into four registers, equal bit for bit to
// dequantize_row. The nibbles are split after widening bytes to 32-bit lanes (and/shift on
// any port) instead of before (byte shuffles), which keeps the shuffle port free. Every
// product d*q below is exact in f32, so the fused forms round exactly like the reference:
//   Q4_1: d*q + m = fma(d, q, m)   Q4_0: d*(q-8) = fma(d, q, -8d)   Q8_0: d*q
template <DType T>
inline void block_to_regs(const void* row, int k, __m256 out[4]) {
  if constexpr (T == DType::Q4_1 || T == DType::Q4_0) {
    const uint8_t* qs;
    __m256 d, c;
    if constexpr (T == DType::Q4_1) {
      const BlockQ4_1& b = static_cast<const BlockQ4_1*>(row)[k];
      d = _mm256_set1_ps(half_to_float(b.d));
      c = _mm256_set1_ps(half_to_float(b.m));
      qs = b.qs;
    } else {
      const BlockQ4_0& b = static_cast<const BlockQ4_0*>(row)[k];
      const float df = half_to_float(b.d);
      d = _mm256_set1_ps(df);
      c = _mm256_set1_ps(-8.0f * df);
      qs = b.qs;
    }
    const __m256i mask = _mm256_set1_epi32(0x0f);
    const __m256i a = u8x8_load(qs), b8 = u8x8_load(qs + 8);
    out[0] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(_mm256_and_si256(a, mask)), c);   // elements 0..7
    out[1] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(_mm256_and_si256(b8, mask)), c);  // 8..15
    out[2] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(_mm256_srli_epi32(a, 4)), c);     // 16..23
    out[3] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(_mm256_srli_epi32(b8, 4)), c);    // 24..31
  } else {
    static_assert(T == DType::Q8_0, "block_to_regs: Q4_1, Q4_0 or Q8_0");
    const BlockQ8_0& b = static_cast<const BlockQ8_0*>(row)[k];
    const __m256 d = _mm256_set1_ps(half_to_float(b.d));
    for (int j = 0; j < 4; ++j) out[j] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(i8x8_load(b.qs + 8 * j)));
  }
}

template <DType T>
void dequant_blocks(const void* src, float* out, int n) {
  __m256 w[4];
  for (int k = 0; k < n / 32; ++k, out += 32) {
    block_to_regs<T>(src, k, w);
    for (int j = 0; j < 4; ++j) _mm256_storeu_ps(out + 8 * j, w[j]);
  }
}

void dequant_avx2(DType t, const void* src, float* out, int n) {
  switch (t) {
    case DType::Q4_1: return dequant_blocks<DType::Q4_1>(src, out, n);
    case DType::Q4_0: return dequant_blocks<DType::Q4_0>(src, out, n);
    case DType::Q8_0: return dequant_blocks<DType::Q8_0>(src, out, n);
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

// The same table with AVX-512 VNNI's vpdpbusd for the q8 lanes (kernels_avx512vnni.cpp).
void matmul_q8_rows_avx512vnni(const MatmulArgs& a, int row_begin, int row_end);
void matmul_q8x2_rows_avx512vnni(const MatmulArgs& a, int row_begin, int row_end);
#if !defined(PKV_Q8_ZMM) || PKV_Q8_ZMM  // -DPKV_Q8_ZMM=0 (a comparison build): no 512-bit kernels, no R4
void matmul_q8_rows_r4_avx512vnni(const MatmulArgs& a, int row_begin, int row_end);
void matmul_q8x2_rows_r4_avx512vnni(const MatmulArgs& a, int row_begin, int row_end);
void matmul_q8_rows_r16_avx512vnni(const MatmulArgs& a, int row_begin, int row_end);
void matmul_q8x2_rows_r16_avx512vnni(const MatmulArgs& a, int row_begin, int row_end);
#define PKV_R4_AVX512VNNI matmul_q8_rows_r4_avx512vnni, matmul_q8x2_rows_r4_avx512vnni
#define PKV_R16_AVX512VNNI matmul_q8_rows_r16_avx512vnni, matmul_q8x2_rows_r16_avx512vnni
#else
#define PKV_R4_AVX512VNNI nullptr, nullptr
#define PKV_R16_AVX512VNNI nullptr, nullptr
#endif
using Q8RowsFn = void (*)(const MatmulArgs&, int, int);
// The AVX2 table with the q8 kernels given (AVX2's own, or AVX-512 VNNI's), named q8_isa, and the
// R4 and R16 kernels where there are (a constant expression: the tables exist before any code runs).
constexpr KernelTable avx2_table(const char* q8_isa, Q8RowsFn q8, Q8RowsFn q8x2, Q8RowsFn r4, Q8RowsFn r4x2,
                                 Q8RowsFn r16, Q8RowsFn r16x2) {
  return {"avx2",
          dequant_avx2,
          impl::dot<Vec8Avx2>,
          matmul_rows_avx2,
          impl::axpy<Vec8Avx2>,
          impl::dot_rows<Vec8Avx2>,
          impl::axpy_rows<Vec8Avx2>,
          q8::quantize_avx2,
          q8,
          q8::quantize_x2_avx2,
          q8x2,
          impl::softmax_q8<Vec8Avx2>,
          impl::silu_mul_q8<Vec8Avx2>,
          q8_isa,
          r4,
          r4x2,
          r16,
          r16x2};
}
// AVX2's q8 kernels: Q4_0 / Q4_1 matrices in the R16 layout (q8_avx2.h tile_r16_ymm: the same
// bits as the AVX-512 VNNI R16 kernels), the others on the file's rows (no R4 kernels: the same
// bits as AVX-512 VNNI's R4).
extern const KernelTable kAvx2Kernels;  // external linkage (a namespace-scope const is internal otherwise)
constexpr KernelTable kAvx2Kernels = avx2_table("avx2", q8::matmul_rows<q8::Avx2>, q8::matmul_rows<q8::Avx2X2>, nullptr,
                                                nullptr, q8::Avx2::matmul_rows_r16, q8::Avx2X2::matmul_rows_r16);
// ... and every matrix on the file's rows ("avx2-rows": the other instruction sets' bits).
extern const KernelTable kAvx2RowsKernels;
constexpr KernelTable kAvx2RowsKernels =
    avx2_table("avx2-rows", q8::matmul_rows<q8::Avx2>, q8::matmul_rows<q8::Avx2X2>, nullptr, nullptr, nullptr, nullptr);
extern const KernelTable kAvx2VnniKernels;
constexpr KernelTable kAvx2VnniKernels =
    avx2_table("avx512vnni", matmul_q8_rows_avx512vnni, matmul_q8x2_rows_avx512vnni, PKV_R4_AVX512VNNI,
               PKV_R16_AVX512VNNI);
// Without the R16 kernels ("avx512vnni-r4": every R4 type in R4, the other instruction sets'
// bits) and without any copies ("avx512vnni-rows": the file's rows, the same bits as R4).
extern const KernelTable kAvx512VnniR4Kernels;
constexpr KernelTable kAvx512VnniR4Kernels =
    avx2_table("avx512vnni-r4", matmul_q8_rows_avx512vnni, matmul_q8x2_rows_avx512vnni, PKV_R4_AVX512VNNI, nullptr,
               nullptr);
extern const KernelTable kAvx512VnniRowsKernels;
constexpr KernelTable kAvx512VnniRowsKernels = avx2_table("avx512vnni-rows", matmul_q8_rows_avx512vnni,
                                                          matmul_q8x2_rows_avx512vnni, nullptr, nullptr, nullptr, nullptr);

}  // namespace cpu
}  // namespace phasekv
#endif
