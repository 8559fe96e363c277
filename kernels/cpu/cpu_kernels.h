// CPU kernels: the reference path of PhaseKV and the edge-CPU product.
//
// Every kernel exists once, written against a small 8-lane vector type (vec8_*.h) and
// instantiated per instruction set (AVX2+FMA, NEON, portable) in its own translation unit;
// cpu_dispatch.cpp picks one at start-up. Within one instruction set the results are
// deterministic and independent of how work is split:
//   * a dot product always accumulates 8-lane partial sums in index order, then reduces the
//     lanes in a fixed order, then adds the tail sequentially; the matrix-matrix kernel
//     computes each output with exactly that sequence, so a prompt prefilled in one chunk,
//     many chunks or token by token gives bit-identical results;
//   * threads split work by whole output rows / heads, never inside a reduction, so the
//     thread count does not change a single bit.
// No kernel allocates; callers pass planned scratch.
#pragma once

#include <cstddef>
#include <cstdint>

#include "dtype.h"

namespace phasekv {
namespace cpu {

// Y[t, r] = dot(W[r, :], X[t, :]) for rows r in [row_begin, row_end) and tokens t in [0, n_tok).
struct MatmulArgs {
  DType wtype;          // dtype of W
  const void* w;        // [n_rows, k] in wtype, rows contiguous
  size_t w_row_bytes;   // bytes per row of W
  const float* x;       // [n_tok, k]
  float* y;             // [n_tok, ldy]
  int k;                // inner dimension (multiple of 32 for quantized W)
  int n_tok;
  int ldy;              // row stride of Y (>= n_rows)
};

struct KernelTable {
  const char* name;  // "avx2", "neon", "portable"
  // out[i] = dequantized src (n elements, a multiple of the block size); values identical to dequantize_row.
  void (*dequant_row)(DType t, const void* src, float* out, int n);
  float (*dot)(const float* a, const float* b, int n);
  // Rows [row_begin, row_end); scratch holds at least 4 * k floats.
  void (*matmul_rows)(const MatmulArgs& a, int row_begin, int row_end, float* scratch);
  // y += a * x (n elements)
  void (*axpy)(float a, const float* x, float* y, int n);
};

// The table for this CPU (AVX2+FMA when the CPU has it, NEON on aarch64, else portable).
const KernelTable& kernels();
// A specific table by name, or nullptr if this build/CPU lacks it (tests compare them).
const KernelTable* kernels_by_name(const char* name);

// ---- Scalar helpers shared by all instruction sets (cheap next to the matmuls) ----

// out = x / sqrt(mean(x^2) + eps) * w   (n elements)
void rmsnorm(const float* x, const float* w, float eps, float* out, int n);
// Rotates pairs of `vec` (head_dim channels, the first rope_dim rotated) by cos/sin
// tables of rope_dim/2 entries. interleaved: pairs (2i, 2i+1); else (i, i + rope_dim/2).
void rope_apply(float* vec, const float* cos_t, const float* sin_t, int rope_dim, bool interleaved);
// out[i] = silu(g[i]) * u[i]
void silu_mul(const float* g, const float* u, float* out, int n);
// In place: x = softmax(x) over n entries; returns nothing. Max-subtracted, expf, sequential sums.
void softmax(float* x, int n);

}  // namespace cpu
}  // namespace phasekv
