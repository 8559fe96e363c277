// dtype facts and reference conversions, against hand-derived values.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>

#include "dtype.h"

using namespace phasekv;

TEST_CASE("dtype block layouts match GGUF") {
  CHECK(dtype_info(DType::Q4_0).block_bytes == 18);
  CHECK(dtype_info(DType::Q4_1).block_bytes == 20);
  CHECK(dtype_info(DType::Q8_0).block_bytes == 34);
  CHECK(dtype_info(DType::F16).block_bytes == 2);
  CHECK(dtype_info(DType::Q5_0).block_bytes == 22);
  CHECK(dtype_info(DType::Q5_1).block_bytes == 24);
  CHECK(dtype_info(DType::Q2_K).block_bytes == 84);
  CHECK(dtype_info(DType::Q3_K).block_bytes == 110);
  CHECK(dtype_info(DType::Q4_K).block_bytes == 144);
  CHECK(dtype_info(DType::Q5_K).block_bytes == 176);
  CHECK(dtype_info(DType::Q6_K).block_bytes == 210);
  CHECK(dtype_info(DType::Q6_K).block_elems == 256);
  CHECK(dtype_info(uint8_t(13)) == nullptr);
  DType t;
  CHECK(dtype_from_name("Q4_1", &t));
  CHECK(t == DType::Q4_1);
  CHECK(dtype_from_name("Q6_K", &t));
  CHECK(t == DType::Q6_K);
  CHECK_FALSE(dtype_from_name("IQ4_XS", &t));
}

TEST_CASE("tensor_byte_size: hand-computed sizes and errors") {
  uint64_t n = 0;
  CHECK(tensor_byte_size(DType::Q4_1, {2, 64}, &n).ok());
  CHECK(n == 2 * 2 * 20);
  CHECK(tensor_byte_size(DType::Q8_0, {49152, 576}, &n).ok());
  CHECK(n == 30081024);  // SmolLM2's token_embd.weight
  CHECK(tensor_byte_size(DType::BF16, {3, 5}, &n).ok());
  CHECK(n == 30);
  CHECK(tensor_byte_size(DType::F32, {7}, &n).ok());
  CHECK(n == 28);
  Status s = tensor_byte_size(DType::Q4_0, {2, 33}, &n);
  CHECK(s.code() == StatusCode::kInvalidFile);
  CHECK(s.message().find("33") != std::string::npos);
  CHECK_FALSE(tensor_byte_size(DType::F32, {}, &n).ok());
  CHECK_FALSE(tensor_byte_size(DType::F32, {4, 0}, &n).ok());
  CHECK_FALSE(tensor_byte_size(DType::F32, {1ull << 40, 1ull << 40}, &n).ok());
}

TEST_CASE("fp16 to fp32: hand-derived values") {
  CHECK(fp16_to_fp32(0x3C00) == 1.0f);
  CHECK(fp16_to_fp32(0xC000) == -2.0f);
  CHECK(fp16_to_fp32(0x3800) == 0.5f);
  CHECK(fp16_to_fp32(0x7BFF) == 65504.0f);
  CHECK(fp16_to_fp32(0x0400) == std::ldexp(1.0f, -14));  // smallest normal
  CHECK(fp16_to_fp32(0x0001) == std::ldexp(1.0f, -24));  // smallest subnormal
  CHECK(fp16_to_fp32(0x03FF) == std::ldexp(1023.0f, -24));
  CHECK(std::signbit(fp16_to_fp32(0x8000)));
  CHECK(std::isinf(fp16_to_fp32(0x7C00)));
  CHECK(std::isnan(fp16_to_fp32(0x7E00)));
}

TEST_CASE("fp32 to fp16: every half round-trips, ties go to even") {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const uint16_t x = uint16_t(h);
    const float f = fp16_to_fp32(x);
    if (std::isnan(f)) {
      CHECK(std::isnan(fp16_to_fp32(fp32_to_fp16(f))));
    } else {
      REQUIRE(fp32_to_fp16(f) == x);
    }
  }
  CHECK(fp32_to_fp16(1.0f + std::ldexp(1.0f, -11)) == 0x3C00);      // tie -> even (1.0)
  CHECK(fp32_to_fp16(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3C02);  // tie -> even (odd mantissa rounds up)
  CHECK(fp32_to_fp16(65520.0f) == 0x7C00);                          // rounds to inf
  CHECK(fp32_to_fp16(65519.0f) == 0x7BFF);
  CHECK(fp32_to_fp16(std::ldexp(1.0f, -25)) == 0x0000);  // half the smallest subnormal: tie -> 0
  CHECK(fp32_to_fp16(std::ldexp(1.5f, -25)) == 0x0001);
  CHECK(fp32_to_fp16(1e-10f) == 0x0000);
}

TEST_CASE("bf16 conversions") {
  CHECK(bf16_to_fp32(0x3F80) == 1.0f);
  CHECK(bf16_to_fp32(0xC040) == -3.0f);
  CHECK(fp32_to_bf16(1.0f) == 0x3F80);
  // 1 + 2^-8 is halfway between bf16 1.0 and 1 + 2^-7: ties to even -> 1.0.
  CHECK(fp32_to_bf16(1.0f + std::ldexp(1.0f, -8)) == 0x3F80);
  CHECK(fp32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)) == 0x3F82);
  CHECK(std::isnan(bf16_to_fp32(fp32_to_bf16(std::nanf("")))));
}

TEST_CASE("reference dequantization of hand-made blocks") {
  SUBCASE("Q4_1: x = d*q + m") {
    BlockQ4_1 b;
    b.d = 0x3800;  // 0.5
    b.m = 0xBC00;  // -1.0
    for (int j = 0; j < 16; ++j) b.qs[j] = uint8_t(j | ((15 - j) << 4));
    float out[32];
    dequantize_row(DType::Q4_1, &b, out, 32);
    for (int j = 0; j < 16; ++j) {
      CHECK(out[j] == 0.5f * j - 1.0f);
      CHECK(out[j + 16] == 0.5f * (15 - j) - 1.0f);
    }
  }
  SUBCASE("Q4_0: x = d*(q-8)") {
    BlockQ4_0 b;
    b.d = 0x4000;  // 2.0
    for (int j = 0; j < 16; ++j) b.qs[j] = uint8_t(j | (3 << 4));
    float out[32];
    dequantize_row(DType::Q4_0, &b, out, 32);
    for (int j = 0; j < 16; ++j) {
      CHECK(out[j] == 2.0f * (j - 8));
      CHECK(out[j + 16] == -10.0f);
    }
  }
  SUBCASE("Q8_0: x = d*q, two blocks") {
    BlockQ8_0 b[2];
    b[0].d = 0x3400;  // 0.25
    b[1].d = 0xC400;  // -4.0
    for (int j = 0; j < 32; ++j) {
      b[0].qs[j] = int8_t(j * 4 - 64);
      b[1].qs[j] = int8_t(127 - j);
    }
    float out[64];
    dequantize_row(DType::Q8_0, b, out, 64);
    for (int j = 0; j < 32; ++j) {
      CHECK(out[j] == 0.25f * (j * 4 - 64));
      CHECK(out[32 + j] == -4.0f * (127 - j));
    }
  }
  SUBCASE("F16 and BF16 rows") {
    const uint16_t h[4] = {0x3C00, 0xC000, 0x0001, 0x7BFF};
    float out[4];
    dequantize_row(DType::F16, h, out, 4);
    CHECK(out[0] == 1.0f);
    CHECK(out[1] == -2.0f);
    CHECK(out[2] == std::ldexp(1.0f, -24));
    CHECK(out[3] == 65504.0f);
    const uint16_t bf[2] = {0x3F80, 0x4049};
    dequantize_row(DType::BF16, bf, out, 2);
    CHECK(out[0] == 1.0f);
    CHECK(out[1] == 3.140625f);
  }
}
