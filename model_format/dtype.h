// Element types of PhaseKV tensors and their reference (scalar, obviously right)
// conversions. Quantized types keep GGUF's block layouts bit for bit, so a converted
// file holds exactly the bytes of the source GGUF.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "status.h"

namespace phasekv {

// Values match phasekv.fbs `DType` (the on-disk encoding).
enum class DType : uint8_t {
  F32 = 0, F16 = 1, BF16 = 2, Q8_0 = 3, Q4_0 = 4, Q4_1 = 5,
  Q5_0 = 6, Q5_1 = 7, Q2_K = 8, Q3_K = 9, Q4_K = 10, Q5_K = 11, Q6_K = 12,
};

struct DTypeInfo {
  const char* name;       // "Q4_1"
  uint32_t block_elems;   // elements per block (1 for plain floats, 32 for Q*_*)
  uint32_t block_bytes;   // bytes per block
};

// Block layouts (little-endian, packed), identical to GGUF/ggml:
struct BlockQ8_0 { uint16_t d; int8_t qs[32]; };             // x = d * q
struct BlockQ4_0 { uint16_t d; uint8_t qs[16]; };            // x = d * (q - 8); low nibbles: elements 0..15
struct BlockQ4_1 { uint16_t d; uint16_t m; uint8_t qs[16]; }; // x = d * q + m; high nibbles: elements 16..31
// Q5_*: bit j of qh (little-endian u32) is element j's fifth bit; x = d * (q - 16), d * q + m.
struct BlockQ5_0 { uint16_t d; uint8_t qh[4]; uint8_t qs[16]; };
struct BlockQ5_1 { uint16_t d; uint16_t m; uint8_t qh[4]; uint8_t qs[16]; };
// K-quants: 256-element super-blocks of 16 or 8 sub-blocks, each with its own scale (and
// minimum), themselves quantized against the f16 super-scales d (and dmin). Element orders are
// ggml's (see dequantize_row in dtype.cpp).
constexpr int kQK = 256;
struct BlockQ2_K { uint8_t scales[16]; uint8_t qs[64]; uint16_t d; uint16_t dmin; };  // 4-bit scale | 4-bit min
struct BlockQ3_K { uint8_t hmask[32]; uint8_t qs[64]; uint8_t scales[12]; uint16_t d; };  // 6-bit signed scales
struct BlockQ4_K { uint16_t d; uint16_t dmin; uint8_t scales[12]; uint8_t qs[128]; };  // 6-bit scales and mins
struct BlockQ5_K { uint16_t d; uint16_t dmin; uint8_t scales[12]; uint8_t qh[32]; uint8_t qs[128]; };
struct BlockQ6_K { uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; uint16_t d; };
static_assert(sizeof(BlockQ8_0) == 34, "Q8_0 block must be 34 bytes");
static_assert(sizeof(BlockQ4_0) == 18, "Q4_0 block must be 18 bytes");
static_assert(sizeof(BlockQ4_1) == 20, "Q4_1 block must be 20 bytes");
static_assert(sizeof(BlockQ5_0) == 22, "Q5_0 block must be 22 bytes");
static_assert(sizeof(BlockQ5_1) == 24, "Q5_1 block must be 24 bytes");
static_assert(sizeof(BlockQ2_K) == 84, "Q2_K block must be 84 bytes");
static_assert(sizeof(BlockQ3_K) == 110, "Q3_K block must be 110 bytes");
static_assert(sizeof(BlockQ4_K) == 144, "Q4_K block must be 144 bytes");
static_assert(sizeof(BlockQ5_K) == 176, "Q5_K block must be 176 bytes");
static_assert(sizeof(BlockQ6_K) == 210, "Q6_K block must be 210 bytes");

constexpr uint8_t kDTypeCount = 13;

// Byte offsets of a block's f16 scale fields (d, and dmin / m where the type has one; -1 if
// not): what a tool or test needs to tell scales from quants.
struct ScaleFields {
  int d, min;
};
ScaleFields dtype_scale_fields(DType t);

// nullptr for a raw value that names no known dtype.
const DTypeInfo* dtype_info(uint8_t raw);
inline const DTypeInfo& dtype_info(DType t) { return *dtype_info(static_cast<uint8_t>(t)); }
inline const char* dtype_name(DType t) { return dtype_info(t).name; }
bool dtype_from_name(const std::string& name, DType* out);

// Bytes of a tensor of `shape` (outermost first; the last dimension is a row). Fails when the
// row length is not a multiple of the block size, a dimension is 0, or the size overflows.
Status tensor_byte_size(DType t, const std::vector<uint64_t>& shape, uint64_t* out);

float fp16_to_fp32(uint16_t h);
uint16_t fp32_to_fp16(float f);  // round to nearest even; overflow gives inf
float bf16_to_fp32(uint16_t b);
uint16_t fp32_to_bf16(float f);  // round to nearest even; NaN stays NaN

// Reference dequantization of `n` elements (a multiple of the block size) to f32.
void dequantize_row(DType t, const void* src, float* dst, int64_t n);

}  // namespace phasekv
