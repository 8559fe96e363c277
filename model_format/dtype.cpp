#include "dtype.h"

#include <cstring>

namespace phasekv {

namespace {
const DTypeInfo kInfo[kDTypeCount] = {
    {"F32", 1, 4},      {"F16", 1, 2},      {"BF16", 1, 2},     {"Q8_0", 32, 34},   {"Q4_0", 32, 18},
    {"Q4_1", 32, 20},   {"Q5_0", 32, 22},   {"Q5_1", 32, 24},   {"Q2_K", 256, 84},  {"Q3_K", 256, 110},
    {"Q4_K", 256, 144}, {"Q5_K", 256, 176}, {"Q6_K", 256, 210},
};

uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float bits_f32(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
}  // namespace

ScaleFields dtype_scale_fields(DType t) {
  switch (t) {
    case DType::Q8_0:
    case DType::Q4_0:
    case DType::Q5_0: return {0, -1};
    case DType::Q4_1:
    case DType::Q5_1:
    case DType::Q4_K:
    case DType::Q5_K: return {0, 2};
    case DType::Q2_K: return {80, 82};
    case DType::Q3_K: return {108, -1};
    case DType::Q6_K: return {208, -1};
    default: return {-1, -1};
  }
}

const DTypeInfo* dtype_info(uint8_t raw) { return raw < kDTypeCount ? &kInfo[raw] : nullptr; }

bool dtype_from_name(const std::string& name, DType* out) {
  for (uint8_t i = 0; i < kDTypeCount; ++i) {
    if (name == kInfo[i].name) {
      *out = static_cast<DType>(i);
      return true;
    }
  }
  return false;
}

Status tensor_byte_size(DType t, const std::vector<uint64_t>& shape, uint64_t* out) {
  const DTypeInfo* info = dtype_info(static_cast<uint8_t>(t));
  if (!info) return make_error(StatusCode::kInvalidFile, "unknown dtype %u", unsigned(t));
  if (shape.empty()) return make_error(StatusCode::kInvalidFile, "shape has no dimensions");
  uint64_t elems = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 0) return make_error(StatusCode::kInvalidFile, "shape[%zu] is 0", i);
    if (shape[i] > (UINT64_MAX >> 8) / elems)
      return make_error(StatusCode::kInvalidFile, "shape[%zu] = %llu overflows the element count", i,
                        (unsigned long long)shape[i]);
    elems *= shape[i];
  }
  uint64_t row = shape.back();
  if (row % info->block_elems != 0)
    return make_error(StatusCode::kInvalidFile, "row length %llu is not a multiple of the %s block size %u",
                      (unsigned long long)row, info->name, info->block_elems);
  *out = elems / info->block_elems * info->block_bytes;
  return Status::Ok();
}

float fp16_to_fp32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return bits_f32(sign | 0x7f800000u | (mant << 13));  // inf / nan
  if (exp == 0) {
    if (mant == 0) return bits_f32(sign);  // signed zero
    // Subnormal: value = mant * 2^-24, exact in f32.
    float v = float(mant) * (1.0f / 16777216.0f);
    return sign ? -v : v;
  }
  return bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
}

uint16_t fp32_to_fp16(float f) {
  const uint32_t u = f32_bits(f);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  const uint32_t absu = u & 0x7fffffffu;
  if (absu >= 0x7f800000u) return uint16_t(sign | (absu > 0x7f800000u ? 0x7e00u : 0x7c00u));
  if (absu >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds to >= 65520: inf
  if (absu < 0x38800000u) {
    // Result is subnormal or zero: round absu * 2^24 to an integer, nearest even.
    if (absu < 0x33000000u) return sign;  // below half the smallest subnormal
    const uint32_t exp = absu >> 23;
    const uint32_t mant = (absu & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126u - exp;  // 14..24 for exp in 102..112
    uint32_t q = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    return uint16_t(sign | q);
  }
  uint32_t r = absu - 0x38000000u;  // rebias exponent 127 -> 15
  const uint32_t rem = r & 0x1fffu;
  uint32_t q = r >> 13;
  if (rem > 0x1000u || (rem == 0x1000u && (q & 1u))) ++q;
  return uint16_t(sign | q);
}

float bf16_to_fp32(uint16_t b) { return bits_f32(uint32_t(b) << 16); }

uint16_t fp32_to_bf16(float f) {
  uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40u);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

void dequantize_row(DType t, const void* src, float* dst, int64_t n) {
  switch (t) {
    case DType::F32:
      std::memcpy(dst, src, size_t(n) * 4);
      return;
    case DType::F16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(s[i]);
      return;
    }
    case DType::BF16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(s[i]);
      return;
    }
    case DType::Q8_0: {
      const BlockQ8_0* b = static_cast<const BlockQ8_0*>(src);
      for (int64_t k = 0; k < n / 32; ++k) {
        const float d = fp16_to_fp32(b[k].d);
        for (int j = 0; j < 32; ++j) dst[k * 32 + j] = d * float(b[k].qs[j]);
      }
      return;
    }
    case DType::Q4_0: {
      const BlockQ4_0* b = static_cast<const BlockQ4_0*>(src);
      for (int64_t k = 0; k < n / 32; ++k) {
        const float d = fp16_to_fp32(b[k].d);
        for (int j = 0; j < 16; ++j) {
          dst[k * 32 + j] = d * float(int(b[k].qs[j] & 0x0f) - 8);
          dst[k * 32 + j + 16] = d * float(int(b[k].qs[j] >> 4) - 8);
        }
      }
      return;
    }
    case DType::Q4_1: {
      const BlockQ4_1* b = static_cast<const BlockQ4_1*>(src);
      for (int64_t k = 0; k < n / 32; ++k) {
        const float d = fp16_to_fp32(b[k].d);
        const float m = fp16_to_fp32(b[k].m);
        for (int j = 0; j < 16; ++j) {
          dst[k * 32 + j] = d * float(b[k].qs[j] & 0x0f) + m;
          dst[k * 32 + j + 16] = d * float(b[k].qs[j] >> 4) + m;
        }
      }
      return;
    }
    case DType::Q5_0:
    case DType::Q5_1: {
      const bool m1 = t == DType::Q5_1;
      const uint8_t* p = static_cast<const uint8_t*>(src);
      const size_t bb = m1 ? sizeof(BlockQ5_1) : sizeof(BlockQ5_0);
      for (int64_t k = 0; k < n / 32; ++k, p += bb) {
        uint16_t dh, mh = 0;
        std::memcpy(&dh, p, 2);
        if (m1) std::memcpy(&mh, p + 2, 2);
        const uint8_t* qhp = p + (m1 ? 4 : 2);
        const uint8_t* qs = qhp + 4;
        const uint32_t qh = uint32_t(qhp[0]) | uint32_t(qhp[1]) << 8 | uint32_t(qhp[2]) << 16 | uint32_t(qhp[3]) << 24;
        const float d = fp16_to_fp32(dh), m = fp16_to_fp32(mh);
        for (int j = 0; j < 32; ++j) {
          const int lo = j < 16 ? (qs[j] & 0x0f) : (qs[j - 16] >> 4);
          const int q = lo | int((qh >> j) & 1u) << 4;
          dst[k * 32 + j] = m1 ? d * float(q) + m : d * float(q - 16);
        }
      }
      return;
    }
    case DType::Q2_K: {
      // Element 128h + 32s + l (half h, shift 2s, l < 32): bits 2s..2s+1 of qs[32h + l]; its
      // sub-block (16 elements) is 8h + 2s + l/16, scale d * (sc & 15), minimum dmin * (sc >> 4).
      const BlockQ2_K* b = static_cast<const BlockQ2_K*>(src);
      for (int64_t k = 0; k < n / kQK; ++k) {
        const float d = fp16_to_fp32(b[k].d), dmin = fp16_to_fp32(b[k].dmin);
        for (int e = 0; e < kQK; ++e) {
          const int h = e / 128, s = (e / 32) % 4, l = e % 32;
          const uint8_t sc = b[k].scales[e / 16];
          const float dl = d * float(sc & 0x0f), ml = dmin * float(sc >> 4);
          dst[k * kQK + e] = dl * float((b[k].qs[32 * h + l] >> (2 * s)) & 3) - ml;
        }
      }
      return;
    }
    case DType::Q3_K: {
      // Scales: 16 six-bit values stored as 4 low bits (scales[i % 8] >> 4 (i / 8)) and 2 high
      // bits (scales[8 + i % 4] >> 2 (i / 4)), offset by 32. Element 128h + 32s + l: 2 bits from
      // qs[32h + l] >> 2s, minus 4 unless bit e / 32 of hmask[l] is set.
      const BlockQ3_K* b = static_cast<const BlockQ3_K*>(src);
      for (int64_t k = 0; k < n / kQK; ++k) {
        const float d = fp16_to_fp32(b[k].d);
        float dl[16];
        for (int i = 0; i < 16; ++i) {
          const int lo = (b[k].scales[i % 8] >> (4 * (i / 8))) & 0x0f;
          const int hi = (b[k].scales[8 + i % 4] >> (2 * (i / 4))) & 3;
          dl[i] = d * float((lo | hi << 4) - 32);
        }
        for (int e = 0; e < kQK; ++e) {
          const int h = e / 128, s = (e / 32) % 4, l = e % 32;
          const int q = ((b[k].qs[32 * h + l] >> (2 * s)) & 3) - (((b[k].hmask[l] >> (e / 32)) & 1) ? 0 : 4);
          dst[k * kQK + e] = dl[e / 16] * float(q);
        }
      }
      return;
    }
    case DType::Q4_K:
    case DType::Q5_K: {
      // 8 sub-blocks of 32 with 6-bit scales and minimums (j < 4: low 6 bits of scales[j] and
      // scales[j + 4]; j >= 4: nibbles of scales[j + 4] with the top 2 bits of scales[j - 4] and
      // scales[j]). Element 64g + 32i + l: nibble i of qs[32g + l]; Q5_K's fifth bit is bit
      // e / 32 of qh[l]. x = (d * sc) * q - dmin * m.
      const bool five = t == DType::Q5_K;
      const uint8_t* p = static_cast<const uint8_t*>(src);
      const size_t bb = five ? sizeof(BlockQ5_K) : sizeof(BlockQ4_K);
      for (int64_t k = 0; k < n / kQK; ++k, p += bb) {
        uint16_t dh, mh;
        std::memcpy(&dh, p, 2);
        std::memcpy(&mh, p + 2, 2);
        const uint8_t* sc = p + 4;
        const uint8_t* qh = p + 16;
        const uint8_t* qs = p + (five ? 48 : 16);
        const float d = fp16_to_fp32(dh), dmin = fp16_to_fp32(mh);
        for (int j = 0; j < 8; ++j) {
          int s, m;
          if (j < 4) {
            s = sc[j] & 63;
            m = sc[j + 4] & 63;
          } else {
            s = (sc[j + 4] & 0x0f) | ((sc[j - 4] >> 6) << 4);
            m = (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4);
          }
          const float d1 = d * float(s), m1 = dmin * float(m);
          const uint8_t* q4 = qs + 32 * (j / 2);
          const int shift = 4 * (j % 2);
          float* out = dst + k * kQK + 32 * j;
          if (five) {
            for (int l = 0; l < 32; ++l) out[l] = d1 * float(((q4[l] >> shift) & 0x0f) | ((qh[l] >> j) & 1) << 4) - m1;
          } else {
            for (int l = 0; l < 32; ++l) out[l] = d1 * float((q4[l] >> shift) & 0x0f) - m1;
          }
        }
      }
      return;
    }
    case DType::Q6_K: {
      // Element 128h + r: low 4 bits from ql[64h + r % 64] >> 4 (r / 64), high 2 bits from
      // qh[32h + r % 32] >> 2 (r / 32), minus 32; sub-block (16 elements) scale d * scales[e / 16].
      const BlockQ6_K* b = static_cast<const BlockQ6_K*>(src);
      for (int64_t k = 0; k < n / kQK; ++k) {
        const float d = fp16_to_fp32(b[k].d);
        for (int h = 0; h < 2; ++h)
          for (int g = 0; g < 4; ++g) {  // elements 128h + 32g + l
            const uint8_t* ql = b[k].ql + 64 * h + 32 * (g % 2);
            const uint8_t* qh = b[k].qh + 32 * h;
            const int lo_shift = 4 * (g / 2), hi_shift = 2 * g;
            const int e0 = 128 * h + 32 * g;
            for (int half = 0; half < 2; ++half) {
              const float dl = d * float(b[k].scales[(e0 + 16 * half) / 16]);
              float* out = dst + k * kQK + e0 + 16 * half;
              for (int l = 16 * half; l < 16 * half + 16; ++l)
                out[l - 16 * half] = dl * float(int(((ql[l] >> lo_shift) & 0x0f) | ((qh[l] >> hi_shift) & 3) << 4) - 32);
            }
          }
      }
      return;
    }
  }
  PKV_ASSERT(!"dequantize_row: unknown dtype");
}

}  // namespace phasekv
