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
#include <string>

#include "dtype.h"

namespace phasekv {
namespace cpu {

// One 32-element block of an activation row quantized to 8 bits (the q8 matmul mode), with one
// scale per 16-element half (h = 0: elements 0..15, h = 1: 16..31; a half-block scale halves the
// reach of an outlier channel at no cost in the integer kernels):
//   d[h] = max|x_i| / 127 over the half, q_i = round-half-even(x_i * (1/d[h])) clamped to
//   [-127, 127] (q = 0 when d[h] = 0), s = d[0] * sum(q_0..15) + d[1] * sum(q_16..31)
//   (what Q4_1's per-block minimum multiplies).
struct BlockQ8x {
  int8_t q[32];
  float d[2];
  float s;
};
static_assert(sizeof(BlockQ8x) == 44, "BlockQ8x is 44 bytes");

// The q8x2 mode's block: the same 32 elements to 15 bits, carried as two int8 halves so that the
// same 8-bit integer dot products serve. Per 16-element half h:
//   d[h] = max|x_i| / 16256 (16256 = 127 * 128), Q_i = round-half-even(x_i * (1/d[h])) clamped to
//   [-16256, 16256] (0 when d[h] = 0), q_i = floor((Q_i + 64) / 128) in [-127, 127] and
//   r_i = Q_i - 128 q_i in [-64, 63]; s = d[0] * sum(Q_0..15) + d[1] * sum(Q_16..31).
// A product sum over w is then 128 * sum(w q) + sum(w r) = sum(w Q), exact in int32 (and in f32
// per 4-element lane: |lane| <= 4 * 128 * 16256 < 2^24). Rounding error |x - d Q| <= d / 2:
// 128 times smaller than BlockQ8x's.
struct BlockQ8x2 {
  int8_t q[32];
  float d[2];
  float s;
  int8_t r[32];
};
static_assert(sizeof(BlockQ8x2) == 76, "BlockQ8x2 is 76 bytes");

// Y[t, r] = dot(W[r, :], X[t, :]) for rows r in [row_begin, row_end) and tokens t in [0, n_tok).
// How a quantized matrix's bytes are laid out for the q8 kernels. Rows: the file's (GGUF's) rows,
// what every kernel reads. R4 (Q4_0, Q4_1, Q8_0; the AVX-512 VNNI kernels only): four rows
// interleaved block by block, made once when a context maps the model's weights (repack_r4), so
// that decode loads a block of four rows with one aligned 512-bit load instead of gathering four
// rows 18-34 bytes apart. For G = rows / 4 groups of nb = k / 32 blocks: first the packed weights,
// block b of group g at (g nb + b) r4_quant_bytes -- Q4_0 / Q4_1: 64 bytes, byte i the element
// i % 32 of row i / 32 in its low nibble and of row 2 + i / 32 in its high nibble (element e <
// 16 the low nibble of the file's byte e, else the high nibble of byte e - 16); Q8_0: 128 bytes,
// byte i the int8 element i % 32 of row i / 32 -- then the scales, block b of group g at
// (g nb + b) r4_header_bytes: the four rows' f16 d, then (Q4_1) their f16 m. The same bytes in
// all: 18, 20 and 34 per row and block.
//
// R16 (Q4_0, Q4_1, Q8_0; the AVX2 and AVX-512 VNNI kernels): sixteen rows interleaved so that
// the int32 lanes of one dot-product instruction are the sixteen rows. For G = rows / 16 groups:
// block b of group g at (g nb + b) r16_quant_bytes -- Q4_0 / Q4_1: 256 bytes, four 64-byte parts,
// part L's byte 4 r + e the file's byte 4 L + e of row r's block (low nibble element 4 L + e,
// high nibble element 16 + 4 L + e); Q8_0: 512 bytes, eight parts, part L's byte 4 r + e row r's
// int8 element 4 L + e -- then the scales at r16_hdr_offset + (g nb + b) r16_header_bytes: the
// sixteen rows' f16 d, then (Q4_1) their f16 m. 18, 20 and 34 bytes per row and block, as in the
// file. Its kernels sum each half block's products exactly in int32 and take it into f32 with one
// fma per half -- per row and block acc = fma(d_r d_x0, I_0, acc), acc = fma(d_r d_x1, I_1, acc),
// the minima apart as accm = fma(m_r, s_x, accm) (Q4_0: m_r = -8 d_r; Q8_0: none, accm = 0),
// y = acc + accm -- an order of their own: the same bits for any chunking, thread count and
// instruction set that has it, not the Rows / R4 kernels' bits (those keep eight lane sums per
// row; the two differ at the f32 rounding level, ~1e-7 relative). (q8x2 on Q8_0: I_h = 128 sum(w q)
// + sum(w r) can pass 2^24, where its conversion rounds to nearest even: still one order.)
enum class WeightLayout : uint8_t { Rows = 0, R4 = 1, R16 = 2 };
constexpr bool r16_supported(DType t) {
  return t == DType::Q4_0 || t == DType::Q4_1 || t == DType::Q8_0;
}
constexpr int r16_header_bytes(DType t) {
  return t == DType::Q4_1 ? 64 : 32;
}
constexpr int r16_quant_bytes(DType t) {
  return t == DType::Q8_0 ? 512 : 256;
}
// Whether a rows x k matrix of type t can be held as R16 (r16_supported, rows a multiple of 16, k of 32).
bool r16_fits(DType t, int rows, int k);
size_t r16_bytes(DType t, int rows, int k);
size_t r16_hdr_offset(DType t, int rows, int k);
void repack_r16(DType t, const void* src, size_t row_bytes, int rows, int k, void* dst);
constexpr bool r4_supported(DType t) {
  return t == DType::Q4_0 || t == DType::Q4_1 || t == DType::Q8_0;
}
constexpr int r4_quant_bytes(DType t) {
  return t == DType::Q8_0 ? 128 : 64;
}
constexpr int r4_header_bytes(DType t) {
  return t == DType::Q4_1 ? 16 : 8;
}
// Whether a rows x k matrix of type t can be held as R4 (r4_supported, rows a multiple of 4, k of 32).
bool r4_fits(DType t, int rows, int k);
// Bytes of the R4 copy (packed weights then scales); the header part starts at r4_hdr_offset.
size_t r4_bytes(DType t, int rows, int k);
size_t r4_hdr_offset(DType t, int rows, int k);
// The R4 copy of `rows` rows of `row_bytes` bytes each (k columns of type t, r4_fits) into dst.
void repack_r4(DType t, const void* src, size_t row_bytes, int rows, int k, void* dst);

struct MatmulArgs {
  DType wtype;          // dtype of W
  const void* w;        // [n_rows, k] in wtype, rows contiguous
  size_t w_row_bytes;   // bytes per row of W
  const float* x;       // [n_tok, k]
  float* y;             // [n_tok, ldy]
  int k;                // inner dimension (multiple of 32 for quantized W)
  int n_tok;
  int ldy;              // row stride of Y (>= n_rows)
  const BlockQ8x* xq = nullptr;  // q8 mode: X quantized, [n_tok, k / 32] blocks
  const BlockQ8x2* xq2 = nullptr;  // q8x2 mode: the same with 15-bit activations
  // WeightLayout::R4 (q8 modes only, KernelTable::matmul_q8_rows_r4): w is the matrix's packed
  // weights and w_hdr its scales (repack_r4); w_row_bytes is unused.
  WeightLayout w_layout = WeightLayout::Rows;
  const void* w_hdr = nullptr;
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
  // out[i] = dot(q, k + i * ks, n) * scale for i < rows, each exactly dot's value times scale
  void (*dot_rows)(const float* q, const float* k, size_t ks, int rows, int n, float scale, float* out);
  // axpy(c[i], v + i * vs, y, n) for i = 0 .. rows - 1 in order, the same bits
  void (*axpy_rows)(const float* c, const float* v, size_t vs, int rows, float* y, int n);
  // ---- the q8 mode (8-bit activations, integer dot products) ----
  // out[k / 32] = x quantized block by block (see BlockQ8x); identical on every instruction set.
  void (*quantize_q8)(const float* x, BlockQ8x* out, int k);
  // Rows [row_begin, row_end) for the q8_supported weight types against a.xq. Per output, in block
  // order: the block's 32 products as 8 exact int32 lane sums (lane j: elements 4j..4j+3),
  // acc[j] = fma(d_w * d_x[j / 4], float(lane j), acc[j]); then the fixed 8-lane reduction of dot(),
  // plus (Q4_1, Q5_1, Q4_K, Q5_K) the minima term sum_b fma(m_w, s_x, .) kept apart in block order. Integer sums
  // are exact and every float step is the same IEEE operation, so every instruction set
  // (AVX2 maddubs, AVX-512 VNNI, NEON sdot, portable C++) gives the same bits -- on the file's
  // rows and in R4; R16 (matmul_q8_rows_r16 below) has an order of its own.
  void (*matmul_q8_rows)(const MatmulArgs& a, int row_begin, int row_end);
  // The q8x2 mode: quantize_q8x2 writes BlockQ8x2 (identical on every instruction set), and
  // matmul_q8x2_rows is matmul_q8_rows against a.xq2, each lane sum 128 * sum(w q) + sum(w r)
  // (two 8-bit products per element pair: exact, so again the same bits on every instruction set).
  void (*quantize_q8x2)(const float* x, BlockQ8x2* out, int k);
  void (*matmul_q8x2_rows)(const MatmulArgs& a, int row_begin, int row_end);
  // The q8 mode's softmax and SiLU: an exp of fixed IEEE operations instead of std::exp (a few
  // ulp apart), the same bits on every instruction set (kernels_impl.h vexp); the reference mode
  // keeps softmax() / silu_mul() below.
  void (*softmax_q8)(float* x, int n);
  void (*silu_mul_q8)(const float* g, const float* u, float* out, int n);
  const char* q8_isa;  // the q8 kernels' instructions: "avx2", "avx512vnni", "neon-dotprod", "portable"
  // matmul_q8_rows / matmul_q8x2_rows on matrices in the R4 layout (a.w_layout; rows and row_end
  // multiples of 4), the same bits; nullptr where the table has no R4 kernels (then nothing is
  // repacked for it).
  void (*matmul_q8_rows_r4)(const MatmulArgs& a, int row_begin, int row_end) = nullptr;
  void (*matmul_q8x2_rows_r4)(const MatmulArgs& a, int row_begin, int row_end) = nullptr;
  // The same modes on matrices in the R16 layout (rows and row_end multiples of 16), in R16's own
  // order (WeightLayout above); nullptr where the table has none (then R4 or the file's rows).
  void (*matmul_q8_rows_r16)(const MatmulArgs& a, int row_begin, int row_end) = nullptr;
  void (*matmul_q8x2_rows_r16)(const MatmulArgs& a, int row_begin, int row_end) = nullptr;
};

// Weight types the q8 mode multiplies with integer dot products (others stay on the f32 path).
inline bool q8_supported(DType t) {
  return t == DType::Q4_0 || t == DType::Q4_1 || t == DType::Q8_0 || t == DType::Q5_0 || t == DType::Q5_1 ||
         t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K;
}

// How a quantized weight matrix meets its activations.
enum class MatmulMode : uint8_t {
  Reference = 0,  // f32: weights dequantized to f32, f32 dot products (the reference path)
  Q8 = 1,         // activations quantized to 8 bits per 16-element half-block, integer dot products
  Q8X2 = 2,       // activations quantized to 15 bits (BlockQ8x2), two 8-bit integer products per element
};
const char* matmul_mode_name(MatmulMode m);  // "reference", "q8", "q8x2"

// A kernel spec: tokens separated by ':' — a mode ("reference", "q8", "q8x2") and/or an instruction set
// ("avx2", "avx2-maddubs", "avx2-rows", "avx512vnni", "avx512vnni-rows", "avx512vnni-r4", "neon", "neon-dotprod", "neon-nodotprod", "portable"),
// e.g. "q8", "avx2", "q8:portable". What the spec leaves out keeps *mode / *table as given.
// false (with *bad set to the offending token) for an unknown or unavailable token.
bool parse_kernel_spec(const char* spec, MatmulMode* mode, const KernelTable** table, std::string* bad);
// Every instruction-set name parse_kernel_spec knows, for help and error texts (kernels_by_name
// is the list's other half: add a name to both).
inline constexpr const char* kKernelSetNames = "avx2, avx2-maddubs, avx2-rows, avx512vnni, avx512vnni-rows, avx512vnni-r4, neon, neon-dotprod, neon-nodotprod, portable";

// The table for this CPU (AVX2+FMA when the CPU has it, NEON on aarch64, else portable), or the
// instruction set named in PHASEKV_KERNELS.
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
