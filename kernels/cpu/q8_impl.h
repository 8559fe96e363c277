// The q8 matmul mode's kernels (cpu_kernels.h KernelTable::quantize_q8 / matmul_q8_rows),
// written once over an instruction-set policy P and instantiated per instruction set. P gives:
//   W load_w<T>(blk, j)    a weight block unpacked to 32 signed (Q8_0, Q6_K) or unsigned
//                          (Q4_0, Q4_1, Q4_K: 0..15, Q5_0, Q5_1, Q5_K: 0..31) bytes; for K-quants blk
//                          is the super-block and j (0..7) the 32-element sub-block, else j = 0
//   D load_scales<T>(blk, j)  its weight scales (d_w for elements 0..15 and 16..31: equal but for
//                          Q6_K's 16-element scales) and minimum m_w (Q4_1, Q5_1; -8 d, -16 d
//                          for Q4_0, Q5_0; -dmin * m_j for Q4_K, Q5_K), each exact: an f16 converted, or an f16 times a 6-
//                          or 8-bit integer (at most 19 significant bits, exact in f32)
//   XS xscale(x)           a token block's two half-block scales
//   S scale<T>(D, XS)      the lane scales: d_w,0 * d_x[0] for lanes 0..3, d_w,1 * d_x[1] for 4..7
//   L lanes<T>(W, q)       8 int32 lane sums of products, lane j = elements 4j..4j+3 (exact)
//   A zero(), A fma(A, S, L) = lane-wise fused scale * float(lane) + acc, float hsum(A) in
//     dot()'s order ((0+4)+(2+6)) + ((1+5)+(3+7))
//   M mzero(), M load_min(s0, s1, s2, s3) (up to 4 tokens' block sums, built in registers: a
//     vector load of scalars just stored would stall on store forwarding), M fma_min(D, M, M) =
//     lane-wise fused m_w * s_t + acc_t (Q4_1's minimum term, one lane per token), float
//     mvalue(M, t); MinLanes (below) is the plain C++ version. For one token (decode):
//     M load_min1(s), M fma_min1(D, M, M), float mvalue1(M), the same fused m_w * s + acc in
//     whichever lane suits the instruction set
// Included only by the per-ISA translation units.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "cpu_kernels.h"

namespace phasekv {
namespace cpu {
namespace q8 {
// Internal linkage: each instruction set's translation unit compiles its own copy with its own
// flags, so the linker can never hand an AVX-512 build of a helper to the portable table.
namespace {

inline float f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return fp16_to_fp32(h);
}

// The scalar quantizer every instruction set must equal (nearbyint: round half to even in the
// default rounding mode, as _mm256_cvtps_epi32 / vcvtnq_s32_f32 round).
// max |x_i| over a 16-element half-block (exact in any order).
inline float half_amax(const float* xh) {
  float amax = 0.0f;
  for (int i = 0; i < 16; ++i) amax = std::max(amax, std::fabs(xh[i]));
  return amax;
}

inline void quantize_portable(const float* x, BlockQ8x* out, int k) {
  for (int b = 0; b < k / 32; ++b) {
    int sum[2] = {0, 0};
    for (int h = 0; h < 2; ++h) {
      const float* xh = x + size_t(b) * 32 + 16 * h;
      const float amax = half_amax(xh);
      const float d = amax / 127.0f;
      const float id = d != 0.0f ? 1.0f / d : 0.0f;
      for (int i = 0; i < 16; ++i) {
        const float v = std::nearbyint(xh[i] * id);
        const int q = int(std::min(127.0f, std::max(-127.0f, v)));
        out[b].q[16 * h + i] = int8_t(q);
        sum[h] += q;
      }
      out[b].d[h] = d;
    }
    out[b].s = out[b].d[0] * float(sum[0]) + out[b].d[1] * float(sum[1]);
  }
}

// The q8x2 quantizer (BlockQ8x2 in cpu_kernels.h): Q = x / d to 15 bits, split as Q = 128 q + r.
// The portable and NEON tables' (one scalar version, compiled per instruction set); the x86
// tables' quantize_x2_avx2 (q8_avx2.h) gives its bits.
inline void quantize_x2_portable(const float* x, BlockQ8x2* out, int k) {
  constexpr float kLevels = 16256.0f;  // 127 * 128
  for (int b = 0; b < k / 32; ++b) {
    int sum[2] = {0, 0};
    for (int h = 0; h < 2; ++h) {
      const float* xh = x + size_t(b) * 32 + 16 * h;
      const float amax = half_amax(xh);
      const float d = amax / kLevels;
      const float id = d != 0.0f ? 1.0f / d : 0.0f;
      for (int i = 0; i < 16; ++i) {
        const float v = std::nearbyint(xh[i] * id);
        const int Q = int(std::min(kLevels, std::max(-kLevels, v)));
        const int q = (Q + 64 + 128 * 128) / 128 - 128;  // floor((Q + 64) / 128): a non-negative division
        out[b].q[16 * h + i] = int8_t(q);
        out[b].r[16 * h + i] = int8_t(Q - 128 * q);
        sum[h] += Q;
      }
      out[b].d[h] = d;
    }
    out[b].s = out[b].d[0] * float(sum[0]) + out[b].d[1] * float(sum[1]);
  }
}

// The activation block type of a policy (P::kX2: the q8x2 mode) and the matching pointer of a.
template <bool X2>
using XBlock = std::conditional_t<X2, BlockQ8x2, BlockQ8x>;
template <bool X2>
inline const XBlock<X2>* xq_of(const MatmulArgs& a) {
  if constexpr (X2)
    return a.xq2;
  else
    return a.xq;
}
// a restricted to tokens [t0, ..): its activations and outputs from token t0 on.
template <bool X2>
inline MatmulArgs from_token(const MatmulArgs& a, int t0) {
  MatmulArgs one = a;
  const int nb = a.k / 32;
  if constexpr (X2)
    one.xq2 = a.xq2 + size_t(t0) * nb;
  else
    one.xq = a.xq + size_t(t0) * nb;
  one.y = a.y + size_t(t0) * a.ldy;
  one.n_tok = a.n_tok - t0;
  return one;
}

// Software prefetch distance (bytes ahead in each weight row). Decode streams ~92 MiB per token
// through short rows (360-960 bytes) split into thread tasks; the hardware prefetcher alone
// left the kernel waiting on memory (SmolLM2 decode, 2 threads: 88 tok/s without, 135-157 with
// 2-4 KiB; docs/PERFORMANCE.md). On a Zen 5 host whose L3 cannot hold the weights, 8 KiB
// decodes 1.34x faster than 4 KiB at 1 thread (189 vs 141 tok/s, medians of 4 interleaved
// rounds; 16 KiB the same, 32 KiB less) and the kernel alone streams Q8_0 rows from DRAM at
// 28 GB/s instead of 17 (phasekv_q8_bench). A prefetch changes no result.
#ifndef PKV_Q8_PREFETCH
#define PKV_Q8_PREFETCH 8192
#endif

// K-quants: 256-element super-blocks of eight 32-element sub-blocks (ggml's block_q4_K, _q5_K,
// _q6_K), each sub-block one q8 block.
template <DType T>
constexpr bool kquant() {
  return T == DType::Q4_K || T == DType::Q5_K || T == DType::Q6_K;
}
// Bytes of a block (of a super-block for K-quants).
template <DType T>
constexpr int block_bytes() {
  return T == DType::Q8_0   ? 34
         : T == DType::Q4_0 ? 18
         : T == DType::Q4_1 ? 20
         : T == DType::Q5_0 ? 22
         : T == DType::Q5_1 ? 24
         : T == DType::Q4_K ? 144
         : T == DType::Q5_K ? 176
                            : 210;  // Q6_K
}
// Q4_1 / Q5_1 store their minimum as an f16 after d.
template <DType T>
constexpr bool stored_min() {
  return T == DType::Q4_1 || T == DType::Q5_1;
}
// Q4_0 / Q5_0 store q + 8 / q + 16: taken as unsigned q' with the minimum m = -8 d / -16 d
// (exact), which spares the sign trick signed weights need (two instructions per row, token
// and block).
template <DType T>
constexpr int offset_w() {
  return T == DType::Q4_0 ? 8 : T == DType::Q5_0 ? 16 : 0;
}
// Types multiplied as unsigned weights plus a minimum (x = d q + m): the product gains
// m * sum(x). Q8_0 and Q6_K stay signed (Q6_K's two 16-element scales would need two minima).
template <DType T>
constexpr bool has_min() {
  return stored_min<T>() || offset_w<T>() != 0 || T == DType::Q4_K || T == DType::Q5_K;
}

// A K-quant sub-block's scales, in plain C++ for every policy (the products are exact, so any
// instruction set computing them gives these bits): d0 for elements 0..15, d1 for 16..31, m the
// minimum (x = d q + m). ggml's layouts: Q4_K / Q5_K {f16 d, f16 dmin, u8 scales[12], ...} with
// 6-bit scale and min j packed as in get_scale_min_k4; Q6_K {ql[128], qh[64], i8 scales[16], f16 d},
// sub-block j = half j / 4, quarter j % 4, its 16-element scales 8 (j / 4) + 2 (j % 4) and + 1.
struct KScales {
  float d0, d1, m;
};
// Q4_K / Q5_K: sub-block j's 6-bit scale and minimum from the 12 packed bytes q.
inline void kq_scale_min(const uint8_t* q, int j, int* sc, int* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}
// Q6_K: the index of sub-block j's first 16-element scale in scales[16].
constexpr int q6k_scale_index(int j) { return 8 * (j >> 2) + 2 * (j & 3); }
// H: the policy's f16 -> f32 conversion (exact on every instruction set).
template <DType T, float (*H)(const uint8_t*) = f16>
inline KScales kq_scales(const uint8_t* sb, int j) {
  if constexpr (T == DType::Q6_K) {
    const int8_t* sc = reinterpret_cast<const int8_t*>(sb + 192);
    const float d = H(sb + 208);
    const int g = q6k_scale_index(j);
    return {d * float(sc[g]), d * float(sc[g + 1]), 0.0f};
  } else {
    int sc, m;
    kq_scale_min(sb + 4, j, &sc, &m);
    const float ds = H(sb) * float(sc);
    return {ds, ds, H(sb + 2) * float(-m)};  // float(-m): +0 for m = 0, as every policy computes it
  }
}
// Block b of a weight row: its bytes (the super-block for K-quants) and sub-block index.
template <DType T>
inline const uint8_t* block_at(const uint8_t* row, int b) {
  return kquant<T>() ? row + size_t(b >> 3) * block_bytes<T>() : row + size_t(b) * block_bytes<T>();
}
template <DType T>
constexpr int sub_block(int b) {
  return kquant<T>() ? (b & 7) : 0;
}
// Q5_*: bit j of the little-endian u32 qh (at blk + 2, or + 4 with a minimum) is element j's 5th bit.
template <DType T>
inline uint32_t qh_bits(const uint8_t* blk) {
  uint32_t qh;
  std::memcpy(&qh, blk + (stored_min<T>() ? 4 : 2), 4);
  return qh;
}

// NR rows x NT tokens (NT <= 4). Per block: each token's x scales are prepared once (P::xscale)
// and Q4_1's token block sums gathered into one vector (a lane per token), each row's block
// once (P::load_w, P::load_scales), then NR x NT lane products and NR minimum-term FMAs. Per
// output the sequence is the same for every tile shape, so decode (4 x 1) and prefill (P::kRows
// x P::kTokens, with 1-token and 1-row tails) agree bit for bit.
// The tile's loops over rows and tokens unrolled before scalar replacement, so that the
// accumulators live in registers (GCC otherwise kept acc[][] in memory and stored all of it
// every block: 8 stores per block and tile in the prefill kernel's disassembly).
#define PKV_UNROLL _Pragma("GCC unroll 16")
template <class P, DType T, int NR, int NT>
inline void tile(const MatmulArgs& a, int r0, int t0) {
  static_assert(NT <= 4, "the minimum term keeps one lane per token, four lanes");
  const int nb = a.k / 32;
  typename P::A acc[NR][NT];
  typename P::M accm[NR];  // Q4_1: lane t = token t's sum over blocks of m_w * s_x
  PKV_UNROLL for (int r = 0; r < NR; ++r) {
    PKV_UNROLL for (int t = 0; t < NT; ++t) acc[r][t] = P::zero();
    accm[r] = P::mzero();
  }
  const uint8_t* rows[NR];
  PKV_UNROLL for (int r = 0; r < NR; ++r) rows[r] = static_cast<const uint8_t*>(a.w) + size_t(r0 + r) * a.w_row_bytes;
  for (int b = 0; b < nb; ++b) {
    typename P::XS xs[NT];
    const typename P::XB* xb[4];
    PKV_UNROLL for (int t = 0; t < NT; ++t) {
      xb[t] = xq_of<P::kX2>(a) + size_t(t0 + t) * nb + b;
      xs[t] = P::xscale(*xb[t]);
    }
    typename P::M s4 = P::mzero();
    if constexpr (has_min<T>()) {
      if constexpr (NT == 1) {
        s4 = P::load_min1(xb[0]->s);
      } else {
        for (int t = NT; t < 4; ++t) xb[t] = xb[0];  // unused lanes
        s4 = P::load_min(xb[0]->s, xb[1]->s, xb[2]->s, xb[3]->s);
      }
    }
    PKV_UNROLL for (int r = 0; r < NR; ++r) {
      const uint8_t* blk = block_at<T>(rows[r], b);
      const int j = sub_block<T>(b);
      __builtin_prefetch(rows[r] + size_t(b) * (block_bytes<T>() / (kquant<T>() ? 8 : 1)) + PKV_Q8_PREFETCH);
      const typename P::W w = P::template load_w<T>(blk, j);
      const typename P::D dm = P::template load_scales<T>(blk, j);  // d_w (and the minimum m_w)
      if constexpr (has_min<T>()) accm[r] = NT == 1 ? P::fma_min1(dm, s4, accm[r]) : P::fma_min(dm, s4, accm[r]);
      PKV_UNROLL for (int t = 0; t < NT; ++t)
        acc[r][t] = P::fma(acc[r][t], P::template scale<T>(dm, xs[t]), P::template lanes<T>(w, *xb[t]));
    }
  }
  PKV_UNROLL for (int r = 0; r < NR; ++r)
    PKV_UNROLL for (int t = 0; t < NT; ++t) {
      float y = P::hsum(acc[r][t]);
      if constexpr (has_min<T>()) y = y + (NT == 1 ? P::mvalue1(accm[r]) : P::mvalue(accm[r], t));
      a.y[size_t(t0 + t) * a.ldy + r0 + r] = y;
    }
}

// Tokens [t0, t1) against NR rows from r0.
template <class P, DType T, int NR>
inline void tile_rows(const MatmulArgs& a, int r0, int t0, int t1) {
  constexpr int NT = P::kTokens;
  int t = t0;
  for (; t + NT <= t1; t += NT) tile<P, T, NR, NT>(a, r0, t);
  for (; t < t1; ++t) tile<P, T, NR, 1>(a, r0, t);
}

// Prefill walks the tokens in blocks of this many, and each block past every row of the task:
// a block of quantized X (16 x 44 bytes per 32 inputs: 12-33 KiB for SmolLM2's k = 576..1536)
// stays in L1 while the task's rows stream through, instead of all of X (0.4-1.1 MiB at 512
// tokens) streaming from L2/L3 once per row pair. The order of operations per output is that
// of tile(), whatever the blocking.
#ifndef PKV_Q8_TOKEN_BLOCK
#define PKV_Q8_TOKEN_BLOCK 16
#endif

// Whether policy P has a decode kernel of its own for 4 rows (P::decode4<T>, for the types
// P::decode4_ok<T>() names), equal bit for bit to tile<P, T, 4, 1>.
template <class P, class = void>
struct HasDecode4 : std::false_type {};
template <class P>
struct HasDecode4<P, std::void_t<decltype(P::kHasDecode4)>> : std::true_type {};

// Whether policy P has a prefill kernel of its own for 4 rows x NT tokens (P::tile4<T, NT>, NT
// 4 and 1, every q8 weight type, and 8 where P::tile4_wide<T>()), equal bit for bit to
// tile<P, T, NR, NT>.
template <class P, class = void>
struct HasTile4 : std::false_type {};
template <class P>
struct HasTile4<P, std::void_t<decltype(P::kHasTile4)>> : std::true_type {};

// Whether policy P has a prefill of its own (P::prefill<T>(a, row_begin, row_end), every q8
// weight type, false where it declines the shape), equal bit for bit to tile<P, T, NR, NT>.
template <class P, class = void>
struct HasPrefill : std::false_type {};
template <class P>
struct HasPrefill<P, std::void_t<decltype(P::kPrefillMaxK)>> : std::true_type {};

template <class P, DType T>
void rows(const MatmulArgs& a, int row_begin, int row_end) {
  // Decode (one token) takes 4 rows at a time; prefill P::kRows rows x P::kTokens tokens.
  if (a.n_tok == 1) {
    int r = row_begin;
    if constexpr (HasDecode4<P>::value) {
      if constexpr (P::template decode4_ok<T>()) {
        for (; r + 4 <= row_end; r += 4) P::template decode4<T>(a, r);
      }
    }
    for (; r + 4 <= row_end; r += 4) tile<P, T, 4, 1>(a, r, 0);
    for (; r < row_end; ++r) tile<P, T, 1, 1>(a, r, 0);
    return;
  }
  if constexpr (HasPrefill<P>::value) {
    if (P::template prefill<T>(a, row_begin, row_end)) return;
  }
  for (int t0 = 0; t0 < a.n_tok; t0 += PKV_Q8_TOKEN_BLOCK) {
    const int t1 = std::min(a.n_tok, t0 + PKV_Q8_TOKEN_BLOCK);
    int r = row_begin;
    if constexpr (HasTile4<P>::value) {
      for (; r + 4 <= row_end; r += 4) {
        int t = t0;
        if constexpr (P::template tile4_wide<T>())
          for (; t + 8 <= t1; t += 8) P::template tile4<T, 8>(a, r, t);
        for (; t + 4 <= t1; t += 4) P::template tile4<T, 4>(a, r, t);
        for (; t < t1; ++t) P::template tile4<T, 1>(a, r, t);
      }
    }
    for (; r + P::kRows <= row_end; r += P::kRows) tile_rows<P, T, P::kRows>(a, r, t0, t1);
    for (; r < row_end; ++r) tile_rows<P, T, 1>(a, r, t0, t1);
  }
}

template <class P>
void matmul_rows(const MatmulArgs& a, int row_begin, int row_end) {
  switch (a.wtype) {
    case DType::Q4_0: return rows<P, DType::Q4_0>(a, row_begin, row_end);
    case DType::Q4_1: return rows<P, DType::Q4_1>(a, row_begin, row_end);
    case DType::Q8_0: return rows<P, DType::Q8_0>(a, row_begin, row_end);
    case DType::Q5_0: return rows<P, DType::Q5_0>(a, row_begin, row_end);
    case DType::Q5_1: return rows<P, DType::Q5_1>(a, row_begin, row_end);
    case DType::Q4_K: return rows<P, DType::Q4_K>(a, row_begin, row_end);
    case DType::Q5_K: return rows<P, DType::Q5_K>(a, row_begin, row_end);
    case DType::Q6_K: return rows<P, DType::Q6_K>(a, row_begin, row_end);
    default: PKV_ASSERT(!"matmul_q8_rows: a weight type without q8 kernels (q8_supported)");
  }
}

// Q4_1's minimum term for up to four tokens in plain C++: lane t = fused m_w * s_t + acc_t.
struct MinLanes {
  float v[4];
  static MinLanes zero() { return MinLanes{{0.0f, 0.0f, 0.0f, 0.0f}}; }
  static MinLanes load(float s0, float s1, float s2, float s3) { return MinLanes{{s0, s1, s2, s3}}; }
  static MinLanes fma(float m, const MinLanes& s, const MinLanes& acc) {
    MinLanes r;
    for (int t = 0; t < 4; ++t) r.v[t] = std::fma(m, s.v[t], acc.v[t]);
    return r;
  }
};

// The portable policy: plain C++ with std::fma, the ground every other policy must equal.
// X2: the q8x2 mode (BlockQ8x2 activations).
template <bool X2>
struct PortableT {
  static constexpr bool kX2 = X2;
  using XB = XBlock<X2>;
  static constexpr int kRows = 2, kTokens = 4;
  struct W {
    int8_t v[32];
  };
  struct L {
    int32_t v[8];
  };
  struct A {
    float v[8];
  };
  struct D {
    float d, m, d1;  // d_w for elements 0..15, the minimum, d_w for 16..31
  };
  struct XS {
    float d0, d1;
  };
  struct S {
    float s0, s1;
  };
  using M = MinLanes;
  static XS xscale(const XB& x) { return {x.d[0], x.d[1]}; }
  template <DType T>
  static D load_scales(const uint8_t* blk, int j) {
    if constexpr (kquant<T>()) {
      const KScales k = kq_scales<T>(blk, j);
      return {k.d0, k.m, k.d1};
    } else {
      const float d = f16(blk);
      return {d, stored_min<T>() ? f16(blk + 2) : d * float(-offset_w<T>()), d};
    }
  }
  template <DType T>
  static S scale(const D& dm, const XS& xs) { return {dm.d * xs.d0, dm.d1 * xs.d1}; }
  static M mzero() { return MinLanes::zero(); }
  static M load_min(float s0, float s1, float s2, float s3) { return MinLanes::load(s0, s1, s2, s3); }
  static M fma_min(const D& dm, const M& s, const M& acc) { return MinLanes::fma(dm.m, s, acc); }
  static float mvalue(const M& m, int t) { return m.v[t]; }
  static M load_min1(float s) { return MinLanes{{s, 0.0f, 0.0f, 0.0f}}; }
  static M fma_min1(const D& dm, const M& s, const M& acc) { return MinLanes{{std::fma(dm.m, s.v[0], acc.v[0]), 0, 0, 0}}; }
  static float mvalue1(const M& m) { return m.v[0]; }
  template <DType T>
  static W load_w(const uint8_t* blk, int j) {
    W w;
    if constexpr (T == DType::Q8_0) {
      std::memcpy(w.v, blk + 2, 32);
    } else if constexpr (T == DType::Q4_K || T == DType::Q5_K) {
      const uint8_t* qs = blk + (T == DType::Q4_K ? 16 : 48) + 32 * (j >> 1);  // sub-blocks 2p, 2p+1: nibbles
      const uint8_t* qh = blk + 16;                                            // Q5_K: bit j of qh[i]
      for (int i = 0; i < 32; ++i) {
        int v = (qs[i] >> (4 * (j & 1))) & 0x0f;
        if constexpr (T == DType::Q5_K) v |= ((qh[i] >> j) & 1) << 4;
        w.v[i] = int8_t(v);
      }
    } else if constexpr (T == DType::Q6_K) {
      const int h = j >> 2, q = j & 3;
      const uint8_t* ql = blk + 64 * h + 32 * (q & 1);  // low 4 bits: nibble q / 2
      const uint8_t* qh = blk + 128 + 32 * h;           // high 2 bits: bits 2q, 2q + 1
      for (int i = 0; i < 32; ++i)
        w.v[i] = int8_t((((ql[i] >> (4 * (q >> 1))) & 0x0f) | (((qh[i] >> (2 * q)) & 3) << 4)) - 32);
    } else if constexpr (T == DType::Q5_0 || T == DType::Q5_1) {
      const uint32_t qh = qh_bits<T>(blk);
      const uint8_t* qs = blk + (stored_min<T>() ? 8 : 6);
      for (int i = 0; i < 16; ++i) {
        w.v[i] = int8_t((qs[i] & 0x0f) | int((qh >> i) & 1u) << 4);
        w.v[i + 16] = int8_t((qs[i] >> 4) | int((qh >> (i + 16)) & 1u) << 4);
      }
    } else {
      const uint8_t* qs = blk + (T == DType::Q4_1 ? 4 : 2);
      for (int i = 0; i < 16; ++i) {
        w.v[i] = int8_t(qs[i] & 0x0f);
        w.v[i + 16] = int8_t(qs[i] >> 4);
      }
    }
    return w;
  }
  template <DType T>
  static L lanes(const W& w, const XB& x) {
    L l;
    for (int j = 0; j < 8; ++j) {
      int32_t s = 0;
      for (int i = 4 * j; i < 4 * j + 4; ++i) s += int32_t(w.v[i]) * int32_t(x.q[i]);
      if constexpr (X2) {  // 128 sum(w q) + sum(w r) = sum(w Q)
        int32_t sr = 0;
        for (int i = 4 * j; i < 4 * j + 4; ++i) sr += int32_t(w.v[i]) * int32_t(x.r[i]);
        s = 128 * s + sr;
      }
      l.v[j] = s;
    }
    return l;
  }
  static A zero() { return A{{0, 0, 0, 0, 0, 0, 0, 0}}; }
  static A fma(A acc, const S& s, const L& l) {
    for (int j = 0; j < 8; ++j) acc.v[j] = std::fma(j < 4 ? s.s0 : s.s1, float(l.v[j]), acc.v[j]);
    return acc;
  }
  static float hsum(const A& a) { return ((a.v[0] + a.v[4]) + (a.v[2] + a.v[6])) + ((a.v[1] + a.v[5]) + (a.v[3] + a.v[7])); }
};
using Portable = PortableT<false>;
using PortableX2 = PortableT<true>;

}  // namespace
}  // namespace q8
}  // namespace cpu
}  // namespace phasekv
