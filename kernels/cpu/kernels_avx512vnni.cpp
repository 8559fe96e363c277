// The q8 lanes with AVX-512 VNNI's 256-bit vpdpbusd. Compiled with -mavx2 -mfma -mf16c
// -mavx512vnni -mavx512vl; only called after cpu_dispatch.cpp has checked the CPU has them.
#if defined(__x86_64__)
#define PKV_Q8_VNNI 1
#include "q8_avx2.h"

namespace phasekv {
namespace cpu {

void matmul_q8_rows_avx512vnni(const MatmulArgs& a, int row_begin, int row_end) {
  q8::matmul_rows<q8::Avx512Vnni>(a, row_begin, row_end);
}

}  // namespace cpu
}  // namespace phasekv
#endif
