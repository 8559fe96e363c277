// The q8 lanes with AVX-512 VNNI's vpdpbusd: 256-bit, and every q8 weight type's decode and prefill with two
// rows per 512-bit register (tile4_zmm, tile4_zmm_k in q8_avx2.h; the same bits). Compiled with -mavx2 -mfma -mf16c -mavx512f -mavx512bw -mavx512vnni
// -mavx512vl; only called after cpu_dispatch.cpp has checked the CPU has them.
#if defined(__x86_64__)
#define PKV_Q8_VNNI 1
#ifndef PKV_Q8_ZMM  // -DPKV_Q8_ZMM=0 builds the 256-bit kernels only (for comparisons)
#define PKV_Q8_ZMM 1
#endif
#include "q8_avx2.h"

namespace phasekv {
namespace cpu {

void matmul_q8_rows_avx512vnni(const MatmulArgs& a, int row_begin, int row_end) {
  q8::matmul_rows<q8::Avx512Vnni>(a, row_begin, row_end);
}

void matmul_q8x2_rows_avx512vnni(const MatmulArgs& a, int row_begin, int row_end) {
  q8::matmul_rows<q8::Avx512VnniX2>(a, row_begin, row_end);
}

#if PKV_Q8_ZMM
// The same on weights in the R4 layout (cpu_kernels.h WeightLayout::R4; q8_avx2.h tile4_r4).
void matmul_q8_rows_r4_avx512vnni(const MatmulArgs& a, int row_begin, int row_end) {
  q8::Avx512Vnni::matmul_rows_r4(a, row_begin, row_end);
}

void matmul_q8x2_rows_r4_avx512vnni(const MatmulArgs& a, int row_begin, int row_end) {
  q8::Avx512VnniX2::matmul_rows_r4(a, row_begin, row_end);
}

// On weights in the R16 layout (WeightLayout::R16; q8_avx2.h tile16_r16): R16's own order.
void matmul_q8_rows_r16_avx512vnni(const MatmulArgs& a, int row_begin, int row_end) {
  q8::Avx512Vnni::matmul_rows_r16(a, row_begin, row_end);
}

void matmul_q8x2_rows_r16_avx512vnni(const MatmulArgs& a, int row_begin, int row_end) {
  q8::Avx512VnniX2::matmul_rows_r16(a, row_begin, row_end);
}
#endif

}  // namespace cpu
}  // namespace phasekv
#endif
