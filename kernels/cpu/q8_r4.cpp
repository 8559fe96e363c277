// The R4 weight layout of the q8 kernels (cpu_kernels.h WeightLayout): four rows interleaved
// block by block, made once per model when a context maps its weights, read by the AVX-512 VNNI
// kernels (q8_avx2.h tile4_r4). Plain C++: it runs once, not per token.
#include <cstring>

#include "cpu_kernels.h"
#include "status.h"

namespace phasekv {
namespace cpu {

bool r4_fits(DType t, int rows, int k) {
  return r4_supported(t) && rows > 0 && rows % 4 == 0 && k > 0 && k % 32 == 0;
}

size_t r4_hdr_offset(DType t, int rows, int k) {
  return size_t(rows / 4) * size_t(k / 32) * size_t(r4_quant_bytes(t));
}

size_t r4_bytes(DType t, int rows, int k) {
  return r4_hdr_offset(t, rows, k) + size_t(rows / 4) * size_t(k / 32) * size_t(r4_header_bytes(t));
}

void repack_r4(DType t, const void* src, size_t row_bytes, int rows, int k, void* dst) {
  PKV_ASSERT(r4_fits(t, rows, k));
  const int nb = k / 32, kq = r4_quant_bytes(t), kh = r4_header_bytes(t);
  const size_t blk = t == DType::Q4_0 ? 18 : t == DType::Q4_1 ? 20 : 34;  // ggml's block_q4_0, _q4_1, _q8_0
  PKV_ASSERT(row_bytes == size_t(nb) * blk);
  const int qs_at = t == DType::Q4_1 ? 4 : 2;  // after d (and m)
  const uint8_t* in = static_cast<const uint8_t*>(src);
  uint8_t* qout = static_cast<uint8_t*>(dst);
  uint8_t* hout = qout + r4_hdr_offset(t, rows, k);
  for (int g = 0; g < rows / 4; ++g) {
    for (int b = 0; b < nb; ++b) {
      const uint8_t* blocks[4];
      for (int r = 0; r < 4; ++r) blocks[r] = in + size_t(4 * g + r) * row_bytes + size_t(b) * blk;
      uint8_t* q = qout + (size_t(g) * nb + b) * kq;
      uint8_t* h = hout + (size_t(g) * nb + b) * kh;
      for (int r = 0; r < 4; ++r) {
        std::memcpy(h + 2 * r, blocks[r], 2);                                    // d_r
        if (t == DType::Q4_1) std::memcpy(h + 8 + 2 * r, blocks[r] + 2, 2);  // m_r
      }
      if (t == DType::Q8_0) {
        for (int r = 0; r < 4; ++r) std::memcpy(q + 32 * r, blocks[r] + qs_at, 32);
        continue;
      }
      // Element e of a Q4 row: the low nibble of byte e (e < 16), else the high nibble of byte e - 16.
      const auto nibble = [&](int r, int e) -> uint8_t {
        const uint8_t byte = blocks[r][qs_at + (e & 15)];
        return e < 16 ? byte & 0x0f : byte >> 4;
      };
      for (int i = 0; i < 64; ++i) q[i] = uint8_t(nibble(i / 32, i % 32) | nibble(2 + i / 32, i % 32) << 4);
    }
  }
}

bool r16_fits(DType t, int rows, int k) {
  return r16_supported(t) && rows > 0 && rows % 16 == 0 && k > 0 && k % 32 == 0;
}

size_t r16_hdr_offset(DType t, int rows, int k) {
  return size_t(rows / 16) * size_t(k / 32) * size_t(r16_quant_bytes(t));
}

size_t r16_bytes(DType t, int rows, int k) {
  return r16_hdr_offset(t, rows, k) + size_t(rows / 16) * size_t(k / 32) * size_t(r16_header_bytes(t));
}

void repack_r16(DType t, const void* src, size_t row_bytes, int rows, int k, void* dst) {
  PKV_ASSERT(r16_fits(t, rows, k));
  const int nb = k / 32, kh = r16_header_bytes(t), kq = r16_quant_bytes(t);
  const size_t blk = t == DType::Q4_0 ? 18 : t == DType::Q4_1 ? 20 : 34;  // ggml's block_q4_0, _q4_1, _q8_0
  PKV_ASSERT(row_bytes == size_t(nb) * blk);
  const int qs_at = t == DType::Q4_1 ? 4 : 2;  // after d (and m)
  const uint8_t* in = static_cast<const uint8_t*>(src);
  uint8_t* qout = static_cast<uint8_t*>(dst);
  uint8_t* hout = qout + r16_hdr_offset(t, rows, k);
  for (int g = 0; g < rows / 16; ++g) {
    for (int b = 0; b < nb; ++b) {
      uint8_t* q = qout + (size_t(g) * nb + b) * kq;
      uint8_t* h = hout + (size_t(g) * nb + b) * kh;
      for (int r = 0; r < 16; ++r) {
        const uint8_t* blkr = in + size_t(16 * g + r) * row_bytes + size_t(b) * blk;
        std::memcpy(h + 2 * r, blkr, 2);                                     // d_r
        if (t == DType::Q4_1) std::memcpy(h + 32 + 2 * r, blkr + 2, 2);  // m_r
        for (int part = 0; part < kq / 64; ++part) std::memcpy(q + 64 * part + 4 * r, blkr + qs_at + 4 * part, 4);
      }
    }
  }
}

}  // namespace cpu
}  // namespace phasekv
