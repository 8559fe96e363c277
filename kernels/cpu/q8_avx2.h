// The q8 policy for AVX2 (maddubs + madd) and, with PKV_Q8_VNNI, AVX-512 VNNI's 256-bit
// vpdpbusd (AVX512VNNI + AVX512VL): the same lanes, one instruction instead of two; with
// PKV_Q8_ZMM too (AVX512F, BW), every weight type's decode and prefill keep two rows per 512-bit
// register (tile4_zmm; K-quants a super-block per iteration, tile4_zmm_k). Included
// by kernels_avx2.cpp and kernels_avx512vnni.cpp, which are compiled for those instructions.
#pragma once

#include <immintrin.h>

#include <cstring>
#include <utility>

#include "q8_impl.h"

namespace phasekv {
namespace cpu {
namespace q8 {
// Internal linkage: each instruction set's translation unit compiles its own copy with its own
// flags, so the linker can never hand an AVX-512 build of a helper to the portable table.
namespace {

#if defined(PKV_Q8_VNNI)
#define PKV_Q8_AVX2_POLICY_T Avx512VnniT
#else
#define PKV_Q8_AVX2_POLICY_T Avx2T
#endif
// X2: the q8x2 mode (BlockQ8x2 activations: each lane sum 128 * sum(w q) + sum(w r)).
template <bool X2>
struct PKV_Q8_AVX2_POLICY_T {
  static constexpr bool kX2 = X2;
  using XB = XBlock<X2>;
  static constexpr int kRows = 2, kTokens = 4;
  using W = __m256i;
  using L = __m256i;
  using A = __m256;
  using D = __m128;   // [d_w, m_w, 0, 0]; K-quants [d_w,0, m_w, d_w,1, 0]
  using XS = __m256;  // [d_x0 x4, d_x1 x4]
  using S = __m256;
  using M = __m128;   // Q4_1's minimum term, a lane per token
  // Two broadcast loads and a blend: no shuffle-port (port 5) instruction, which the decode
  // kernel's other conversions already keep busy.
  static XS xscale(const XB& x) {
    return _mm256_blend_ps(_mm256_broadcast_ss(&x.d[0]), _mm256_broadcast_ss(&x.d[1]), 0xf0);
  }
  template <DType T>
  static D load_scales(const uint8_t* blk, int j) {
    // K-quants: the f16 super-scales by F16C times the sub-block's integers, exact products
    // equal to kq_scales' (no call of the scalar f16 conversion per block).
    if constexpr (T == DType::Q6_K) {
      const int8_t* sc = reinterpret_cast<const int8_t*>(blk + 192) + q6k_scale_index(j);
      uint16_t h;
      std::memcpy(&h, blk + 208, 2);
      const __m128 d = _mm_cvtph_ps(_mm_cvtsi32_si128(h));
      return _mm_mul_ps(_mm_broadcastss_ps(d), _mm_cvtepi32_ps(_mm_setr_epi32(sc[0], 0, sc[1], 0)));
    } else if constexpr (kquant<T>()) {
      int sc, m;
      kq_scale_min(blk + 4, j, &sc, &m);
      uint32_t u;
      std::memcpy(&u, blk, 4);
      const __m128 dm = _mm_cvtph_ps(_mm_cvtsi32_si128(int(u)));  // [d, dmin, 0, 0]
      return _mm_mul_ps(_mm_permute_ps(dm, _MM_SHUFFLE(3, 0, 1, 0)), _mm_cvtepi32_ps(_mm_setr_epi32(sc, -m, sc, 0)));
    } else {
      uint32_t u = 0;
      std::memcpy(&u, blk, stored_min<T>() ? 4 : 2);  // f16 d (and f16 m), converted exactly by F16C
      const __m128 dm = _mm_cvtph_ps(_mm_cvtsi32_si128(int(u)));
      if constexpr (offset_w<T>() != 0)  // [d, d, 0, 0] * [1, -offset, 0, 0]: the minimum, exact
        return _mm_mul_ps(_mm_unpacklo_ps(dm, dm), _mm_setr_ps(1.0f, float(-offset_w<T>()), 0.0f, 0.0f));
      return dm;
    }
  }
  template <DType T>
  static S scale(D dm, XS xs) {
    if constexpr (T == DType::Q6_K)  // two 16-element weight scales: lanes 0 and 2 of dm
      return _mm256_mul_ps(_mm256_permutevar8x32_ps(_mm256_castps128_ps256(dm), _mm256_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2)), xs);
    return _mm256_mul_ps(_mm256_broadcastss_ps(dm), xs);
  }
  static M mzero() { return _mm_setzero_ps(); }
  static M load_min(float s0, float s1, float s2, float s3) { return _mm_setr_ps(s0, s1, s2, s3); }
  static M fma_min(D dm, M s, M acc) { return _mm_fmadd_ps(_mm_shuffle_ps(dm, dm, 0x55), s, acc); }
  // One token: D is [d_w, m_w, 0, 0], so with s in lane 1 the FMA needs no broadcast of m_w;
  // lane 1 = fused m_w * s + acc (lane 0's d_w * 0 is never read).
  static M load_min1(float s) { return _mm_set_ps(0.0f, 0.0f, s, 0.0f); }
  static M fma_min1(D dm, M s, M acc) { return _mm_fmadd_ps(dm, s, acc); }
  static float mvalue1(M m) { return _mm_cvtss_f32(_mm_movehdup_ps(m)); }
  static float mvalue(M m, int t) {
    alignas(16) float v[4];
    _mm_store_ps(v, m);
    return v[t];
  }
  template <DType T>
  static W load_w(const uint8_t* blk, int j) {
    if constexpr (T == DType::Q8_0) {
      return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
    } else if constexpr (T == DType::Q4_K || T == DType::Q5_K) {
      // Sub-blocks 2p and 2p + 1 are the low and high nibbles of the same 32 bytes.
      const __m256i b = _mm256_loadu_si256(
          reinterpret_cast<const __m256i*>(blk + (T == DType::Q4_K ? 16 : 48) + 32 * (j >> 1)));
      const __m256i lo = _mm256_and_si256(_mm256_srl_epi16(b, _mm_cvtsi32_si128(4 * (j & 1))), _mm256_set1_epi8(0x0f));
      if constexpr (T == DType::Q4_K) {
        return lo;
      } else {  // the 5th bit: bit j of qh[i]
        const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 16));
        const __m256i bit = _mm256_set1_epi8(char(1 << j));
        return _mm256_or_si256(lo, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, bit), bit), _mm256_set1_epi8(0x10)));
      }
    } else if constexpr (T == DType::Q6_K) {
      const int h = j >> 2, q = j & 3;
      const __m256i ql = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 64 * h + 32 * (q & 1)));
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 128 + 32 * h));
      const __m256i lo = _mm256_and_si256(_mm256_srl_epi16(ql, _mm_cvtsi32_si128(4 * (q >> 1))), _mm256_set1_epi8(0x0f));
      const __m256i hi = _mm256_slli_epi16(_mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * q)), _mm256_set1_epi8(3)), 4);
      return _mm256_sub_epi8(_mm256_or_si256(lo, hi), _mm256_set1_epi8(32));
    } else if constexpr (T == DType::Q5_0 || T == DType::Q5_1) {
      const __m256i b = _mm256_broadcastsi128_si256(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + (stored_min<T>() ? 8 : 6))));
      const __m256i lo = _mm256_and_si256(_mm256_srlv_epi64(b, _mm256_setr_epi64x(0, 0, 4, 4)), _mm256_set1_epi8(0x0f));
      // Byte j = 0x10 where bit j of qh is set: byte j takes qh's byte j / 8, masked by 1 << (j % 8).
      const __m256i q = _mm256_set1_epi32(int(qh_bits<T>(blk)));
      const __m256i spread = _mm256_shuffle_epi8(
          q, _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3,
                              3, 3));
      const __m256i bit = _mm256_set1_epi64x(int64_t(0x8040201008040201ull));
      const __m256i hi = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit), _mm256_set1_epi8(0x10));
      return _mm256_or_si256(lo, hi);
    } else {
      // The 16 packed bytes in both halves (a broadcast load), the high half shifted by 4: low
      // nibbles are elements 0..15, high nibbles 16..31.
      const __m256i b = _mm256_broadcastsi128_si256(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + (T == DType::Q4_1 ? 4 : 2))));
      return _mm256_and_si256(_mm256_srlv_epi64(b, _mm256_setr_epi64x(0, 0, 4, 4)), _mm256_set1_epi8(0x0f));
    }
  }
  template <DType T>
  static L lanes(W w, const XB& xb) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.q));
    // Weights with a minimum are unsigned; signed ones (Q8_0, Q6_K) go through |w| * (x * sign(w)).
    const __m256i u = has_min<T>() ? w : _mm256_sign_epi8(w, w);
    const __m256i s = has_min<T>() ? x : _mm256_sign_epi8(x, w);
    if constexpr (X2) {  // 128 sum(w q) + sum(w r): |lane| < 2^24, exact
      const __m256i xr = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.r));
      const __m256i sr = has_min<T>() ? xr : _mm256_sign_epi8(xr, w);
#if defined(PKV_Q8_VNNI)
      return _mm256_dpbusd_epi32(_mm256_slli_epi32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s), 7), u, sr);
#else
      // A pair of products stays below 2^15 (|w| <= 128, |q| <= 127, |r| <= 64): no saturation.
      return _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(128)),
                              _mm256_madd_epi16(_mm256_maddubs_epi16(u, sr), _mm256_set1_epi16(1)));
#endif
    }
#if defined(PKV_Q8_VNNI)
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
#else
    // |w| <= 128 and |x| <= 127: a pair of products stays below 2^15, no saturation.
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
#endif
  }
  // Decode (1 token), four rows at a time, every q8 weight type (decode4_ymm, decode4_ymm_k; with
  // PKV_Q8_ZMM tile4<T, 1>), with the per-block work that does not depend on the row done once
  // for all four: one F16C conversion of the four rows' headers [d0, m0, d1, m1, d2, m2, d3, m3]
  // (K-quants: once per super-block), one multiply for the eight scales d_r * d_x,h (each row's
  // lane scales then a permute), one FMA for the four minimum terms (lane 2r + 1). Every output
  // gets tile<P, T, 4, 1>'s operations on tile's values -- the same products, fused in the same
  // order -- so the same bits (tests/unit/test_q8.cpp checks every instruction set against the
  // portable kernels); per row and block it saves three of the FMA ports' seven operations,
  // the ports that bound this loop when the weights come from cache.
  static constexpr bool kHasDecode4 = true;
  template <DType T>
  static constexpr bool decode4_ok() {
    return true;  // decode4_ymm, decode4_ymm_k (K-quants): every q8 weight type
  }
  template <DType T>
  static void decode4(const MatmulArgs& a, int r0) {
#if defined(PKV_Q8_VNNI) && PKV_Q8_ZMM
    tile4<T, 1>(a, r0, 0);
#else
    if constexpr (kquant<T>())
      decode4_ymm_k<T>(a, r0);
    else
      decode4_ymm<T>(a, r0);
#endif
  }
  // Block b's f16 scale d (its first two bytes) of four rows, converted exactly: [d_0 .. d_3].
  template <DType T>
  static __m128 d4(const uint8_t* const* rows, int b) {
    uint16_t h[4];
    PKV_UNROLL for (int r = 0; r < 4; ++r) std::memcpy(&h[r], rows[r] + size_t(b) * block_bytes<T>(), 2);
    return _mm_cvtph_ps(_mm_setr_epi16(short(h[0]), short(h[1]), short(h[2]), short(h[3]), 0, 0, 0, 0));
  }
  // Q4_0 / Q4_1 / Q5_0 / Q5_1's per-block header of four rows: [d_r, m_r] per row (lanes 2r, 2r + 1).
  template <DType T>
  static __m256 header4(const uint8_t* const* rows, int b) {
    constexpr int kBytes = block_bytes<T>();
    if constexpr (stored_min<T>()) {
      uint32_t h[4];
      PKV_UNROLL for (int r = 0; r < 4; ++r) std::memcpy(&h[r], rows[r] + size_t(b) * kBytes, 4);
      return _mm256_cvtph_ps(_mm_setr_epi32(int(h[0]), int(h[1]), int(h[2]), int(h[3])));
    } else {  // Q4_0 / Q5_0: [d_r, -8 d_r] / [d_r, -16 d_r], d times 1 and -8 / -16, exact (load_scales' values)
      constexpr float kMin = float(-offset_w<T>());
      return _mm256_mul_ps(_mm256_permutevar8x32_ps(_mm256_castps128_ps256(d4<T>(rows, b)), _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3)),
                           _mm256_setr_ps(1.0f, kMin, 1.0f, kMin, 1.0f, kMin, 1.0f, kMin));
    }
  }
  template <DType T>
  static void decode4_ymm(const MatmulArgs& a, int r0) {
    static_assert(!kquant<T>(), "decode4_ymm: 32-element block types (K-quants: decode4_ymm_k)");
    constexpr int kBytes = block_bytes<T>();
    const int nb = a.k / 32;
    const uint8_t* rows[4];
    for (int r = 0; r < 4; ++r) rows[r] = static_cast<const uint8_t*>(a.w) + size_t(r0 + r) * a.w_row_bytes;
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    __m256 accm = _mm256_setzero_ps();
    const __m256i pick_d = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6);
    for (int b = 0; b < nb; ++b) {
      const XB& x = xq_of<X2>(a)[b];
      const __m256 xs = xscale(x);  // [d_x0 x4, d_x1 x4]
      __m256 sp;  // lanes r and r + 4: d_r * d_x0 and d_r * d_x1 (scale()'s products)
      if constexpr (!has_min<T>()) {  // Q8_0: the four rows' d only
        sp = _mm256_mul_ps(_mm256_permutevar8x32_ps(_mm256_castps128_ps256(d4<T>(rows, b)), _mm256_setr_epi32(0, 1, 2, 3, 0, 1, 2, 3)), xs);
      } else {
        const __m256 hdr = header4<T>(rows, b);  // [d_r, m_r] per row
        sp = _mm256_mul_ps(_mm256_permutevar8x32_ps(hdr, pick_d), xs);
        // Lane 2r + 1: m_r * s + acc (fma_min1's), the even lanes d_r * 0 + 0, never read.
        const __m256 s = _mm256_blend_ps(_mm256_setzero_ps(), _mm256_broadcast_ss(&x.s), 0xaa);
        accm = _mm256_fmadd_ps(hdr, s, accm);
      }
      PKV_UNROLL for (int r = 0; r < 4; ++r) {  // unrolled: acc[] stays in registers
        const uint8_t* blk = rows[r] + size_t(b) * kBytes;
        __builtin_prefetch(blk + PKV_Q8_PREFETCH);
        acc[r] = fma(acc[r], _mm256_permutevar8x32_ps(sp, row_sel(r)), lanes<T>(load_w<T>(blk, 0), x));
      }
    }
    store4<T>(a.y + r0, acc, accm);
  }
  // Row r's lane scales from sp: lanes 0..3 its scale times d_x0 (sp's lane r), 4..7 times d_x1 (r + 4).
  static __m256i row_sel(int r) { return _mm256_setr_epi32(r, r, r, r, r + 4, r + 4, r + 4, r + 4); }
  // The four outputs: each row's eight lanes summed in hsum's order, plus (types with a
  // minimum) lane 2r + 1 of accm.
  template <DType T>
  static void store4(float* y, const __m256* acc, __m256 accm) {
    if constexpr (!has_min<T>()) {
      PKV_UNROLL for (int r = 0; r < 4; ++r) y[r] = hsum(acc[r]);
    } else {
      alignas(32) float m[8];
      _mm256_store_ps(m, accm);
      PKV_UNROLL for (int r = 0; r < 4; ++r) y[r] = hsum(acc[r]) + m[2 * r + 1];
    }
  }
  // fn(std::integral_constant<int, j>{}) for the sub-blocks j = 0 .. 7 of a super-block, in order
  // (j a constant in each call: its shifts and masks become immediates).
  template <class F, int... J>
  static void each_sub_block(F& fn, std::integer_sequence<int, J...>) {
    (fn(std::integral_constant<int, J>{}), ...);
  }
  template <class F>
  static void each_sub_block(F& fn) {
    each_sub_block(fn, std::make_integer_sequence<int, 8>{});
  }
  // The K-quant kernels' hdr is [w_0, w'_0, .. w_3, w'_3]: Q4_K / Q5_K's [d sc, dmin (-m)] per
  // row, whose even lanes are the scales; Q6_K's [d sc_2j, d sc_2j+1] per row, the scales of
  // elements 0..15 then 16..31. kq_pick's permutation puts in lane r the first (times d_x0), in
  // r + 4 the second (times d_x1).
  template <DType T>
  static __m256i kq_pick() {
    return T == DType::Q6_K ? _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7) : _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6);
  }
  // Super-block s of rows r0 .. r0 + NR - 1 into sb[], each prefetched PKV_Q8_PREFETCH ahead, a line
  // per 64 bytes (consecutive addresses at most 64 apart: every line).
  template <DType T, int NR>
  static void kq_super_blocks(const MatmulArgs& a, int r0, int s, const uint8_t* sb[NR]) {
    constexpr int kBytes = block_bytes<T>();
    PKV_UNROLL for (int r = 0; r < NR; ++r) {
      sb[r] = static_cast<const uint8_t*>(a.w) + size_t(r0 + r) * a.w_row_bytes + size_t(s) * kBytes;
      PKV_UNROLL for (int off = 0; off < kBytes; off += 64) __builtin_prefetch(sb[r] + off + PKV_Q8_PREFETCH);
    }
  }
  // K-quants: a super-block's sixteen 8-bit header fields of one row, a 16-bit word per
  // sub-block j -- Q4_K / Q5_K: [sc_j, m_j], the 6-bit scale and minimum unpacked as
  // get_scale_min_k4 packs them; Q6_K: [sc_2j, sc_2j+1], its int8 scales of elements 0..15 and 16..31.
  template <DType T>
  static __m128i kq_fields(const uint8_t* sb) {
    if constexpr (T == DType::Q6_K) {
      return _mm_loadu_si128(reinterpret_cast<const __m128i*>(sb + 192));
    } else {
      uint32_t u[3];
      std::memcpy(u, sb + 4, 12);
      // sc 0..3 = u0 & 63, m 0..3 = u1 & 63; sc 4..7 = low nibbles of u2 | (u0 >> 6) << 4,
      // m 4..7 = high nibbles of u2 | (u1 >> 6) << 4.
      const uint32_t sc_hi = (u[2] & 0x0f0f0f0fu) | (((u[0] >> 6) & 0x03030303u) << 4);
      const uint32_t m_hi = ((u[2] >> 4) & 0x0f0f0f0fu) | (((u[1] >> 6) & 0x03030303u) << 4);
      return _mm_unpacklo_epi8(_mm_setr_epi32(int(u[0] & 0x3f3f3f3fu), int(sc_hi), 0, 0),
                               _mm_setr_epi32(int(u[1] & 0x3f3f3f3fu), int(m_hi), 0, 0));
    }
  }
  // The f32 factors of four rows' header fields, [f_0, f'_0, .. f_3, f'_3]: Q4_K / Q5_K's
  // [d, dmin] per row, Q6_K's [d, d].
  template <DType T>
  static __m256 kq_factors(const uint8_t* const* sb) {
    if constexpr (T == DType::Q6_K) {
      uint16_t h[4];
      PKV_UNROLL for (int r = 0; r < 4; ++r) std::memcpy(&h[r], sb[r] + 208, 2);
      const __m128 d = _mm_cvtph_ps(_mm_setr_epi16(short(h[0]), short(h[1]), short(h[2]), short(h[3]), 0, 0, 0, 0));
      return _mm256_permutevar8x32_ps(_mm256_castps128_ps256(d), _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3));
    } else {
      uint32_t dm[4];
      PKV_UNROLL for (int r = 0; r < 4; ++r) std::memcpy(&dm[r], sb[r], 4);
      return _mm256_cvtph_ps(_mm_setr_epi32(int(dm[0]), int(dm[1]), int(dm[2]), int(dm[3])));
    }
  }
  // Sub-block j's weights of the super-block at sb as unsigned bytes (load_w's values; Q6_K's
  // plus 32): Q4_K / Q5_K sub-blocks 2i and 2i + 1 are the low and high nibbles of the same 32
  // bytes (Q5_K's 5th bit: bit j of qh[i]); Q6_K's j = half h, quarter q has its low 4 bits in
  // nibble q / 2 of ql[64 h + 32 (q & 1)], its high 2 in bits 2q, 2q + 1 of qh[128 + 32 h].
  template <DType T, int j>
  static __m256i kq_weights(const uint8_t* sb) {
    const auto ld = [sb](int off) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sb + off)); };
    const __m256i low4 = _mm256_set1_epi8(0x0f);
    if constexpr (T == DType::Q6_K) {
      constexpr int h = j >> 2, q = j & 3;
      const __m256i ql = ld(64 * h + 32 * (q & 1)), qh = ld(128 + 32 * h);
      const __m256i lo = _mm256_and_si256(q >> 1 ? _mm256_srli_epi16(ql, 4) : ql, low4);
      // Bits 2q, 2q + 1 to 4, 5 (a 16-bit shift: what crosses a byte lands outside 0x30).
      const __m256i hs = q == 0 ? _mm256_slli_epi16(qh, 4) : q == 1 ? _mm256_slli_epi16(qh, 2) : q == 2 ? qh : _mm256_srli_epi16(qh, 2);
      return _mm256_or_si256(lo, _mm256_and_si256(hs, _mm256_set1_epi8(0x30)));
    } else {
      const __m256i qs = ld((T == DType::Q4_K ? 16 : 48) + 32 * (j >> 1));
      const __m256i w = _mm256_and_si256(j & 1 ? _mm256_srli_epi16(qs, 4) : qs, low4);
      if constexpr (T == DType::Q4_K) return w;
      const __m256i bit = _mm256_set1_epi8(char(1 << j));
      return _mm256_or_si256(w, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(ld(16), bit), bit), _mm256_set1_epi8(0x10)));
    }
  }
  // K-quants' decode4 with 256-bit registers, a super-block (eight sub-blocks) of four rows per
  // iteration: the headers are decoded once per super-block (kq_fields per row, a 4 x 8 word
  // transpose by unpacks, then per sub-block one widening and one multiply giving load_scales'
  // products d sc_j and dmin (-m_j) (Q6_K: d sc), exact, so the same values in any order), the
  // sub-blocks unrolled (shifts and Q5_K's bit masks immediates), each doing what decode4_ymm
  // does for a block, in tile<P, T, 4, 1>'s order: the same bits. Q6_K's signed weights q - 32
  // go in unsigned with 32 times each lane's x sum subtracted: the same integer lane sums.
  template <DType T>
  static void decode4_ymm_k(const MatmulArgs& a, int r0) {
    static_assert(kquant<T>(), "decode4_ymm_k: Q4_K, Q5_K and Q6_K");
    PKV_ASSERT(a.k % 256 == 0);  // whole super-blocks (the loader checks every row is)
    const int nsb = a.k / 256;
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    __m256 accm = _mm256_setzero_ps();
    const __m256i pick = kq_pick<T>();  // hdr -> sp's order
    for (int s = 0; s < nsb; ++s) {
      const uint8_t* sb[4];
      kq_super_blocks<T, 4>(a, r0, s, sb);
      const __m256 f = kq_factors<T>(sb);
      // Four rows x eight words -> t[k]: sub-block 2k's word of rows 0..3, then 2k + 1's.
      const __m128i f0 = kq_fields<T>(sb[0]), f1 = kq_fields<T>(sb[1]), f2 = kq_fields<T>(sb[2]), f3 = kq_fields<T>(sb[3]);
      const __m128i a_lo = _mm_unpacklo_epi16(f0, f1), a_hi = _mm_unpackhi_epi16(f0, f1);
      const __m128i b_lo = _mm_unpacklo_epi16(f2, f3), b_hi = _mm_unpackhi_epi16(f2, f3);
      const __m128i t[4] = {_mm_unpacklo_epi32(a_lo, b_lo), _mm_unpackhi_epi32(a_lo, b_lo), _mm_unpacklo_epi32(a_hi, b_hi),
                            _mm_unpackhi_epi32(a_hi, b_hi)};
      const XB* xb = xq_of<X2>(a) + size_t(s) * 8;
      const auto sub = [&](auto jc) {
        constexpr int j = decltype(jc)::value;
        const XB& x = xb[j];
        const __m128i bytes = j & 1 ? _mm_srli_si128(t[j >> 1], 8) : t[j >> 1];
        __m256 hdr;
        if constexpr (T == DType::Q6_K) {
          hdr = _mm256_mul_ps(f, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes)));
        } else {  // the minima negated as integers (float(-m): +0 for m = 0, as load_scales computes it)
          const __m256i i = _mm256_sign_epi32(_mm256_cvtepu8_epi32(bytes), _mm256_setr_epi32(1, -1, 1, -1, 1, -1, 1, -1));
          hdr = _mm256_mul_ps(f, _mm256_cvtepi32_ps(i));
        }
        const __m256 sp = _mm256_mul_ps(_mm256_permutevar8x32_ps(hdr, pick), xscale(x));
        if constexpr (T != DType::Q6_K) {  // lane 2r + 1: dmin_r (-m_j) * s + acc (fma_min1's)
          const __m256 sx = _mm256_blend_ps(_mm256_setzero_ps(), _mm256_broadcast_ss(&x.s), 0xaa);
          accm = _mm256_fmadd_ps(hdr, sx, accm);
        }
        __m256i x32;  // Q6_K: 32 times each lane's x sum
        if constexpr (T == DType::Q6_K) x32 = lanes<DType::Q4_K>(_mm256_set1_epi8(32), x);
        PKV_UNROLL for (int r = 0; r < 4; ++r) {
          __m256i l = lanes<DType::Q4_K>(kq_weights<T, j>(sb[r]), x);  // unsigned weights
          if constexpr (T == DType::Q6_K) l = _mm256_sub_epi32(l, x32);
          acc[r] = fma(acc[r], _mm256_permutevar8x32_ps(sp, row_sel(r)), l);
        }
      };
      each_sub_block(sub);
    }
    store4<T>(a.y + r0, acc, accm);
  }
  // One row x NT tokens (NT 8, or 4 for a tail), every q8 weight type: tile<P, T, 1, NT>'s
  // operations on its values (load_w, load_scales, scale, lanes, fma, fma_min once per row,
  // block and token, in the same order), so the same bits, but with the minimum term of all
  // NT tokens in one FMA: sT[8 b + t] is token t0 + t's block sum s of block b (prefill fills it).
  template <DType T, int NT>
  static void tile1_ymm(const MatmulArgs& a, int r, int t0, const float* sT) {
    static_assert(NT <= 8, "tile1_ymm: the minimum term keeps one lane per token, eight lanes");
    const int nb = a.k / 32;
    const uint8_t* row = static_cast<const uint8_t*>(a.w) + size_t(r) * a.w_row_bytes;
    const XB* xt[NT];
    PKV_UNROLL for (int t = 0; t < NT; ++t) xt[t] = xq_of<X2>(a) + size_t(t0 + t) * nb;
    __m256 acc[NT];
    PKV_UNROLL for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
    __m256 accm = _mm256_setzero_ps();
    const auto block = [&](const uint8_t* blk, auto jc, int b) {
      constexpr int j = decltype(jc)::value;
      const D dm = load_scales<T>(blk, j);
      const W w = load_w<T>(blk, j);
      if constexpr (has_min<T>())  // lane t: m_w * s_t + acc (fma_min's)
        accm = _mm256_fmadd_ps(_mm256_broadcastss_ps(_mm_movehdup_ps(dm)), _mm256_loadu_ps(sT + size_t(b) * 8), accm);
      PKV_UNROLL for (int t = 0; t < NT; ++t) {
        const XB& x = xt[t][b];
        acc[t] = fma(acc[t], scale<T>(dm, xscale(x)), lanes<T>(w, x));
      }
    };
    if constexpr (kquant<T>()) {
      PKV_ASSERT(a.k % 256 == 0);  // whole super-blocks (the loader checks every row is)
      for (int s = 0; s < nb / 8; ++s) {
        const uint8_t* sb[1];
        kq_super_blocks<T, 1>(a, r, s, sb);
        const auto sub = [&](auto jc) { block(sb[0], jc, s * 8 + decltype(jc)::value); };
        each_sub_block(sub);
      }
    } else {
      for (int b = 0; b < nb; ++b) {
        const uint8_t* blk = row + size_t(b) * block_bytes<T>();
        __builtin_prefetch(blk + PKV_Q8_PREFETCH);
        block(blk, std::integral_constant<int, 0>{}, b);
      }
    }
    alignas(32) float m[8];
    _mm256_store_ps(m, accm);
    PKV_UNROLL for (int t = 0; t < NT; ++t) {
      float y = hsum(acc[t]);
      if constexpr (has_min<T>()) y = y + m[t];
      a.y[size_t(t0 + t) * a.ldy + r] = y;
    }
  }
  // rows()'s prefill hook (HasPrefill): tokens in groups of 8, each group's block sums
  // transposed once into sT (on the stack: k up to kPrefillMaxK) and every row of the task
  // through tile1_ymm; a tail of 4 to 7 tokens takes tile1_ymm<T, 4> first, then single tokens
  // rows()'s decode path. False (rows() uses the generic tiles) past kPrefillMaxK.
#if !(defined(PKV_Q8_VNNI) && PKV_Q8_ZMM)
  static constexpr int kPrefillMaxK = 16384;
  template <DType T>
  static bool prefill(const MatmulArgs& a, int row_begin, int row_end) {
    const int nb = a.k / 32;
    if (a.k > kPrefillMaxK) return false;
    alignas(32) float sT[kPrefillMaxK / 32 * 8];
    for (int t0 = 0; t0 < a.n_tok;) {
      const int n = std::min(8, a.n_tok - t0);
      if (n >= 4) {
        if constexpr (has_min<T>()) {
          for (int b = 0; b < nb; ++b)
            PKV_UNROLL for (int t = 0; t < 8; ++t) sT[8 * b + t] = t < n ? xq_of<X2>(a)[size_t(t0 + t) * nb + b].s : 0.0f;
        }
        for (int r = row_begin; r < row_end; ++r) {
          if (n == 8)
            tile1_ymm<T, 8>(a, r, t0, sT);
          else
            tile1_ymm<T, 4>(a, r, t0, sT);
        }
        t0 += n == 8 ? 8 : 4;
        continue;
      }
      MatmulArgs one = from_token<X2>(a, t0);  // one token: rows()'s decode path
      one.n_tok = 1;
      rows<PKV_Q8_AVX2_POLICY_T, T>(one, row_begin, row_end);
      ++t0;
    }
    return true;
  }
#endif
#if !defined(PKV_Q8_VNNI)
  // The R16 layout (cpu_kernels.h WeightLayout::R16) read with AVX2: each 64-byte part of a
  // block is two 32-byte halves, rows 0 .. 7 and 8 .. 15 of the group, whose int32 lanes are the
  // rows as in tile16_r16. maddubs multiplies a half's low (high) nibbles with the four x bytes of
  // that part broadcast; the four parts' pair sums add up in int16 exactly (each at most
  // 2 * 15 * 128 = 3840, four 15360 < 32767), and one madd per half block makes them the half's
  // exact int32 sum I_h -- the integer tile16_r16's dpbusd chain gives. Then the same conversion
  // and fmas per row, in the same order: the same bits as the AVX-512 VNNI R16 kernels. NH row
  // halves (of 8) from half j0 of group g, NT tokens from t0.
  template <DType T, int NT, int NH>
  static void tile_r16_ymm(const MatmulArgs& a, int g, int j0, int t0) {
    static_assert(r16_supported(T), "tile_r16_ymm: R16's types");
    constexpr bool kQ8 = T == DType::Q8_0;
    constexpr int kH = r16_header_bytes(T), kQB = r16_quant_bytes(T), kS = X2 ? 4 : 2;
    const int nb = a.k / 32;
    const uint8_t* qs = static_cast<const uint8_t*>(a.w) + size_t(g) * nb * kQB + 32 * j0;
    const uint8_t* hs = static_cast<const uint8_t*>(a.w_hdr) + size_t(g) * nb * kH + 16 * j0;
    __m256 acc[NT][NH], accm[NT][NH];
    PKV_UNROLL for (int t = 0; t < NT; ++t) PKV_UNROLL for (int j = 0; j < NH; ++j) acc[t][j] = accm[t][j] = _mm256_setzero_ps();
    const __m256i low4 = _mm256_set1_epi8(0x0f);
    for (int b = 0; b < nb; ++b) {
      const uint8_t* q = qs + size_t(b) * kQB;
      const uint8_t* h = hs + size_t(b) * kH;
      PKV_UNROLL for (int off = 0; off < kQB; off += 64) __builtin_prefetch(q - 32 * j0 + off + PKV_Q8_PREFETCH);
      if constexpr (kH == 64) __builtin_prefetch(h - 16 * j0 + PKV_Q8_PREFETCH / 4);
      else if ((b & 1) == 0) __builtin_prefetch(h - 16 * j0 + PKV_Q8_PREFETCH / 8);
      // Q4: int16 pair sums, Q8_0: int32 sums -- q half 0, q half 1, (q8x2) r half 0, r half 1
      __m256i sum[NT][NH][kS];
      PKV_UNROLL for (int t = 0; t < NT; ++t) PKV_UNROLL for (int j = 0; j < NH; ++j) PKV_UNROLL for (int i = 0; i < kS; ++i)
        sum[t][j][i] = _mm256_setzero_si256();
      // Q8_0's signed weights: maddubs of |w| and sign(x, w) (each pair sum at most 2 * 128 * 127,
      // so no saturation; madd takes every part to int32 at once), part L holding elements 4 L ..
      if constexpr (kQ8) PKV_UNROLL for (int part = 0; part < 8; ++part) {
        __m256i w[NH], aw[NH];
        PKV_UNROLL for (int j = 0; j < NH; ++j) {
          w[j] = _mm256_load_si256(reinterpret_cast<const __m256i*>(q + 64 * part + 32 * j));
          aw[j] = _mm256_abs_epi8(w[j]);
        }
        PKV_UNROLL for (int t = 0; t < NT; ++t) {
          const XB& x = xq_of<X2>(a)[size_t(t0 + t) * nb + b];
          int32_t x0;
          std::memcpy(&x0, x.q + 4 * part, 4);
          const __m256i b0 = _mm256_set1_epi32(x0), one = _mm256_set1_epi16(1);
          PKV_UNROLL for (int j = 0; j < NH; ++j)
            sum[t][j][part / 4] = _mm256_add_epi32(sum[t][j][part / 4], _mm256_madd_epi16(_mm256_maddubs_epi16(aw[j], _mm256_sign_epi8(b0, w[j])), one));
          if constexpr (X2) {
            std::memcpy(&x0, x.r + 4 * part, 4);
            const __m256i r0 = _mm256_set1_epi32(x0);
            PKV_UNROLL for (int j = 0; j < NH; ++j)
              sum[t][j][2 + part / 4] = _mm256_add_epi32(sum[t][j][2 + part / 4], _mm256_madd_epi16(_mm256_maddubs_epi16(aw[j], _mm256_sign_epi8(r0, w[j])), one));
          }
        }
      }
      else PKV_UNROLL for (int part = 0; part < 4; ++part) {
        __m256i lo[NH], hi[NH];
        PKV_UNROLL for (int j = 0; j < NH; ++j) {
          const __m256i v = _mm256_load_si256(reinterpret_cast<const __m256i*>(q + 64 * part + 32 * j));
          lo[j] = _mm256_and_si256(v, low4);
          hi[j] = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
        }
        PKV_UNROLL for (int t = 0; t < NT; ++t) {
          const XB& x = xq_of<X2>(a)[size_t(t0 + t) * nb + b];
          int32_t x0, x1;
          std::memcpy(&x0, x.q + 4 * part, 4);
          std::memcpy(&x1, x.q + 16 + 4 * part, 4);
          const __m256i b0 = _mm256_set1_epi32(x0), b1 = _mm256_set1_epi32(x1);
          PKV_UNROLL for (int j = 0; j < NH; ++j) {
            sum[t][j][0] = _mm256_add_epi16(sum[t][j][0], _mm256_maddubs_epi16(lo[j], b0));
            sum[t][j][1] = _mm256_add_epi16(sum[t][j][1], _mm256_maddubs_epi16(hi[j], b1));
          }
          if constexpr (X2) {
            std::memcpy(&x0, x.r + 4 * part, 4);
            std::memcpy(&x1, x.r + 16 + 4 * part, 4);
            const __m256i r0 = _mm256_set1_epi32(x0), r1 = _mm256_set1_epi32(x1);
            PKV_UNROLL for (int j = 0; j < NH; ++j) {
              sum[t][j][kS - 2] = _mm256_add_epi16(sum[t][j][kS - 2], _mm256_maddubs_epi16(lo[j], r0));
              sum[t][j][kS - 1] = _mm256_add_epi16(sum[t][j][kS - 1], _mm256_maddubs_epi16(hi[j], r1));
            }
          }
        }
      }
      PKV_UNROLL for (int j = 0; j < NH; ++j) {
        const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + 16 * j)));
        // Q4_1's stored minima; Q4_0's d_r * -8 (exact: a power of two); Q8_0 none
        [[maybe_unused]] const __m256 m = T == DType::Q4_1 ? _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + 32 + 16 * j)))
                                          : _mm256_mul_ps(d, _mm256_set1_ps(-8.0f));
        PKV_UNROLL for (int t = 0; t < NT; ++t) {
          const XB& x = xq_of<X2>(a)[size_t(t0 + t) * nb + b];
          __m256i i0, i1;
          if constexpr (kQ8 && X2) {
            i0 = _mm256_add_epi32(_mm256_slli_epi32(sum[t][j][0], 7), sum[t][j][2]);
            i1 = _mm256_add_epi32(_mm256_slli_epi32(sum[t][j][1], 7), sum[t][j][3]);
          } else if constexpr (kQ8) {
            i0 = sum[t][j][0];
            i1 = sum[t][j][1];
          } else if constexpr (X2) {  // 128 sum(w q) + sum(w r), exact in int32 as tile16_r16's
            i0 = _mm256_add_epi32(_mm256_madd_epi16(sum[t][j][0], _mm256_set1_epi16(128)), _mm256_madd_epi16(sum[t][j][2], _mm256_set1_epi16(1)));
            i1 = _mm256_add_epi32(_mm256_madd_epi16(sum[t][j][1], _mm256_set1_epi16(128)), _mm256_madd_epi16(sum[t][j][3], _mm256_set1_epi16(1)));
          } else {
            i0 = _mm256_madd_epi16(sum[t][j][0], _mm256_set1_epi16(1));
            i1 = _mm256_madd_epi16(sum[t][j][1], _mm256_set1_epi16(1));
          }
          acc[t][j] = _mm256_fmadd_ps(_mm256_mul_ps(d, _mm256_set1_ps(x.d[0])), _mm256_cvtepi32_ps(i0), acc[t][j]);
          acc[t][j] = _mm256_fmadd_ps(_mm256_mul_ps(d, _mm256_set1_ps(x.d[1])), _mm256_cvtepi32_ps(i1), acc[t][j]);
          if constexpr (!kQ8) accm[t][j] = _mm256_fmadd_ps(m, _mm256_set1_ps(x.s), accm[t][j]);
        }
      }
    }
    PKV_UNROLL for (int t = 0; t < NT; ++t) PKV_UNROLL for (int j = 0; j < NH; ++j)
      _mm256_storeu_ps(a.y + size_t(t0 + t) * a.ldy + 16 * size_t(g) + 8 * size_t(j0 + j), _mm256_add_ps(acc[t][j], accm[t][j]));
  }
// Row halves per decode tile. Both (the x broadcasts once per 16 rows): q8x2 decode 1.05-1.09x
// faster than one at a time (SmolLM2, 2 threads, 4 interleaved rounds, twenty-third session's
// host), q8 the same in q8_bench.
#ifndef PKV_R16_YMM_DECODE_NH
#define PKV_R16_YMM_DECODE_NH 2
#endif
#ifndef PKV_R16_YMM_PREFILL_NT  // tokens per prefill tile (one row half)
#define PKV_R16_YMM_PREFILL_NT 2
#endif
  template <DType T>
  static void rows_r16(const MatmulArgs& a, int row_begin, int row_end) {
    PKV_ASSERT(row_begin % 16 == 0 && row_end % 16 == 0);
    PKV_ASSERT(reinterpret_cast<uintptr_t>(a.w) % 32 == 0);  // tile_r16_ymm's aligned loads (RepackedWeights aligns to 64)
    constexpr int NH = PKV_R16_YMM_DECODE_NH, NT = PKV_R16_YMM_PREFILL_NT;
    if (a.n_tok == 1) {
      for (int r = row_begin; r < row_end; r += 16)
        PKV_UNROLL for (int j = 0; j < 2; j += NH) tile_r16_ymm<T, 1, NH>(a, r / 16, j, 0);
      return;
    }
    for (int t0 = 0; t0 < a.n_tok; t0 += PKV_Q8_TOKEN_BLOCK) {
      const int t1 = std::min(a.n_tok, t0 + PKV_Q8_TOKEN_BLOCK);
      for (int r = row_begin; r < row_end; r += 16)
        for (int j = 0; j < 2; ++j) {
          int t = t0;
          for (; t + NT <= t1; t += NT) tile_r16_ymm<T, NT, 1>(a, r / 16, j, t);
          for (; t < t1; ++t) tile_r16_ymm<T, 1, 1>(a, r / 16, j, t);
        }
    }
  }
#endif
#if !defined(PKV_Q8_VNNI) || PKV_Q8_ZMM
  // Rows of a matrix in the R16 layout, by type: rows_r16 is AVX2's (tile_r16_ymm) or AVX-512's
  // (tile16_r16), whichever this translation unit compiles.
  static void matmul_rows_r16(const MatmulArgs& a, int row_begin, int row_end) {
    switch (a.wtype) {
      case DType::Q4_0: return rows_r16<DType::Q4_0>(a, row_begin, row_end);
      case DType::Q4_1: return rows_r16<DType::Q4_1>(a, row_begin, row_end);
      case DType::Q8_0: return rows_r16<DType::Q8_0>(a, row_begin, row_end);
      default: PKV_ASSERT(!"matmul_q8_rows_r16: a weight type without an R16 layout (r16_supported)");
    }
  }
#endif
#if defined(PKV_Q8_VNNI) && PKV_Q8_ZMM
// GCC 12's avx512fintrin.h passes _mm512_undefined_*() as the unused merge source of unmasked
// intrinsics, which -Wmaybe-uninitialized reports (GCC bug 105593, fixed in 13): silenced here only.
#if !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
  // Four rows x NT tokens with 512-bit registers (AVX-512 F/BW + VNNI): decode (NT = 1) and
  // prefill (NT = 4 or 8, P::tile4). Rows r0, r0 + 1 in one register and r0 + 2, r0 + 3 in another,
  // eight lanes each, per token -- lane j of row r's half holds exactly what lane j of tile<P, T,
  // NR, NT>'s acc[r][t] holds: the same dpbusd lane sums, the same scale products, the same FMA
  // per block in the same order, and hsum over the same eight lanes, so the same bits
  // (tests/unit/test_q8.cpp), with half the convert and FMA instructions per row, block and
  // token, and each block's weights unpacked once for all NT tokens (docs/PERFORMANCE.md).
  static constexpr bool kHasTile4 = true;
  // 8 tokens per tile for the 32-element block types: faster than 4 by 1.08x (Q5_0), 1.20x
  // (Q8_0), 1.03x (Q4_1) (phasekv_q8_bench --tokens 64, medians of 8 interleaved pairs); K-quants'
  // 0.74x (16 accumulators and the unpacked sub-block headers do not fit 32 registers): 4.
  template <DType T>
  static constexpr bool tile4_wide() {
    return !kquant<T>();
  }
  template <DType T, int NT>
  static void tile4(const MatmulArgs& a, int r0, int t0) {
    if constexpr (kquant<T>())
      tile4_zmm_k<T, NT>(a, r0, t0);
    else
      tile4_zmm<T, NT>(a, r0, t0);
  }
  static __m256 upper(__m512 v) { return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)); }
  // [lo, hi] of two rows' 32 bytes at offset `off` of their blocks.
  static __m512i load2(const uint8_t* ra, const uint8_t* rb, int off) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(ra + off))),
                              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rb + off)), 1);
  }
  // Lane scales of a row pair from sp (lane r: row r's scale times d_x0, r + 4: times d_x1).
  static __m512 pair_scales(__m256 sp, int p) {
    const __m512i idx01 = _mm512_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4, 1, 1, 1, 1, 5, 5, 5, 5);
    const __m512i idx23 = _mm512_setr_epi32(2, 2, 2, 2, 6, 6, 6, 6, 3, 3, 3, 3, 7, 7, 7, 7);
    return _mm512_permutexvar_ps(p == 0 ? idx01 : idx23, _mm512_castps256_ps512(sp));
  }
  template <DType T, int NT>
  static void tile4_zmm(const MatmulArgs& a, int r0, int t0) {
    static_assert(T == DType::Q4_0 || T == DType::Q4_1 || T == DType::Q5_0 || T == DType::Q5_1 || T == DType::Q8_0,
                  "tile4_zmm: Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0 (K-quants: tile4_zmm_k)");
    constexpr int kBytes = block_bytes<T>();
    // Q4_* / Q5_*: the packed nibbles' offset in a block (after d, m and Q5's qh)
    constexpr int kQs = 2 + (stored_min<T>() ? 2 : 0) + (T == DType::Q5_0 || T == DType::Q5_1 ? 4 : 0);
    const int nb = a.k / 32;
    const uint8_t* rows[4];
    for (int r = 0; r < 4; ++r) rows[r] = static_cast<const uint8_t*>(a.w) + size_t(r0 + r) * a.w_row_bytes;
    __m512 acc[NT][2];
    __m256 accm[NT];
    PKV_UNROLL for (int t = 0; t < NT; ++t) {
      acc[t][0] = acc[t][1] = _mm512_setzero_ps();
      accm[t] = _mm256_setzero_ps();
    }
    const __m256i pick_d = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6);
    // 128-bit lane i of [row a, row b] shifted by 0 (low nibbles) or 4 (high nibbles).
    const __m512i shift = _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4);
    const __m512i low4 = _mm512_set1_epi8(0x0f);
    for (int b = 0; b < nb; ++b) {
      const uint8_t* blk[4];
      PKV_UNROLL for (int r = 0; r < 4; ++r) {
        blk[r] = rows[r] + size_t(b) * kBytes;
        __builtin_prefetch(blk[r] + PKV_Q8_PREFETCH);
      }
      // The rows' scales: Q8_0 [d_0 .. d_3] (twice), else [d_r, m_r] per row.
      const __m256 hdr = T == DType::Q8_0 ? _mm256_permutevar8x32_ps(_mm256_castps128_ps256(d4<T>(rows, b)), _mm256_setr_epi32(0, 1, 2, 3, 0, 1, 2, 3))
                                          : header4<T>(rows, b);
      // The weights of row pairs (0, 1) and (2, 3), once for every token: lanes 0..31 row a's
      // elements, 32..63 row b's. Q8_0 signed: |w| and w's sign mask (the sign trick of lanes();
      // where w = 0 the product is 0 either way, so the integer lane sums are lanes()' exactly).
      __m512i w[2];
      __mmask64 neg[2];
      PKV_UNROLL for (int p = 0; p < 2; ++p) {
        if constexpr (T == DType::Q8_0) {
          const __m512i v = load2(blk[2 * p], blk[2 * p + 1], 2);
          neg[p] = _mm512_movepi8_mask(v);
          w[p] = _mm512_abs_epi8(v);
        } else {
          // [qs_a, qs_a, qs_b, qs_b] (two broadcast loads, one insert) -> nibbles.
          const __m256i qa = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk[2 * p] + kQs)));
          const __m256i qb = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk[2 * p + 1] + kQs)));
          w[p] = _mm512_and_si512(_mm512_srlv_epi64(_mm512_inserti64x4(_mm512_castsi256_si512(qa), qb, 1), shift), low4);
          if constexpr (T == DType::Q5_0 || T == DType::Q5_1) {
            // The 5th bit of element i (lane i of its row's half) is bit i of qh: 0x10 added
            // under the mask [qh_a, qh_b] (a nibble plus 16 is the nibble or 16: load_w's values).
            const __mmask64 hi = _cvtu64_mask64(uint64_t(qh_bits<T>(blk[2 * p])) | uint64_t(qh_bits<T>(blk[2 * p + 1])) << 32);
            w[p] = _mm512_mask_add_epi8(w[p], hi, w[p], _mm512_set1_epi8(0x10));
          }
        }
      }
      PKV_UNROLL for (int t = 0; t < NT; ++t) {
        const XB& x = xq_of<X2>(a)[size_t(t0 + t) * nb + b];
        // lane r: d_r * d_x0, r + 4: d_r * d_x1 (scale()'s products)
        const __m256 sp = _mm256_mul_ps(T == DType::Q8_0 ? hdr : _mm256_permutevar8x32_ps(hdr, pick_d), xscale(x));
        if constexpr (T != DType::Q8_0) {  // lane 2r + 1: m_r * s + acc (fma_min1's)
          const __m256 s = _mm256_blend_ps(_mm256_setzero_ps(), _mm256_broadcast_ss(&x.s), 0xaa);
          accm[t] = _mm256_fmadd_ps(hdr, s, accm[t]);
        }
        const __m512i xq = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.q)));
        __m512i xr;  // q8x2: the low halves r
        if constexpr (X2) xr = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.r)));
        PKV_UNROLL for (int p = 0; p < 2; ++p) {
          const __m512i xs = T == DType::Q8_0 ? _mm512_mask_sub_epi8(xq, neg[p], _mm512_setzero_si512(), xq) : xq;
          __m512i l = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w[p], xs);
          if constexpr (X2) {  // 128 sum(w q) + sum(w r)
            const __m512i rs = T == DType::Q8_0 ? _mm512_mask_sub_epi8(xr, neg[p], _mm512_setzero_si512(), xr) : xr;
            l = _mm512_dpbusd_epi32(_mm512_slli_epi32(l, 7), w[p], rs);
          }
          acc[t][p] = _mm512_fmadd_ps(pair_scales(sp, p), _mm512_cvtepi32_ps(l), acc[t][p]);
        }
      }
    }
    PKV_UNROLL for (int t = 0; t < NT; ++t) store4<T>(a, r0, t0 + t, acc[t][0], acc[t][1], accm[t]);
  }
  // Token t's four outputs: store4 on each row's eight lanes.
  template <DType T>
  static void store4(const MatmulArgs& a, int r0, int t, __m512 acc01, __m512 acc23, __m256 accm) {
    const __m256 acc[4] = {_mm512_castps512_ps256(acc01), upper(acc01), _mm512_castps512_ps256(acc23), upper(acc23)};
    store4<T>(a.y + size_t(t) * a.ldy + r0, acc, accm);
  }
  // K-quants' tile4 with 512-bit registers, a super-block (eight sub-blocks) of four rows per
  // iteration: decode4_ymm_k's scheme with tile4_zmm's row pairs. The four rows' kq_fields in
  // one 128-bit lane each, one vpermw transposes them to a word per (sub-block, row), and per two
  // sub-blocks one widening and one multiply give load_scales' products (exact). The same bits.
  template <DType T, int NT>
  static void tile4_zmm_k(const MatmulArgs& a, int r0, int t0) {
    static_assert(kquant<T>(), "tile4_zmm_k: Q4_K, Q5_K and Q6_K");
    PKV_ASSERT(a.k % 256 == 0);  // whole super-blocks (the loader checks every row is)
    const int nsb = a.k / 256, nb = a.k / 32;
    __m512 acc[NT][2];
    __m256 accm[NT];
    PKV_UNROLL for (int t = 0; t < NT; ++t) {
      acc[t][0] = acc[t][1] = _mm512_setzero_ps();
      accm[t] = _mm256_setzero_ps();
    }
    const __m256i pick = kq_pick<T>();  // hdr -> sp's order
    // Word r * 8 + j (row r's field pair of sub-block j) -> word 4 j + r.
    const __m512i transpose = _mm512_setr_epi32(0x00080000, 0x00180010, 0x00090001, 0x00190011, 0x000a0002, 0x001a0012,
                                                0x000b0003, 0x001b0013, 0x000c0004, 0x001c0014, 0x000d0005, 0x001d0015,
                                                0x000e0006, 0x001e0016, 0x000f0007, 0x001f0017);
    const __m512i low4 = _mm512_set1_epi8(0x0f);
    for (int s = 0; s < nsb; ++s) {
      const uint8_t* sb[4];
      kq_super_blocks<T, 4>(a, r0, s, sb);
      // kq_factors twice: [f_r, f'_r] per row for sub-blocks 2k and 2k + 1.
      const __m256 fy = kq_factors<T>(sb);
      const __m512 f16 = _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(fy)), _mm256_castps_pd(fy), 1));
      __m512i f = _mm512_inserti32x4(_mm512_castsi128_si512(kq_fields<T>(sb[0])), kq_fields<T>(sb[1]), 1);
      f = _mm512_inserti32x4(_mm512_inserti32x4(f, kq_fields<T>(sb[2]), 2), kq_fields<T>(sb[3]), 3);
      f = _mm512_permutexvar_epi16(transpose, f);
      const auto widen = [&](__m128i v) {
        if constexpr (T == DType::Q6_K) return _mm512_mul_ps(f16, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(v)));
        // The minima negated as integers (float(-m): +0 for m = 0, as load_scales computes it).
        const __m512i i = _mm512_cvtepu8_epi32(v);
        return _mm512_mul_ps(f16, _mm512_cvtepi32_ps(_mm512_mask_sub_epi32(i, 0xaaaa, _mm512_setzero_si512(), i)));
      };
      // Sub-blocks 2k (low eight lanes) and 2k + 1 (high): hdr's layout.
      const __m512 hk[4] = {widen(_mm512_castsi512_si128(f)), widen(_mm512_extracti32x4_epi32(f, 1)),
                            widen(_mm512_extracti32x4_epi32(f, 2)), widen(_mm512_extracti32x4_epi32(f, 3))};
      const auto sub = [&](auto jc) {
        constexpr int j = decltype(jc)::value;
        const __m256 hdr = (j & 1) ? upper(hk[j >> 1]) : _mm512_castps512_ps256(hk[j >> 1]);
        // Row pairs (0, 1) and (2, 3)'s weights as unsigned bytes, once for every token.
        __m512i w[2];
        PKV_UNROLL for (int p = 0; p < 2; ++p) {
          const uint8_t* ra = sb[2 * p];
          const uint8_t* rb = sb[2 * p + 1];
          if constexpr (T == DType::Q6_K) {
            // Sub-block j = half h, quarter q: low 4 bits nibble q / 2 of ql[64 h + 32 (q & 1)],
            // high 2 bits bits 2q, 2q + 1 of qh[128 + 32 h] (load_w's values, plus 32).
            constexpr int h = j >> 2, q = j & 3;
            const __m512i ql = load2(ra, rb, 64 * h + 32 * (q & 1));
            const __m512i qh = load2(ra, rb, 128 + 32 * h);
            const __m512i lo = _mm512_and_si512(q >> 1 ? _mm512_srli_epi16(ql, 4) : ql, low4);
            // Bits 2q, 2q + 1 to 4, 5 (a 16-bit shift: what crosses a byte lands outside 0x30).
            const __m512i hs = q == 0 ? _mm512_slli_epi16(qh, 4) : q == 1 ? _mm512_slli_epi16(qh, 2) : q == 2 ? qh : _mm512_srli_epi16(qh, 2);
            w[p] = _mm512_or_si512(lo, _mm512_and_si512(hs, _mm512_set1_epi8(0x30)));
          } else {
            // Sub-blocks 2i and 2i + 1 are the low and high nibbles of the same 32 bytes.
            constexpr int kOff = T == DType::Q4_K ? 16 : 48;
            const __m512i qs = load2(ra, rb, kOff + 32 * (j >> 1));
            w[p] = _mm512_and_si512(j & 1 ? _mm512_srli_epi16(qs, 4) : qs, low4);
            if constexpr (T == DType::Q5_K) {  // the 5th bit: bit j of qh[i], 16 added under it
              const __mmask64 hi = _mm512_test_epi8_mask(load2(ra, rb, 16), _mm512_set1_epi8(char(1 << j)));
              w[p] = _mm512_mask_add_epi8(w[p], hi, w[p], _mm512_set1_epi8(0x10));
            }
          }
        }
        PKV_UNROLL for (int t = 0; t < NT; ++t) {
          const XB& x = xq_of<X2>(a)[size_t(t0 + t) * nb + 8 * size_t(s) + j];
          const __m256 sp = _mm256_mul_ps(_mm256_permutevar8x32_ps(hdr, pick), xscale(x));
          if constexpr (T != DType::Q6_K) {  // lane 2r + 1: dmin_r (-m_j) * s + acc (fma_min1's)
            const __m256 sx = _mm256_blend_ps(_mm256_setzero_ps(), _mm256_broadcast_ss(&x.s), 0xaa);
            accm[t] = _mm256_fmadd_ps(hdr, sx, accm[t]);
          }
          const __m512i xq = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.q)));
          __m512i xr;  // q8x2: the low halves r
          if constexpr (X2) xr = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.r)));
          __m512i x32;  // Q6_K: 32 times the sum of each lane's four x (w = q - 32: sum q x - 32 sum x)
          if constexpr (T == DType::Q6_K) {
            x32 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(32), xq);
            if constexpr (X2) x32 = _mm512_dpbusd_epi32(_mm512_slli_epi32(x32, 7), _mm512_set1_epi8(32), xr);
          }
          PKV_UNROLL for (int p = 0; p < 2; ++p) {
            __m512i l = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w[p], xq);
            if constexpr (X2) l = _mm512_dpbusd_epi32(_mm512_slli_epi32(l, 7), w[p], xr);
            if constexpr (T == DType::Q6_K) l = _mm512_sub_epi32(l, x32);
            acc[t][p] = _mm512_fmadd_ps(pair_scales(sp, p), _mm512_cvtepi32_ps(l), acc[t][p]);
          }
        }
      };
      each_sub_block(sub);
    }
    PKV_UNROLL for (int t = 0; t < NT; ++t) store4<T>(a, r0, t0 + t, acc[t][0], acc[t][1], accm[t]);
  }
  // tile4_zmm on weights in the R4 layout (cpu_kernels.h WeightLayout::R4, repack_r4): four rows
  // x NT tokens of group g (rows 4g .. 4g + 3). The same operations on the same values as
  // tile4_zmm -- each row's eight lanes per block are the same dpbusd lane sums (elements 4j ..
  // 4j + 3), scaled by the same products d_r * d_x,h, fused in block order, the minimum term
  // m_r * s + acc per block in its own lane, hsum over the same eight lanes -- so the same bits;
  // what changes is only how the values reach the registers: a block's 64 bytes of packed
  // nibbles of all four rows in one aligned 512-bit load (two for Q8_0) that splits into the two
  // row pairs with one shift and two ands, and the four rows' f16 scales in one 8-byte broadcast
  // load, where tile4_zmm gathers them from four rows 20 bytes apart (four loads and inserts, the
  // shuffle port's work) every block.
  template <DType T, int NT>
  static void tile4_r4(const MatmulArgs& a, int g, int t0) {
    static_assert(T == DType::Q4_0 || T == DType::Q4_1 || T == DType::Q8_0, "tile4_r4: Q4_0, Q4_1 and Q8_0 (r4_supported)");
    constexpr int kQ = r4_quant_bytes(T), kH = r4_header_bytes(T);
    const int nb = a.k / 32;
    const uint8_t* qs = static_cast<const uint8_t*>(a.w) + size_t(g) * nb * kQ;
    const uint8_t* hs = static_cast<const uint8_t*>(a.w_hdr) + size_t(g) * nb * kH;
    __m512 acc[NT][2];
    __m128 accm[NT];  // lane r: row r's minimum term
    PKV_UNROLL for (int t = 0; t < NT; ++t) {
      acc[t][0] = acc[t][1] = _mm512_setzero_ps();
      accm[t] = _mm_setzero_ps();
    }
    const __m512i low4 = _mm512_set1_epi8(0x0f);
    for (int b = 0; b < nb; ++b) {
      const uint8_t* q = qs + size_t(b) * kQ;
      const uint8_t* h = hs + size_t(b) * kH;
      __builtin_prefetch(q + PKV_Q8_PREFETCH);
      if constexpr (kQ == 128) __builtin_prefetch(q + 64 + PKV_Q8_PREFETCH);
      if ((b & 3) == 0) __builtin_prefetch(h + PKV_Q8_PREFETCH / 4);
      // [d_0 .. d_3] twice (an 8-byte broadcast load, converted exactly by F16C)
      int64_t d16;
      std::memcpy(&d16, h, 8);
      const __m256 d8 = _mm256_cvtph_ps(_mm_set1_epi64x(d16));
      __m128 m4 = _mm_setzero_ps();  // [m_0 .. m_3]: Q4_1's stored minima, Q4_0's d_r * -8 (load_scales' values)
      if constexpr (T == DType::Q4_1) {
        m4 = _mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(h + 8)));
      } else if constexpr (T == DType::Q4_0) {
        m4 = _mm_mul_ps(_mm256_castps256_ps128(d8), _mm_set1_ps(float(-offset_w<T>())));
      }
      __m512i w[2];
      __mmask64 neg[2];
      if constexpr (T == DType::Q8_0) {
        PKV_UNROLL for (int p = 0; p < 2; ++p) {
          const __m512i v = _mm512_loadu_si512(q + 64 * p);
          neg[p] = _mm512_movepi8_mask(v);
          w[p] = _mm512_abs_epi8(v);
        }
      } else {  // low nibbles rows 0, 1; high nibbles rows 2, 3 (repack_r4)
        const __m512i v = _mm512_loadu_si512(q);
        w[0] = _mm512_and_si512(v, low4);
        w[1] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
      }
      PKV_UNROLL for (int t = 0; t < NT; ++t) {
        const XB& x = xq_of<X2>(a)[size_t(t0 + t) * nb + b];
        const __m256 sp = _mm256_mul_ps(d8, xscale(x));  // lane r: d_r * d_x0, r + 4: d_r * d_x1
        if constexpr (T != DType::Q8_0) accm[t] = _mm_fmadd_ps(m4, _mm_broadcast_ss(&x.s), accm[t]);
        const __m512i xq = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.q)));
        __m512i xr;
        if constexpr (X2) xr = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.r)));
        PKV_UNROLL for (int p = 0; p < 2; ++p) {
          const __m512i xs = T == DType::Q8_0 ? _mm512_mask_sub_epi8(xq, neg[p], _mm512_setzero_si512(), xq) : xq;
          __m512i l = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w[p], xs);
          if constexpr (X2) {
            const __m512i rs = T == DType::Q8_0 ? _mm512_mask_sub_epi8(xr, neg[p], _mm512_setzero_si512(), xr) : xr;
            l = _mm512_dpbusd_epi32(_mm512_slli_epi32(l, 7), w[p], rs);
          }
          acc[t][p] = _mm512_fmadd_ps(pair_scales(sp, p), _mm512_cvtepi32_ps(l), acc[t][p]);
        }
      }
    }
    PKV_UNROLL for (int t = 0; t < NT; ++t) {
      float* y = a.y + size_t(t0 + t) * a.ldy + 4 * size_t(g);
      const __m256 r8[4] = {_mm512_castps512_ps256(acc[t][0]), upper(acc[t][0]), _mm512_castps512_ps256(acc[t][1]), upper(acc[t][1])};
      alignas(16) float m[4];
      _mm_store_ps(m, accm[t]);
      PKV_UNROLL for (int r = 0; r < 4; ++r) y[r] = T == DType::Q8_0 ? hsum(r8[r]) : hsum(r8[r]) + m[r];
    }
  }
  // Rows [row_begin, row_end) (multiples of 4) of a matrix in the R4 layout: rows()'s walk --
  // tokens in blocks of PKV_Q8_TOKEN_BLOCK, each block's tokens in tiles of 8, then 4, then 1.
  template <DType T>
  static void rows_r4(const MatmulArgs& a, int row_begin, int row_end) {
    PKV_ASSERT(row_begin % 4 == 0 && row_end % 4 == 0);
    if (a.n_tok == 1) {
      for (int r = row_begin; r < row_end; r += 4) tile4_r4<T, 1>(a, r / 4, 0);
      return;
    }
    for (int t0 = 0; t0 < a.n_tok; t0 += PKV_Q8_TOKEN_BLOCK) {
      const int t1 = std::min(a.n_tok, t0 + PKV_Q8_TOKEN_BLOCK);
      for (int r = row_begin; r < row_end; r += 4) {
        int t = t0;
        for (; t + 8 <= t1; t += 8) tile4_r4<T, 8>(a, r / 4, t);
        for (; t + 4 <= t1; t += 4) tile4_r4<T, 4>(a, r / 4, t);
        for (; t < t1; ++t) tile4_r4<T, 1>(a, r / 4, t);
      }
    }
  }
  static void matmul_rows_r4(const MatmulArgs& a, int row_begin, int row_end) {
    switch (a.wtype) {
      case DType::Q4_0: return rows_r4<DType::Q4_0>(a, row_begin, row_end);
      case DType::Q4_1: return rows_r4<DType::Q4_1>(a, row_begin, row_end);
      case DType::Q8_0: return rows_r4<DType::Q8_0>(a, row_begin, row_end);
      default: PKV_ASSERT(!"matmul_q8_rows_r4: a weight type without an R4 layout (r4_supported)");
    }
  }
  // Sixteen rows x NT tokens of group g on weights in the R16 layout (cpu_kernels.h
  // WeightLayout::R16): the int32 lanes are the rows. Per block, each of the four 64-byte parts
  // splits into low nibbles (elements 4L .. 4L + 3 of every row: the first half block) and high
  // nibbles (16 + 4L ..: the second), and one dpbusd per half and activation part (q; q8x2 also r)
  // against those four x bytes broadcast adds them to the half's exact int32 sum. Then per token
  // and half one conversion and one fma, scaled by d_r * d_x,h -- R16's order, the same for every
  // NT, so prefill tiles and decode give the same bits.
  template <DType T, int NT>
  static void tile16_r16(const MatmulArgs& a, int g, int t0) {
    static_assert(r16_supported(T), "tile16_r16: R16's types");
    constexpr bool kQ8 = T == DType::Q8_0;
    constexpr int kH = r16_header_bytes(T), kQB = r16_quant_bytes(T);
    const int nb = a.k / 32;
    const uint8_t* qs = static_cast<const uint8_t*>(a.w) + size_t(g) * nb * kQB;
    const uint8_t* hs = static_cast<const uint8_t*>(a.w_hdr) + size_t(g) * nb * kH;
    __m512 acc[NT], accm[NT];
    PKV_UNROLL for (int t = 0; t < NT; ++t) acc[t] = accm[t] = _mm512_setzero_ps();
    const __m512i low4 = _mm512_set1_epi8(0x0f);
    for (int b = 0; b < nb; ++b) {
      const uint8_t* q = qs + size_t(b) * kQB;
      const uint8_t* h = hs + size_t(b) * kH;
      PKV_UNROLL for (int off = 0; off < kQB; off += 64) __builtin_prefetch(q + off + PKV_Q8_PREFETCH);
      if constexpr (kH == 64) __builtin_prefetch(h + PKV_Q8_PREFETCH / 4);
      else if ((b & 1) == 0) __builtin_prefetch(h + PKV_Q8_PREFETCH / 8);
      __m512i sum[NT][4];  // per token: q half 0, q half 1, (q8x2) r half 0, r half 1
      PKV_UNROLL for (int t = 0; t < NT; ++t) PKV_UNROLL for (int i = 0; i < 4; ++i) sum[t][i] = _mm512_setzero_si512();
      // Q8_0's signed weights: dpbusd of |w| (unsigned) and sign(x, w) (x negated where w < 0),
      // part L holding elements 4 L .. 4 L + 3 of half L / 4
      if constexpr (kQ8) PKV_UNROLL for (int part = 0; part < 8; ++part) {
        const __m512i v = _mm512_load_si512(q + 64 * part), av = _mm512_abs_epi8(v);
        const __mmask64 neg = _mm512_movepi8_mask(v);
        PKV_UNROLL for (int t = 0; t < NT; ++t) {
          const XB& x = xq_of<X2>(a)[size_t(t0 + t) * nb + b];
          int32_t x0;
          std::memcpy(&x0, x.q + 4 * part, 4);
          __m512i xb = _mm512_set1_epi32(x0);
          sum[t][part / 4] = _mm512_dpbusd_epi32(sum[t][part / 4], av, _mm512_mask_sub_epi8(xb, neg, _mm512_setzero_si512(), xb));
          if constexpr (X2) {
            std::memcpy(&x0, x.r + 4 * part, 4);
            xb = _mm512_set1_epi32(x0);
            sum[t][2 + part / 4] = _mm512_dpbusd_epi32(sum[t][2 + part / 4], av, _mm512_mask_sub_epi8(xb, neg, _mm512_setzero_si512(), xb));
          }
        }
      }
      else PKV_UNROLL for (int part = 0; part < 4; ++part) {
        const __m512i v = _mm512_load_si512(q + 64 * part);
        const __m512i lo = _mm512_and_si512(v, low4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
        PKV_UNROLL for (int t = 0; t < NT; ++t) {
          const XB& x = xq_of<X2>(a)[size_t(t0 + t) * nb + b];
          int32_t x0, x1;
          std::memcpy(&x0, x.q + 4 * part, 4);
          std::memcpy(&x1, x.q + 16 + 4 * part, 4);
          sum[t][0] = _mm512_dpbusd_epi32(sum[t][0], lo, _mm512_set1_epi32(x0));
          sum[t][1] = _mm512_dpbusd_epi32(sum[t][1], hi, _mm512_set1_epi32(x1));
          if constexpr (X2) {
            std::memcpy(&x0, x.r + 4 * part, 4);
            std::memcpy(&x1, x.r + 16 + 4 * part, 4);
            sum[t][2] = _mm512_dpbusd_epi32(sum[t][2], lo, _mm512_set1_epi32(x0));
            sum[t][3] = _mm512_dpbusd_epi32(sum[t][3], hi, _mm512_set1_epi32(x1));
          }
        }
      }
      const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(h)));
      // Q4_1's stored minima; Q4_0's d_r * -8 (exact: a power of two); Q8_0 none
      [[maybe_unused]] const __m512 m = T == DType::Q4_1 ? _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(h + 32)))
                                        : _mm512_mul_ps(d, _mm512_set1_ps(-8.0f));
      PKV_UNROLL for (int t = 0; t < NT; ++t) {
        const XB& x = xq_of<X2>(a)[size_t(t0 + t) * nb + b];
        __m512i i0 = sum[t][0], i1 = sum[t][1];
        if constexpr (X2) {  // 128 sum(w q) + sum(w r): exact in int32 (and in f32 but for Q8_0, < 2^24)
          i0 = _mm512_add_epi32(_mm512_slli_epi32(i0, 7), sum[t][2]);
          i1 = _mm512_add_epi32(_mm512_slli_epi32(i1, 7), sum[t][3]);
        }
        acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(d, _mm512_set1_ps(x.d[0])), _mm512_cvtepi32_ps(i0), acc[t]);
        acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(d, _mm512_set1_ps(x.d[1])), _mm512_cvtepi32_ps(i1), acc[t]);
        if constexpr (!kQ8) accm[t] = _mm512_fmadd_ps(m, _mm512_set1_ps(x.s), accm[t]);
      }
    }
    PKV_UNROLL for (int t = 0; t < NT; ++t)
      _mm512_storeu_ps(a.y + size_t(t0 + t) * a.ldy + 16 * size_t(g), _mm512_add_ps(acc[t], accm[t]));
  }
  template <DType T>
  static void rows_r16(const MatmulArgs& a, int row_begin, int row_end) {
    PKV_ASSERT(row_begin % 16 == 0 && row_end % 16 == 0);
    PKV_ASSERT(reinterpret_cast<uintptr_t>(a.w) % 64 == 0);  // tile16_r16's aligned loads (RepackedWeights aligns)
    if (a.n_tok == 1) {
      for (int r = row_begin; r < row_end; r += 16) tile16_r16<T, 1>(a, r / 16, 0);
      return;
    }
    for (int t0 = 0; t0 < a.n_tok; t0 += PKV_Q8_TOKEN_BLOCK) {
      const int t1 = std::min(a.n_tok, t0 + PKV_Q8_TOKEN_BLOCK);
      for (int r = row_begin; r < row_end; r += 16) {
        int t = t0;
        for (; t + 4 <= t1; t += 4) tile16_r16<T, 4>(a, r / 16, t);
        for (; t < t1; ++t) tile16_r16<T, 1>(a, r / 16, t);
      }
    }
  }
#if !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif
  static A zero() { return _mm256_setzero_ps(); }
  static A fma(A acc, S s, L l) { return _mm256_fmadd_ps(s, _mm256_cvtepi32_ps(l), acc); }
  static float hsum(A v) {
    __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
    __m128 s = _mm_add_ps(lo, hi);
    __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(t, _mm_shuffle_ps(t, t, 1)));
  }
};
#if defined(PKV_Q8_VNNI)
using Avx512Vnni = Avx512VnniT<false>;
using Avx512VnniX2 = Avx512VnniT<true>;
#else
using Avx2 = Avx2T<false>;
using Avx2X2 = Avx2T<true>;
#endif

// max |x| over 16 floats (exact in any order: half_amax's value).
inline float amax16(__m256 v0, __m256 v1) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256 mx = _mm256_max_ps(_mm256_andnot_ps(sign, v0), _mm256_andnot_ps(sign, v1));
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
  return _mm_cvtss_f32(m4);
}

// Equal bit for bit to quantize_portable: max of |x| (exact in any order), the same division
// and reciprocal, x * id rounded half to even by cvtps (MXCSR's default), clamped.
inline void quantize_avx2(const float* x, BlockQ8x* out, int k) {
  for (int b = 0; b < k / 32; ++b) {
    __m256i q[4];
    int sum[2];
    for (int h = 0; h < 2; ++h) {
      const float* xh = x + size_t(b) * 32 + 16 * h;
      const __m256 v0 = _mm256_loadu_ps(xh), v1 = _mm256_loadu_ps(xh + 8);
      const float amax = amax16(v0, v1);
      const float d = amax / 127.0f;
      const float id = d != 0.0f ? 1.0f / d : 0.0f;
      const __m256 vid = _mm256_set1_ps(id);
      const __m256i lo = _mm256_set1_epi32(-127), hi = _mm256_set1_epi32(127);
      q[2 * h] = _mm256_min_epi32(_mm256_max_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(v0, vid)), lo), hi);
      q[2 * h + 1] = _mm256_min_epi32(_mm256_max_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(v1, vid)), lo), hi);
      __m256i s = _mm256_add_epi32(q[2 * h], q[2 * h + 1]);
      __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
      s4 = _mm_hadd_epi32(s4, s4);
      s4 = _mm_hadd_epi32(s4, s4);
      sum[h] = _mm_cvtsi128_si32(s4);
      out[b].d[h] = d;
    }
    // Pack 32 int32 -> 32 int8 in element order (packs interleave 128-bit lanes: permute back).
    const __m256i p01 = _mm256_packs_epi32(q[0], q[1]), p23 = _mm256_packs_epi32(q[2], q[3]);
    __m256i p = _mm256_packs_epi16(p01, p23);
    p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[b].q), p);
    out[b].s = out[b].d[0] * float(sum[0]) + out[b].d[1] * float(sum[1]);
  }
}

// Equal bit for bit to quantize_x2_portable: quantize_avx2's max and scale with 16256 levels,
// Q = x * id rounded half to even by cvtps and clamped to +-16256 (cvtps' NaN, INT_MIN, clamps to
// -16256 as the portable min/max do), q = floor((Q + 64) / 128) by an arithmetic shift, r = Q - 128 q.
// Decode quantizes each matmul's input on the calling thread while the others wait: 2 % of a
// q8x2 decode step's samples in the portable loop (perf, 2 threads).
inline void quantize_x2_avx2(const float* x, BlockQ8x2* out, int k) {
  constexpr float kLevels = 16256.0f;
  const __m256i lo = _mm256_set1_epi32(-16256), hi = _mm256_set1_epi32(16256), c64 = _mm256_set1_epi32(64);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int b = 0; b < k / 32; ++b) {
    __m256i q[4], r[4];
    int sum[2];
    for (int h = 0; h < 2; ++h) {
      const float* xh = x + size_t(b) * 32 + 16 * h;
      const __m256 v0 = _mm256_loadu_ps(xh), v1 = _mm256_loadu_ps(xh + 8);
      const float amax = amax16(v0, v1);
      const float d = amax / kLevels;
      const float id = d != 0.0f ? 1.0f / d : 0.0f;
      const __m256 vid = _mm256_set1_ps(id);
      __m256i s = _mm256_setzero_si256();
      for (int i = 0; i < 2; ++i) {
        const __m256i Q = _mm256_min_epi32(_mm256_max_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(i ? v1 : v0, vid)), lo), hi);
        const __m256i qq = _mm256_srai_epi32(_mm256_add_epi32(Q, c64), 7);
        q[2 * h + i] = qq;
        r[2 * h + i] = _mm256_sub_epi32(Q, _mm256_slli_epi32(qq, 7));
        s = _mm256_add_epi32(s, Q);
      }
      __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
      s4 = _mm_hadd_epi32(s4, s4);
      s4 = _mm_hadd_epi32(s4, s4);
      sum[h] = _mm_cvtsi128_si32(s4);
      out[b].d[h] = d;
    }
    // Pack 32 int32 -> 32 int8 in element order (packs interleave 128-bit lanes: permute back).
    const __m256i pq = _mm256_permutevar8x32_epi32(
        _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3])), order);
    const __m256i pr = _mm256_permutevar8x32_epi32(
        _mm256_packs_epi16(_mm256_packs_epi32(r[0], r[1]), _mm256_packs_epi32(r[2], r[3])), order);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[b].q), pq);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[b].r), pr);
    out[b].s = out[b].d[0] * float(sum[0]) + out[b].d[1] * float(sum[1]);
  }
}

}  // namespace
}  // namespace q8
}  // namespace cpu
}  // namespace phasekv
