// The NEON kernels with the Armv8.2 dot-product extension (sdot) for the q8 mode: Jetson Orin's
// Cortex-A78AE and Thor's Neoverse V3AE have it. Compiled with -march=armv8.2-a+dotprod; chosen
// by cpu_dispatch.cpp only when the CPU reports HWCAP_ASIMDDP.
#if defined(__aarch64__)
#include <arm_neon.h>

#include "kernels_impl.h"
#include "q8_impl.h"
#include "vec8_neon.h"

namespace phasekv {
namespace cpu {
namespace q8 {
namespace {

// X2: the q8x2 mode (BlockQ8x2 activations: each lane sum 128 * sum(w q) + sum(w r)).
template <bool X2>
struct NeonDotprodT {
  static constexpr bool kX2 = X2;
  using XB = XBlock<X2>;
  static constexpr int kRows = 2, kTokens = 4;
  using W = int8x16x2_t;
  using L = int32x4x2_t;
  using A = float32x4x2_t;
  struct D {
    float d, m, d1;  // d_w for elements 0..15, the minimum, d_w for 16..31
  };
  using XS = float32x4x2_t;
  using S = float32x4x2_t;
  using M = float32x4_t;  // Q4_1's minimum term, a lane per token
  static float f16(const uint8_t* p) {
    __fp16 h;
    std::memcpy(&h, p, 2);
    return float(h);
  }
  static XS xscale(const XB& x) { return XS{{vdupq_n_f32(x.d[0]), vdupq_n_f32(x.d[1])}}; }
  template <DType T>
  static D load_scales(const uint8_t* blk, int j) {
    if constexpr (kquant<T>()) {
      const KScales k = kq_scales<T, f16>(blk, j);  // the native f16 conversion
      return {k.d0, k.m, k.d1};
    } else {
      const float d = f16(blk);
      return {d, stored_min<T>() ? f16(blk + 2) : d * float(-offset_w<T>()), d};
    }
  }
  template <DType T>
  static S scale(const D& dm, const XS& xs) { return S{{vmulq_n_f32(xs.val[0], dm.d), vmulq_n_f32(xs.val[1], dm.d1)}}; }
  static M mzero() { return vdupq_n_f32(0.0f); }
  static M load_min(float s0, float s1, float s2, float s3) {
    M m = vdupq_n_f32(s0);
    m = vsetq_lane_f32(s1, m, 1);
    m = vsetq_lane_f32(s2, m, 2);
    return vsetq_lane_f32(s3, m, 3);
  }
  static M fma_min(const D& dm, M s, M acc) { return vfmaq_n_f32(acc, s, dm.m); }  // fused, per lane
  static M load_min1(float s) { return vsetq_lane_f32(s, vdupq_n_f32(0.0f), 0); }
  static M fma_min1(const D& dm, M s, M acc) { return vfmaq_n_f32(acc, s, dm.m); }
  static float mvalue1(M m) { return vgetq_lane_f32(m, 0); }
  static float mvalue(M m, int t) {
    float v[4];
    vst1q_f32(v, m);
    return v[t];
  }
  template <DType T>
  static W load_w(const uint8_t* blk, int j) {
    W w;
    if constexpr (T == DType::Q8_0) {
      w.val[0] = vld1q_s8(reinterpret_cast<const int8_t*>(blk + 2));
      w.val[1] = vld1q_s8(reinterpret_cast<const int8_t*>(blk + 18));
    } else if constexpr (T == DType::Q4_K || T == DType::Q5_K) {
      // Sub-blocks 2p and 2p + 1 are the low and high nibbles of the same 32 bytes.
      const uint8_t* qs = blk + (T == DType::Q4_K ? 16 : 48) + 32 * (j >> 1);
      const int8x16_t sh = vdupq_n_s8(int8_t(-4 * (j & 1)));  // vshl by a negative count: shift right
      uint8x16_t lo = vandq_u8(vshlq_u8(vld1q_u8(qs), sh), vdupq_n_u8(0x0f));
      uint8x16_t hi = vandq_u8(vshlq_u8(vld1q_u8(qs + 16), sh), vdupq_n_u8(0x0f));
      if constexpr (T == DType::Q5_K) {  // the 5th bit: bit j of qh[i]
        const uint8x16_t bit = vdupq_n_u8(uint8_t(1u << j)), x10 = vdupq_n_u8(0x10);
        lo = vorrq_u8(lo, vandq_u8(vtstq_u8(vld1q_u8(blk + 16), bit), x10));
        hi = vorrq_u8(hi, vandq_u8(vtstq_u8(vld1q_u8(blk + 32), bit), x10));
      }
      w.val[0] = vreinterpretq_s8_u8(lo);
      w.val[1] = vreinterpretq_s8_u8(hi);
    } else if constexpr (T == DType::Q6_K) {
      const int h = j >> 2, q = j & 3;
      const uint8_t* ql = blk + 64 * h + 32 * (q & 1);
      const uint8_t* qh = blk + 128 + 32 * h;
      const int8x16_t sl = vdupq_n_s8(int8_t(-4 * (q >> 1))), shh = vdupq_n_s8(int8_t(-2 * q));
      for (int half = 0; half < 2; ++half) {
        const uint8x16_t lo = vandq_u8(vshlq_u8(vld1q_u8(ql + 16 * half), sl), vdupq_n_u8(0x0f));
        const uint8x16_t hi = vshlq_n_u8(vandq_u8(vshlq_u8(vld1q_u8(qh + 16 * half), shh), vdupq_n_u8(3)), 4);
        w.val[half] = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(lo, hi)), vdupq_n_s8(32));
      }
    } else if constexpr (T == DType::Q5_0 || T == DType::Q5_1) {
      const uint8x16_t b = vld1q_u8(blk + (stored_min<T>() ? 8 : 6));
      const uint32_t qh = qh_bits<T>(blk);
      // Byte j of each half = 0x10 where bit j (j + 16) of qh is set.
      static const uint8_t kBits[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
      const uint8x16_t bits = vld1q_u8(kBits);
      const uint8x16_t h0 = vcombine_u8(vdup_n_u8(uint8_t(qh)), vdup_n_u8(uint8_t(qh >> 8)));
      const uint8x16_t h1 = vcombine_u8(vdup_n_u8(uint8_t(qh >> 16)), vdup_n_u8(uint8_t(qh >> 24)));
      const uint8x16_t x10 = vdupq_n_u8(0x10);
      const uint8x16_t lo = vorrq_u8(vandq_u8(b, vdupq_n_u8(0x0f)), vandq_u8(vtstq_u8(h0, bits), x10));
      const uint8x16_t hi = vorrq_u8(vshrq_n_u8(b, 4), vandq_u8(vtstq_u8(h1, bits), x10));
      w.val[0] = vreinterpretq_s8_u8(lo);
      w.val[1] = vreinterpretq_s8_u8(hi);
    } else {
      const uint8x16_t b = vld1q_u8(blk + (T == DType::Q4_1 ? 4 : 2));
      const uint8x16_t lo = vandq_u8(b, vdupq_n_u8(0x0f)), hi = vshrq_n_u8(b, 4);
      w.val[0] = vreinterpretq_s8_u8(lo);
      w.val[1] = vreinterpretq_s8_u8(hi);
    }
    return w;
  }
  template <DType T>
  static L lanes(const W& w, const XB& x) {
    L l;
    l.val[0] = vdotq_s32(vdupq_n_s32(0), w.val[0], vld1q_s8(x.q));       // lanes 0..3: elements 0..15
    l.val[1] = vdotq_s32(vdupq_n_s32(0), w.val[1], vld1q_s8(x.q + 16));  // lanes 4..7: elements 16..31
    if constexpr (X2) {  // 128 sum(w q) + sum(w r), exact
      l.val[0] = vdotq_s32(vshlq_n_s32(l.val[0], 7), w.val[0], vld1q_s8(x.r));
      l.val[1] = vdotq_s32(vshlq_n_s32(l.val[1], 7), w.val[1], vld1q_s8(x.r + 16));
    }
    return l;
  }
  static A zero() { return A{{vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)}}; }
  static A fma(A acc, const S& s, const L& l) {
    acc.val[0] = vfmaq_f32(acc.val[0], vcvtq_f32_s32(l.val[0]), s.val[0]);
    acc.val[1] = vfmaq_f32(acc.val[1], vcvtq_f32_s32(l.val[1]), s.val[1]);
    return acc;
  }
  static float hsum(const A& a) {
    const float32x4_t s = vaddq_f32(a.val[0], a.val[1]);  // [0+4, 1+5, 2+6, 3+7]
    return (vgetq_lane_f32(s, 0) + vgetq_lane_f32(s, 2)) + (vgetq_lane_f32(s, 1) + vgetq_lane_f32(s, 3));
  }
};
using NeonDotprod = NeonDotprodT<false>;
using NeonDotprodX2 = NeonDotprodT<true>;

}  // namespace
}  // namespace q8

extern const KernelTable kNeonDotprodKernels;
const KernelTable kNeonDotprodKernels = {
    "neon",
    impl::dequant_reference,
    impl::dot<Vec8Neon>,
    impl::matmul_rows<Vec8Neon, impl::dequant_reference>,
    impl::axpy<Vec8Neon>,
    impl::dot_rows<Vec8Neon>,
    impl::axpy_rows<Vec8Neon>,
    q8::quantize_portable,
    q8::matmul_rows<q8::NeonDotprod>,
    q8::quantize_x2_portable,
    q8::matmul_rows<q8::NeonDotprodX2>,
    impl::softmax_q8<Vec8Neon>,
    impl::silu_mul_q8<Vec8Neon>,
    "neon-dotprod",
};

}  // namespace cpu
}  // namespace phasekv
#endif
