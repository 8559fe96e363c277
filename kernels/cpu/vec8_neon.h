// 8-lane float vector on aarch64 NEON (two float32x4_t), fused multiply-add like AVX2.
#pragma once

#include <arm_neon.h>

namespace phasekv {
namespace cpu {

struct Vec8Neon {
  float32x4_t lo, hi;
  static const char* name() { return "neon"; }
  static Vec8Neon zero() { return {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)}; }
  static Vec8Neon load(const float* p) { return {vld1q_f32(p), vld1q_f32(p + 4)}; }
  static Vec8Neon set1(float a) { return {vdupq_n_f32(a), vdupq_n_f32(a)}; }
  void store(float* p) const {
    vst1q_f32(p, lo);
    vst1q_f32(p + 4, hi);
  }
  static Vec8Neon fma(Vec8Neon a, Vec8Neon b, Vec8Neon acc) {
    return {vfmaq_f32(acc.lo, a.lo, b.lo), vfmaq_f32(acc.hi, a.hi, b.hi)};
  }
  static Vec8Neon mul(Vec8Neon a, Vec8Neon b) { return {vmulq_f32(a.lo, b.lo), vmulq_f32(a.hi, b.hi)}; }
  static Vec8Neon add(Vec8Neon a, Vec8Neon b) { return {vaddq_f32(a.lo, b.lo), vaddq_f32(a.hi, b.hi)}; }
  // For the q8 mode's exp (kernels_impl.h vexp): IEEE operations, the same bits on every ISA.
  static Vec8Neon sub(Vec8Neon a, Vec8Neon b) { return {vsubq_f32(a.lo, b.lo), vsubq_f32(a.hi, b.hi)}; }
  static Vec8Neon div(Vec8Neon a, Vec8Neon b) { return {vdivq_f32(a.lo, b.lo), vdivq_f32(a.hi, b.hi)}; }
  static Vec8Neon max(Vec8Neon a, Vec8Neon b) { return {vmaxq_f32(a.lo, b.lo), vmaxq_f32(a.hi, b.hi)}; }
  static Vec8Neon min(Vec8Neon a, Vec8Neon b) { return {vminq_f32(a.lo, b.lo), vminq_f32(a.hi, b.hi)}; }
  static Vec8Neon fused(Vec8Neon a, Vec8Neon b, Vec8Neon acc) { return fma(a, b, acc); }
  // The floats whose bits are t's shifted left by 23 (t's low 9 bits to the exponent field).
  static Vec8Neon shl23(Vec8Neon t) {
    return {vreinterpretq_f32_s32(vshlq_n_s32(vreinterpretq_s32_f32(t.lo), 23)),
            vreinterpretq_f32_s32(vshlq_n_s32(vreinterpretq_s32_f32(t.hi), 23))};
  }
  // Same order as the other ISAs: ((0+4)+(2+6)) + ((1+5)+(3+7)).
  float hsum() const {
    float32x4_t s = vaddq_f32(lo, hi);  // [0+4, 1+5, 2+6, 3+7]
    float a = vgetq_lane_f32(s, 0) + vgetq_lane_f32(s, 2);
    float b = vgetq_lane_f32(s, 1) + vgetq_lane_f32(s, 3);
    return a + b;
  }
};

}  // namespace cpu
}  // namespace phasekv
