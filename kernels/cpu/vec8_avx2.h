// 8-lane float vector on AVX2 + FMA. Include only from translation units compiled with
// -mavx2 -mfma (kernels_avx2.cpp).
#pragma once

#include <immintrin.h>

namespace phasekv {
namespace cpu {

struct Vec8Avx2 {
  __m256 v;
  static const char* name() { return "avx2"; }
  static Vec8Avx2 zero() { return {_mm256_setzero_ps()}; }
  static Vec8Avx2 load(const float* p) { return {_mm256_loadu_ps(p)}; }
  static Vec8Avx2 set1(float a) { return {_mm256_set1_ps(a)}; }
  void store(float* p) const { _mm256_storeu_ps(p, v); }
  static Vec8Avx2 fma(Vec8Avx2 a, Vec8Avx2 b, Vec8Avx2 acc) { return {_mm256_fmadd_ps(a.v, b.v, acc.v)}; }
  static Vec8Avx2 mul(Vec8Avx2 a, Vec8Avx2 b) { return {_mm256_mul_ps(a.v, b.v)}; }
  static Vec8Avx2 add(Vec8Avx2 a, Vec8Avx2 b) { return {_mm256_add_ps(a.v, b.v)}; }
  // For the q8 mode's exp (kernels_impl.h vexp): IEEE operations, the same bits on every ISA.
  static Vec8Avx2 sub(Vec8Avx2 a, Vec8Avx2 b) { return {_mm256_sub_ps(a.v, b.v)}; }
  static Vec8Avx2 div(Vec8Avx2 a, Vec8Avx2 b) { return {_mm256_div_ps(a.v, b.v)}; }
  static Vec8Avx2 max(Vec8Avx2 a, Vec8Avx2 b) { return {_mm256_max_ps(a.v, b.v)}; }
  static Vec8Avx2 min(Vec8Avx2 a, Vec8Avx2 b) { return {_mm256_min_ps(a.v, b.v)}; }
  static Vec8Avx2 fused(Vec8Avx2 a, Vec8Avx2 b, Vec8Avx2 acc) { return {_mm256_fmadd_ps(a.v, b.v, acc.v)}; }
  // The floats whose bits are t's shifted left by 23 (t's low 9 bits to the exponent field).
  static Vec8Avx2 shl23(Vec8Avx2 t) { return {_mm256_castsi256_ps(_mm256_slli_epi32(_mm256_castps_si256(t.v), 23))}; }
  // Same order as Vec8Portable::hsum: ((0+4)+(2+6)) + ((1+5)+(3+7)).
  float hsum() const {
    __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
    __m128 s = _mm_add_ps(lo, hi);                 // [0+4, 1+5, 2+6, 3+7]
    __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));  // [(0+4)+(2+6), (1+5)+(3+7), ..]
    return _mm_cvtss_f32(_mm_add_ss(t, _mm_shuffle_ps(t, t, 1)));
  }
};

}  // namespace cpu
}  // namespace phasekv
