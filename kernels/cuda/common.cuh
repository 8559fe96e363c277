// What every CUDA op of PhaseKV shares: the host/device function marker, rounding helpers that
// keep bit-exact paths bit-exact (no contraction into FMAs), the dtype element decoders (also
// compiled for the host and unit-tested there against dequantize_row), and block reductions.
// The one CUDA error-check macro is PKV_CUDA_CHECK in cuda_check.h.
#pragma once

#include <cstdint>
#include <cstring>

#include "dtype.h"

#if defined(__CUDACC__)
#define PKV_HD __host__ __device__ __forceinline__
#else
#define PKV_HD inline
#endif

namespace phasekv {
namespace cuda {

// a * b and a + b rounded once each: what the CPU reference computes with -ffp-contract=off.
PKV_HD float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
PKV_HD float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
PKV_HD float sub_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}

PKV_HD float bits_to_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

// IEEE half -> float, exact for every input (subnormals scaled exactly, NaN payloads kept).
PKV_HD float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1fu;
  const uint32_t m = h & 0x3ffu;
  if (e == 0x1f) return bits_to_float(sign | 0x7f800000u | (m << 13));
  if (e == 0) {
    const float v = mul_rn(float(m), 1.0f / 16777216.0f);  // m * 2^-24, exact
    return sign ? -v : v;
  }
  return bits_to_float(sign | ((e + 112u) << 23) | (m << 13));
}
PKV_HD float bf16_to_float(uint16_t b) { return bits_to_float(uint32_t(b) << 16); }
PKV_HD uint16_t load_u16(const uint8_t* p) { return uint16_t(p[0] | (p[1] << 8)); }

// Element i of one row stored as `T` (GGUF block layouts; quantized rows are whole blocks).
// Byte loads: GGUF blocks (18 to 34 bytes; K-quant super-blocks 84 to 210) are not 4-byte aligned.
// Each element decodes its own (sub-)block scales: simple, and bit-identical to dequantize_row
// (the same operations, each rounded once).
template <DType T>
PKV_HD float dequant_element(const uint8_t* row, int i) {
  if constexpr (T == DType::F32) {
    uint32_t u = uint32_t(row[4 * i]) | uint32_t(row[4 * i + 1]) << 8 | uint32_t(row[4 * i + 2]) << 16 |
                 uint32_t(row[4 * i + 3]) << 24;
    return bits_to_float(u);
  } else if constexpr (T == DType::F16) {
    return half_to_float(load_u16(row + 2 * i));
  } else if constexpr (T == DType::BF16) {
    return bf16_to_float(load_u16(row + 2 * i));
  } else if constexpr (T == DType::Q8_0) {
    const uint8_t* b = row + (i / 32) * 34;
    return mul_rn(half_to_float(load_u16(b)), float(int8_t(b[2 + i % 32])));
  } else if constexpr (T == DType::Q4_0) {
    const uint8_t* b = row + (i / 32) * 18;
    const int j = i % 32;
    const uint8_t q = b[2 + (j & 15)];
    return mul_rn(half_to_float(load_u16(b)), float((j < 16 ? (q & 0x0f) : (q >> 4)) - 8));
  } else if constexpr (T == DType::Q4_1) {
    const uint8_t* b = row + (i / 32) * 20;
    const int j = i % 32;
    const uint8_t q = b[4 + (j & 15)];
    return add_rn(mul_rn(half_to_float(load_u16(b)), float(j < 16 ? (q & 0x0f) : (q >> 4))),
                  half_to_float(load_u16(b + 2)));
  } else if constexpr (T == DType::Q5_0 || T == DType::Q5_1) {
    // d (, m), qh (u32, bit j: element j's fifth bit), qs (nibbles as Q4_*).
    constexpr bool kMin = T == DType::Q5_1;
    const uint8_t* b = row + (i / 32) * (kMin ? 24 : 22);
    const uint8_t* qh = b + (kMin ? 4 : 2);
    const int j = i % 32;
    const uint8_t nib = qh[4 + (j & 15)];
    const int q = (j < 16 ? (nib & 0x0f) : (nib >> 4)) | ((qh[j / 8] >> (j % 8)) & 1) << 4;
    const float d = half_to_float(load_u16(b));
    if constexpr (kMin) return add_rn(mul_rn(d, float(q)), half_to_float(load_u16(b + 2)));
    else return mul_rn(d, float(q - 16));
  } else if constexpr (T == DType::Q2_K) {
    // scales[16] | qs[64] | d | dmin. Element 128h + 32s + l: bits 2s..2s+1 of qs[32h + l].
    const uint8_t* b = row + (i / 256) * 84;
    const int e = i % 256, h = e / 128, s = (e / 32) % 4, l = e % 32;
    const uint8_t sc = b[e / 16];
    const float dl = mul_rn(half_to_float(load_u16(b + 80)), float(sc & 0x0f));
    const float ml = mul_rn(half_to_float(load_u16(b + 82)), float(sc >> 4));
    return sub_rn(mul_rn(dl, float((b[16 + 32 * h + l] >> (2 * s)) & 3)), ml);
  } else if constexpr (T == DType::Q3_K) {
    // hmask[32] | qs[64] | scales[12] | d. Six-bit scales offset by 32; the high bit of each
    // 3-bit quant is bit e / 32 of hmask[l], and a clear bit subtracts 4.
    const uint8_t* b = row + (i / 256) * 110;
    const int e = i % 256, h = e / 128, s = (e / 32) % 4, l = e % 32, k = e / 16;
    const uint8_t* sc = b + 96;
    const int lo = (sc[k % 8] >> (4 * (k / 8))) & 0x0f;
    const int hi = (sc[8 + k % 4] >> (2 * (k / 4))) & 3;
    const float dl = mul_rn(half_to_float(load_u16(b + 108)), float((lo | hi << 4) - 32));
    const int q = ((b[32 + 32 * h + l] >> (2 * s)) & 3) - (((b[l] >> (e / 32)) & 1) ? 0 : 4);
    return mul_rn(dl, float(q));
  } else if constexpr (T == DType::Q4_K || T == DType::Q5_K) {
    // d | dmin | scales[12] | (Q5_K: qh[32] |) qs[128]. Sub-block j = e / 32 of 8, six-bit scale
    // and minimum; element 64g + 32i + l is nibble i of qs[32g + l] (+ bit j of qh[l] << 4).
    constexpr bool kFive = T == DType::Q5_K;
    const uint8_t* b = row + (i / 256) * (kFive ? 176 : 144);
    const int e = i % 256, j = e / 32, l = e % 32;
    const uint8_t* sc = b + 4;
    int s, m;
    if (j < 4) {
      s = sc[j] & 63;
      m = sc[j + 4] & 63;
    } else {
      s = (sc[j + 4] & 0x0f) | ((sc[j - 4] >> 6) << 4);
      m = (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4);
    }
    const float d1 = mul_rn(half_to_float(load_u16(b)), float(s));
    const float m1 = mul_rn(half_to_float(load_u16(b + 2)), float(m));
    const uint8_t* qs = b + (kFive ? 48 : 16);
    int q = (qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 0x0f;
    if constexpr (kFive) q |= ((b[16 + l] >> j) & 1) << 4;
    return sub_rn(mul_rn(d1, float(q)), m1);
  } else {
    static_assert(T == DType::Q6_K, "dequant_element: a dtype without a decoder");
    // ql[128] | qh[64] | scales[16] (int8) | d. Element 128h + 32g + l: low 4 bits from
    // ql[64h + 32(g % 2) + l] >> 4(g / 2), high 2 bits from qh[32h + l] >> 2g, minus 32.
    const uint8_t* b = row + (i / 256) * 210;
    const int e = i % 256, h = e / 128, g = (e / 32) % 4, l = e % 32;
    const int lo = (b[64 * h + 32 * (g % 2) + l] >> (4 * (g / 2))) & 0x0f;
    const int hi = (b[128 + 32 * h + l] >> (2 * g)) & 3;
    const float dl = mul_rn(half_to_float(load_u16(b + 208)), float(int8_t(b[192 + e / 16])));
    return mul_rn(dl, float((lo | hi << 4) - 32));
  }
}

// The rotation of one RoPE pair, rounded as cpu::rope_apply does.
PKV_HD void rope_rotate(float& x0, float& x1, float c, float s) {
  const float a = sub_rn(mul_rn(x0, c), mul_rn(x1, s));
  const float b = add_rn(mul_rn(x0, s), mul_rn(x1, c));
  x0 = a;
  x1 = b;
}

// One online-softmax step of the compressor's accumulator channel (CpuBackend's compress_task):
// sum' = sum * keep + e * x with keep = exp(max - max'), e = exp(s - max').
PKV_HD float accumulate(float sum, float keep, float e, float x) { return add_rn(mul_rn(sum, keep), mul_rn(e, x)); }

#if defined(__CUDACC__)
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ double warp_sum(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Block-wide reductions (blockDim.x a multiple of 32, at most 1024); every thread gets the
// result. `red` is shared scratch of 32 elements; the call synchronizes the block.
template <class T, class Op>
__device__ __forceinline__ T block_reduce(T v, T* red, Op op, T identity) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  __syncthreads();  // red may still be read by an earlier reduction
  if (lane == 0) red[warp] = v;
  __syncthreads();
  v = lane < n_warps ? red[lane] : identity;
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
struct SumOp {
  template <class T>
  __device__ T operator()(T a, T b) const { return a + b; }
};
struct MaxOp {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
#endif

}  // namespace cuda
}  // namespace phasekv

// Runtime dtype -> compile-time dtype; the default arm is the error arm of every dispatch.
#define PKV_DISPATCH_DTYPE(dtype, T, ...)                    \
  switch (dtype) {                                           \
    case ::phasekv::DType::F32: { constexpr ::phasekv::DType T = ::phasekv::DType::F32; __VA_ARGS__; } break;   \
    case ::phasekv::DType::F16: { constexpr ::phasekv::DType T = ::phasekv::DType::F16; __VA_ARGS__; } break;   \
    case ::phasekv::DType::BF16: { constexpr ::phasekv::DType T = ::phasekv::DType::BF16; __VA_ARGS__; } break; \
    case ::phasekv::DType::Q8_0: { constexpr ::phasekv::DType T = ::phasekv::DType::Q8_0; __VA_ARGS__; } break; \
    case ::phasekv::DType::Q4_0: { constexpr ::phasekv::DType T = ::phasekv::DType::Q4_0; __VA_ARGS__; } break; \
    case ::phasekv::DType::Q4_1: { constexpr ::phasekv::DType T = ::phasekv::DType::Q4_1; __VA_ARGS__; } break; \
    case ::phasekv::DType::Q5_0: { constexpr ::phasekv::DType T = ::phasekv::DType::Q5_0; __VA_ARGS__; } break; \
    case ::phasekv::DType::Q5_1: { constexpr ::phasekv::DType T = ::phasekv::DType::Q5_1; __VA_ARGS__; } break; \
    case ::phasekv::DType::Q2_K: { constexpr ::phasekv::DType T = ::phasekv::DType::Q2_K; __VA_ARGS__; } break; \
    case ::phasekv::DType::Q3_K: { constexpr ::phasekv::DType T = ::phasekv::DType::Q3_K; __VA_ARGS__; } break; \
    case ::phasekv::DType::Q4_K: { constexpr ::phasekv::DType T = ::phasekv::DType::Q4_K; __VA_ARGS__; } break; \
    case ::phasekv::DType::Q5_K: { constexpr ::phasekv::DType T = ::phasekv::DType::Q5_K; __VA_ARGS__; } break; \
    case ::phasekv::DType::Q6_K: { constexpr ::phasekv::DType T = ::phasekv::DType::Q6_K; __VA_ARGS__; } break; \
    default: return false;                                   \
  }
