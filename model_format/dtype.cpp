#include "dtype.h"

#include <cstring>

namespace phasekv {

namespace {
const DTypeInfo kInfo[kDTypeCount] = {
    {"F32", 1, 4}, {"F16", 1, 2}, {"BF16", 1, 2}, {"Q8_0", 32, 34}, {"Q4_0", 32, 18}, {"Q4_1", 32, 20},
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
  }
  PKV_ASSERT(!"dequantize_row: unknown dtype");
}

}  // namespace phasekv
