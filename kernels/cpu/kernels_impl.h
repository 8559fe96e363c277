// The CPU kernels, written once over an 8-lane vector type V (vec8_*.h). Included only by
// the per-ISA translation units (kernels_avx2.cpp, kernels_neon.cpp, kernels_portable.cpp),
// which instantiate them. See cpu_kernels.h for the determinism contract.
#pragma once

#include <algorithm>

#include "cpu_kernels.h"

namespace phasekv {
namespace cpu {
namespace impl {

using DequantFn = void (*)(DType, const void*, float*, int);

// The scalar reference dequantization, for instruction sets without a vector version.
inline void dequant_reference(DType t, const void* src, float* out, int n) { dequantize_row(t, src, out, n); }

// The dot-product sequence every kernel follows: 8-lane partial sums in index order,
// V::hsum, then the tail in index order.
template <class V>
float dot(const float* a, const float* b, int n) {
  const int n8 = n & ~7;
  V acc = V::zero();
  for (int i = 0; i < n8; i += 8) acc = V::fma(V::load(a + i), V::load(b + i), acc);
  float s = acc.hsum();
  for (int i = n8; i < n; ++i) s = s + a[i] * b[i];
  return s;
}

template <class V>
void axpy(float a, const float* x, float* y, int n) {
  const int n8 = n & ~7;
  const V va = V::set1(a);
  for (int i = 0; i < n8; i += 8) V::fma(va, V::load(x + i), V::load(y + i)).store(y + i);
  for (int i = n8; i < n; ++i) y[i] = y[i] + a * x[i];
}

// out[i] = dot(q, k + i * ks, n) * scale for each of `rows` rows: dot<V>'s sequence per row,
// four rows' sums interleaved (one dot alone is a chain of dependent FMAs; attention's scores
// are many short dots of one query).
template <class V>
void dot_rows(const float* q, const float* k, size_t ks, int rows, int n, float scale, float* out) {
  const int n8 = n & ~7;
  int i = 0;
  for (; i + 4 <= rows; i += 4) {
    const float* kr[4] = {k + size_t(i) * ks, k + size_t(i + 1) * ks, k + size_t(i + 2) * ks, k + size_t(i + 3) * ks};
    V acc[4] = {V::zero(), V::zero(), V::zero(), V::zero()};
    for (int c = 0; c < n8; c += 8) {
      const V qv = V::load(q + c);
      for (int r = 0; r < 4; ++r) acc[r] = V::fma(qv, V::load(kr[r] + c), acc[r]);
    }
    for (int r = 0; r < 4; ++r) {
      float s = acc[r].hsum();
      for (int c = n8; c < n; ++c) s = s + q[c] * kr[r][c];
      out[i + r] = s * scale;
    }
  }
  for (; i < rows; ++i) out[i] = dot<V>(q, k + size_t(i) * ks, n) * scale;
}

// y += c[i] * (v + i * vs) for i = 0 .. rows - 1 in order: axpy<V>'s operations on every element
// in the same order, with y's 64-float chunks kept in registers across the rows instead of
// stored and reloaded after each (attention's weighted sum of values).
template <class V>
void axpy_rows(const float* c, const float* v, size_t vs, int rows, float* y, int n) {
  const int n8 = n & ~7;
  int j = 0;
  for (; j + 64 <= n8; j += 64) {
    V acc[8];
    for (int u = 0; u < 8; ++u) acc[u] = V::load(y + j + 8 * u);
    for (int i = 0; i < rows; ++i) {
      const V a = V::set1(c[i]);
      const float* x = v + size_t(i) * vs + j;
      for (int u = 0; u < 8; ++u) acc[u] = V::fma(a, V::load(x + 8 * u), acc[u]);
    }
    for (int u = 0; u < 8; ++u) acc[u].store(y + j + 8 * u);
  }
  for (; j < n8; j += 8) {
    V acc = V::load(y + j);
    for (int i = 0; i < rows; ++i) acc = V::fma(V::set1(c[i]), V::load(v + size_t(i) * vs + j), acc);
    acc.store(y + j);
  }
  for (int i = 0; i < rows; ++i)
    for (int e = n8; e < n; ++e) y[e] = y[e] + c[i] * v[size_t(i) * vs + e];
}

// NR rows x NT tokens of dot products, each with exactly dot<V>'s sequence.
template <class V, int NR, int NT>
inline void tile(const float* const* w, const float* x, int ldx, int k, float* y, int ldy) {
  const int k8 = k & ~7;
  V acc[NR][NT];
  for (int r = 0; r < NR; ++r)
    for (int t = 0; t < NT; ++t) acc[r][t] = V::zero();
  for (int i = 0; i < k8; i += 8) {
    V xv[NT];
    for (int t = 0; t < NT; ++t) xv[t] = V::load(x + size_t(t) * ldx + i);
    for (int r = 0; r < NR; ++r) {
      const V wv = V::load(w[r] + i);
      for (int t = 0; t < NT; ++t) acc[r][t] = V::fma(wv, xv[t], acc[r][t]);
    }
  }
  for (int r = 0; r < NR; ++r)
    for (int t = 0; t < NT; ++t) {
      float s = acc[r][t].hsum();
      const float* xt = x + size_t(t) * ldx;
      for (int i = k8; i < k; ++i) s = s + w[r][i] * xt[i];
      y[size_t(t) * ldy + r] = s;
    }
}

// Tiles of 4 rows x 3 tokens keep 12 accumulators, 3 inputs and one weight vector in the
// 16 AVX2 registers: 7 loads per 12 FMAs, so the FMA units, not the loads, set the pace.
template <class V, int NR>
inline void tile_tokens(const float* const* w, const MatmulArgs& a, int t0, int t1, int row) {
  int t = t0;
  for (; t + 3 <= t1; t += 3) tile<V, NR, 3>(w, a.x + size_t(t) * a.k, a.k, a.k, a.y + size_t(t) * a.ldy + row, a.ldy);
  if (t1 - t == 2) tile<V, NR, 2>(w, a.x + size_t(t) * a.k, a.k, a.k, a.y + size_t(t) * a.ldy + row, a.ldy);
  if (t1 - t == 1) tile<V, NR, 1>(w, a.x + size_t(t) * a.k, a.k, a.k, a.y + size_t(t) * a.ldy + row, a.ldy);
}

template <class V, DequantFn Deq>
void matmul_rows(const MatmulArgs& a, int row_begin, int row_end, float* scratch) {
  constexpr int kTokenBlock = 64;  // keeps a block of X in L2 while rows stream past
  for (int t0 = 0; t0 < a.n_tok; t0 += kTokenBlock) {
    const int t1 = std::min(a.n_tok, t0 + kTokenBlock);
    for (int r = row_begin; r < row_end; r += 4) {
      const int nr = std::min(4, row_end - r);
      const float* w[4];
      for (int i = 0; i < nr; ++i) {
        const void* src = static_cast<const uint8_t*>(a.w) + size_t(r + i) * a.w_row_bytes;
        if (a.wtype == DType::F32) {
          w[i] = static_cast<const float*>(src);
        } else {
          Deq(a.wtype, src, scratch + size_t(i) * a.k, a.k);
          w[i] = scratch + size_t(i) * a.k;
        }
      }
      switch (nr) {
        case 4: tile_tokens<V, 4>(w, a, t0, t1, r); break;
        case 3: tile_tokens<V, 3>(w, a, t0, t1, r); break;
        case 2: tile_tokens<V, 2>(w, a, t0, t1, r); break;
        default: tile_tokens<V, 1>(w, a, t0, t1, r); break;
      }
    }
  }
}

// ---- the q8 mode's exp, softmax and SiLU (KernelTable::softmax_q8, silu_mul_q8) ----
// exp(x) in eight lanes, a fixed sequence of IEEE operations (V::fused, add, sub, mul, max,
// min, a shift), so every instruction set gives the same bits; within a few ulp of exp for x
// in [-87.33, 88] (tests/unit/test_q8.cpp: 1e-6 relative of exp in double), x clamped to that range (exp(-87.33) is
// ~2^-126, the smallest normal float; the softmax's x - max <= 0, SiLU's -g of any sign).
//   n = round(x log2 e) by the magic-number add: t = x log2 e + (1.5 * 2^23 + 127) rounds to an
//   integer, so t's low mantissa bits hold n + 127 (1..254 after the clamp) and t - magic = n
//   exactly; r = x - n ln 2 in two steps (ln 2's high part has 9 significant bits: n * hi is
//   exact), |r| <= ln 2 / 2; e^r by its Taylor series to degree 7 (truncation < 6e-9 relative);
//   times 2^n, the float whose bits are (n + 127) << 23 (t's bits shifted: the rest of t's bits
//   leave the word).
template <class V>
inline V vexp(V x) {
  x = V::min(V::max(x, V::set1(-87.33654f)), V::set1(88.0f));
  const V magic = V::set1(12583039.0f);  // 1.5 * 2^23 + 127
  const V t = V::fused(x, V::set1(1.44269502f), magic);
  const V n = V::sub(t, magic);
  V r = V::fused(n, V::set1(-0.693359375f), x);
  r = V::fused(n, V::set1(2.12194440e-4f), r);  // ln 2 = 0.693359375 - 2.12194440e-4
  V p = V::set1(1.0f / 5040.0f);
  p = V::fused(p, r, V::set1(1.0f / 720.0f));
  p = V::fused(p, r, V::set1(1.0f / 120.0f));
  p = V::fused(p, r, V::set1(1.0f / 24.0f));
  p = V::fused(p, r, V::set1(1.0f / 6.0f));
  p = V::fused(p, r, V::set1(0.5f));
  p = V::fused(p, r, V::set1(1.0f));
  p = V::fused(p, r, V::set1(1.0f));
  return V::mul(p, V::shl23(t));
}

// x[0..n) <- softmax(x): the max (exact in any order), e_i = vexp(x_i - max) eight at a time
// (a tail of fewer than eight through a padded vector: the same lane operations), the sum as
// 8-lane partial sums, hsum, then the tail in index order, and x_i * (1 / sum). The sequence
// depends only on n: the same bits on every instruction set and however the caller splits work.
template <class V>
void softmax_q8(float* x, int n) {
  float mx = x[0];
  for (int i = 1; i < n; ++i) mx = x[i] > mx ? x[i] : mx;
  const V vm = V::set1(mx);
  const int n8 = n & ~7;
  V acc = V::zero();
  for (int i = 0; i < n8; i += 8) {
    const V e = vexp(V::sub(V::load(x + i), vm));
    e.store(x + i);
    acc = V::add(acc, e);
  }
  float sum = acc.hsum();
  if (n8 < n) {
    float tail[8];
    for (int i = 0; i < 8; ++i) tail[i] = n8 + i < n ? x[n8 + i] : mx;
    vexp(V::sub(V::load(tail), vm)).store(tail);
    for (int i = n8; i < n; ++i) {
      x[i] = tail[i - n8];
      sum = sum + x[i];
    }
  }
  const float inv = 1.0f / sum;
  const V vinv = V::set1(inv);
  for (int i = 0; i < n8; i += 8) V::mul(V::load(x + i), vinv).store(x + i);
  for (int i = n8; i < n; ++i) x[i] = x[i] * inv;
}

// out_i = g_i / (1 + vexp(-g_i)) * u_i, element-wise (a tail through a padded vector): the same
// bits on every instruction set and for any split of the elements.
template <class V>
void silu_mul_q8(const float* g, const float* u, float* out, int n) {
  const V one = V::set1(1.0f);
  const auto f = [&](V gv, V uv) { return V::mul(V::div(gv, V::add(one, vexp(V::sub(V::zero(), gv)))), uv); };
  const int n8 = n & ~7;
  for (int i = 0; i < n8; i += 8) f(V::load(g + i), V::load(u + i)).store(out + i);
  if (n8 < n) {
    float tg[8] = {0, 0, 0, 0, 0, 0, 0, 0}, tu[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int i = n8; i < n; ++i) {
      tg[i - n8] = g[i];
      tu[i - n8] = u[i];
    }
    f(V::load(tg), V::load(tu)).store(tg);
    for (int i = n8; i < n; ++i) out[i] = tg[i - n8];
  }
}

}  // namespace impl
}  // namespace cpu
}  // namespace phasekv
