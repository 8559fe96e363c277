// The CUDA kernels' per-element math (kernels/cuda/common.cuh, __host__ __device__) compiled for
// the host and checked against the CPU reference: the same source runs in the GPU kernels, so
// a bit-exact host result pins the rounding those kernels were written to reproduce (what the
// device's own instructions do is checked on a GPU by test_backend_ops).
#include <doctest/doctest.h>

#include <cstring>
#include <random>
#include <vector>

#include "common.cuh"
#include "cpu_kernels.h"
#include "dtype.h"

using namespace phasekv;

namespace {

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

template <DType T>
void check_row(const std::vector<uint8_t>& row, int n) {
  std::vector<float> ref(static_cast<size_t>(n));
  dequantize_row(T, row.data(), ref.data(), n);
  int mismatches = 0;
  for (int i = 0; i < n; ++i) mismatches += bits(cuda::dequant_element<T>(row.data(), i)) != bits(ref[size_t(i)]);
  CHECK_MESSAGE(mismatches == 0, dtype_name(T));
}

}  // namespace

TEST_CASE("cuda math: half_to_float equals fp16_to_fp32 for all 65,536 inputs") {
  int mismatches = 0;
  for (uint32_t h = 0; h < 65536; ++h) mismatches += bits(cuda::half_to_float(uint16_t(h))) != bits(fp16_to_fp32(uint16_t(h)));
  CHECK(mismatches == 0);
  for (uint32_t b = 0; b < 65536; b += 7) CHECK(bits(cuda::bf16_to_float(uint16_t(b))) == bits(bf16_to_fp32(uint16_t(b))));
}

TEST_CASE("cuda math: dequant_element is bit-identical to dequantize_row for every dtype") {
  std::mt19937 rng(7);
  const int n = 256;  // 8 blocks
  for (int rep = 0; rep < 20; ++rep) {
    std::vector<uint8_t> raw(size_t(n) * 4 + 64);
    for (uint8_t& b : raw) b = uint8_t(rng());
    // Finite f16 scales: clear the exponent's top bit of each block's scale (and Q4_1's minimum).
    std::vector<uint8_t> q8(raw.begin(), raw.begin() + 34 * 8), q40(raw.begin(), raw.begin() + 18 * 8),
        q41(raw.begin(), raw.begin() + 20 * 8);
    for (int k = 0; k < 8; ++k) {
      q8[size_t(k) * 34 + 1] &= 0xbf;
      q40[size_t(k) * 18 + 1] &= 0xbf;
      q41[size_t(k) * 20 + 1] &= 0xbf;
      q41[size_t(k) * 20 + 3] &= 0xbf;
    }
    check_row<DType::Q8_0>(q8, n);
    check_row<DType::Q4_0>(q40, n);
    check_row<DType::Q4_1>(q41, n);
    std::vector<uint8_t> f16(raw.begin(), raw.begin() + 2 * n), f32(raw.begin(), raw.begin() + 4 * n);
    check_row<DType::F16>(f16, n);
    check_row<DType::BF16>(f16, n);
    check_row<DType::F32>(f32, n);
  }
}

// Random blocks of `t` (n elements) with finite f16 scale fields (dtype_scale_fields: d, and
// dmin / m where the type has one; the exponent's top bit cleared).
static std::vector<uint8_t> random_blocks(std::mt19937& rng, DType t, int n) {
  const DTypeInfo& info = dtype_info(t);
  std::vector<uint8_t> raw(size_t(n) / info.block_elems * info.block_bytes);
  for (uint8_t& b : raw) b = uint8_t(rng());
  const ScaleFields f = dtype_scale_fields(t);
  for (size_t at = 0; at < raw.size(); at += info.block_bytes) {
    raw[at + size_t(f.d) + 1] &= 0xbf;
    if (f.min >= 0) raw[at + size_t(f.min) + 1] &= 0xbf;
  }
  return raw;
}

TEST_CASE("cuda math: dequant_element is bit-identical to dequantize_row for Q5_0, Q5_1 and the K-quants") {
  std::mt19937 rng(11);
  for (int rep = 0; rep < 20; ++rep) {
    check_row<DType::Q5_0>(random_blocks(rng, DType::Q5_0, 256), 256);
    check_row<DType::Q5_1>(random_blocks(rng, DType::Q5_1, 256), 256);
    check_row<DType::Q2_K>(random_blocks(rng, DType::Q2_K, 512), 512);
    check_row<DType::Q3_K>(random_blocks(rng, DType::Q3_K, 512), 512);
    check_row<DType::Q4_K>(random_blocks(rng, DType::Q4_K, 512), 512);
    check_row<DType::Q5_K>(random_blocks(rng, DType::Q5_K, 512), 512);
    check_row<DType::Q6_K>(random_blocks(rng, DType::Q6_K, 512), 512);
  }
}

TEST_CASE("cuda math: rope_rotate rounds as cpu::rope_apply (both pair conventions)") {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  for (bool interleaved : {true, false}) {
    const int dim = 64, half = 32;
    std::vector<float> v(dim), c(half), s(half);
    for (float& x : v) x = u(rng);
    for (int i = 0; i < half; ++i) {
      c[size_t(i)] = std::cos(u(rng));
      s[size_t(i)] = std::sin(u(rng));
    }
    std::vector<float> ref = v, got = v;
    cpu::rope_apply(ref.data(), c.data(), s.data(), dim, interleaved);
    for (int i = 0; i < half; ++i) {
      const int a = interleaved ? 2 * i : i, b = interleaved ? 2 * i + 1 : i + half;
      cuda::rope_rotate(got[size_t(a)], got[size_t(b)], c[size_t(i)], s[size_t(i)]);
    }
    int mismatches = 0;
    for (int i = 0; i < dim; ++i) mismatches += bits(got[size_t(i)]) != bits(ref[size_t(i)]);
    CHECK(mismatches == 0);
  }
}

TEST_CASE("cuda math: the compressor's accumulate step is sum * keep + e * x, each rounded once") {
  // Hand-derived: a = 1 + 2^-23, keep = 1 - 2^-24. The exact product is 1 + 2^-24 - 2^-47, which
  // rounds to 1; adding e * x = -1 then gives exactly 0. A fused multiply-add would keep the
  // product exact and return 2^-24 - 2^-47.
  const float a = 1.0f + 1.0f / 8388608.0f, keep = 1.0f - 1.0f / 16777216.0f;
  CHECK(bits(cuda::accumulate(a, keep, 1.0f, -1.0f)) == bits(0.0f));
  CHECK(cuda::accumulate(2.0f, 0.5f, 3.0f, 4.0f) == 13.0f);
  CHECK(cuda::accumulate(0.0f, 0.0f, 1.0f, -2.5f) == -2.5f);
}
