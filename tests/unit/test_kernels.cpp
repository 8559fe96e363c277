// CPU kernels against naive double-precision references, and the determinism contract of
// cpu_kernels.h (SIMD dequantization equals the scalar reference bit for bit; a matmul's
// outputs do not depend on how rows and tokens are split).
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "cpu_backend.h"
#include "cpu_kernels.h"

using namespace phasekv;

namespace {

std::vector<const cpu::KernelTable*> tables() {
  std::vector<const cpu::KernelTable*> t;
  for (const char* n : {"portable", "avx2", "neon"})
    if (const cpu::KernelTable* k = cpu::kernels_by_name(n)) t.push_back(k);
  return t;
}

// Random weights in `t` for rows x k (scales kept small and finite).
std::vector<uint8_t> random_weights(DType t, int rows, int k, std::mt19937& rng) {
  uint64_t bytes = 0;
  REQUIRE(tensor_byte_size(t, {uint64_t(rows), uint64_t(k)}, &bytes).ok());
  std::vector<uint8_t> w(bytes);
  for (auto& b : w) b = uint8_t(rng());
  const DTypeInfo& info = dtype_info(t);
  if (t == DType::F32) {
    float* f = reinterpret_cast<float*>(w.data());
    std::normal_distribution<float> nd;
    for (uint64_t i = 0; i < bytes / 4; ++i) f[i] = nd(rng);
  } else if (t == DType::F16 || t == DType::BF16) {
    uint16_t* h = reinterpret_cast<uint16_t*>(w.data());
    std::normal_distribution<float> nd;
    for (uint64_t i = 0; i < bytes / 2; ++i) h[i] = t == DType::F16 ? fp32_to_fp16(nd(rng)) : fp32_to_bf16(nd(rng));
  } else {
    const ScaleFields f = dtype_scale_fields(t);
    for (uint64_t off = 0; off < bytes; off += info.block_bytes) {
      const uint16_t d = fp32_to_fp16(0.01f + 0.05f * float(rng() % 100) / 100.0f);
      std::memcpy(&w[off + uint64_t(f.d)], &d, 2);
      if (f.min >= 0) {
        // Q4_1 / Q5_1 store the minimum itself; K-quants a positive super-scale of the minimums.
        const uint16_t m = fp32_to_fp16(t == DType::Q4_1 || t == DType::Q5_1 ? -0.3f : 0.02f);
        std::memcpy(&w[off + uint64_t(f.min)], &m, 2);
      }
    }
  }
  return w;
}

}  // namespace

TEST_CASE("SIMD dequantization equals the scalar reference bit for bit") {
  std::mt19937 rng(3);
  for (const cpu::KernelTable* k : tables()) {
    for (uint8_t ti = 0; ti < kDTypeCount; ++ti) {
      const DType t = DType(ti);
      INFO(k->name << " " << dtype_name(t));
      std::vector<uint8_t> w = random_weights(t, 1, 1024, rng);
      std::vector<float> ref(1024), got(1024);
      dequantize_row(t, w.data(), ref.data(), 1024);
      k->dequant_row(t, w.data(), got.data(), 1024);
      CHECK(std::memcmp(ref.data(), got.data(), 4096) == 0);
    }
  }
}

TEST_CASE("matmul matches a double-precision reference for every dtype and ISA") {
  std::mt19937 rng(5);
  const int rows = 37, n_tok = 5;  // odd row count: exercises the 1-3 row tails
  std::normal_distribution<float> nd;
  for (uint8_t ti = 0; ti < kDTypeCount; ++ti) {
    const DType t = DType(ti);
    const int k = dtype_info(t).block_elems == 256 ? 512 : 96;  // K-quant rows: whole super-blocks
    std::vector<float> x(size_t(n_tok) * k);
    for (float& v : x) v = nd(rng);
    std::vector<uint8_t> w = random_weights(t, rows, k, rng);
    const size_t row_bytes = w.size() / rows;
    std::vector<float> wf(size_t(rows) * k);
    dequantize_row(t, w.data(), wf.data(), int64_t(wf.size()));
    for (const cpu::KernelTable* kt : tables()) {
      INFO(kt->name << " " << dtype_name(t));
      std::vector<float> y(size_t(n_tok) * rows), scratch(4 * size_t(k));
      cpu::MatmulArgs a{t, w.data(), row_bytes, x.data(), y.data(), k, n_tok, rows};
      kt->matmul_rows(a, 0, rows, scratch.data());
      double worst = 0;
      for (int tok = 0; tok < n_tok; ++tok)
        for (int r = 0; r < rows; ++r) {
          double ref = 0, mag = 0;
          for (int i = 0; i < k; ++i) {
            ref += double(wf[size_t(r) * k + i]) * x[size_t(tok) * k + i];
            mag += std::fabs(double(wf[size_t(r) * k + i]) * x[size_t(tok) * k + i]);
          }
          worst = std::max(worst, std::fabs(y[size_t(tok) * rows + r] - ref) / (mag + 1e-30));
        }
      CHECK(worst < 1e-6);
    }
  }
}

TEST_CASE("matmul outputs do not depend on row ranges or token counts and dot() agrees") {
  std::mt19937 rng(9);
  const int rows = 23, k = 200, n_tok = 7;  // k not a multiple of 8: exercises the tail
  std::vector<float> x(size_t(n_tok) * k);
  std::normal_distribution<float> nd;
  for (float& v : x) v = nd(rng);
  std::vector<uint8_t> w = random_weights(DType::F32, rows, k, rng);
  for (const cpu::KernelTable* kt : tables()) {
    INFO(kt->name);
    std::vector<float> all(size_t(n_tok) * rows), scratch(4 * size_t(k));
    kt->matmul_rows({DType::F32, w.data(), size_t(k) * 4, x.data(), all.data(), k, n_tok, rows}, 0, rows,
                    scratch.data());
    for (int tok = 0; tok < n_tok; ++tok) {
      // One token at a time, rows split unevenly.
      std::vector<float> y(static_cast<size_t>(rows));
      cpu::MatmulArgs a{DType::F32, w.data(), size_t(k) * 4, x.data() + size_t(tok) * k, y.data(), k, 1, rows};
      kt->matmul_rows(a, 0, 5, scratch.data());
      kt->matmul_rows(a, 5, 6, scratch.data());
      kt->matmul_rows(a, 6, rows, scratch.data());
      CHECK(std::memcmp(y.data(), all.data() + size_t(tok) * rows, size_t(rows) * 4) == 0);
      const float* wr = reinterpret_cast<const float*>(w.data());
      for (int r = 0; r < rows; ++r)
        CHECK(kt->dot(wr + size_t(r) * k, x.data() + size_t(tok) * k, k) == all[size_t(tok) * rows + r]);
    }
  }
}

TEST_CASE("dot_rows and axpy_rows equal dot and axpy row by row bit for bit") {
  // Attention's score and value loops: each row's dot (times the scale) and each row's axpy in
  // order must give exactly what one call per row gives, whatever the row count (four-row groups
  // and the rest), the length (64-float chunks, 8-float chunks, a scalar tail) and the stride.
  std::mt19937 rng(17);
  std::normal_distribution<float> nd;
  auto bits = [](float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
  };
  for (const cpu::KernelTable* kt : tables())
    for (int n : {64, 128, 72, 13, 200})
      for (int rows : {0, 1, 3, 4, 5, 9, 17}) {
        INFO(kt->name << " n=" << n << " rows=" << rows);
        const size_t stride = size_t(n) + 5;
        std::vector<float> q(static_cast<size_t>(n)), m(stride * size_t(rows) + 1), c(static_cast<size_t>(rows) + 1);
        for (float& v : q) v = nd(rng);
        for (float& v : m) v = nd(rng);
        for (float& v : c) v = nd(rng);
        const float scale = 0.125f + float(rows) / 7.0f;  // not a power of two: a real rounding
        std::vector<float> got(static_cast<size_t>(rows) + 1, -1.0f);
        kt->dot_rows(q.data(), m.data(), stride, rows, n, scale, got.data());
        size_t bad = 0;
        for (int i = 0; i < rows; ++i) bad += bits(got[size_t(i)]) != bits(kt->dot(q.data(), m.data() + size_t(i) * stride, n) * scale);
        CHECK(bad == 0);
        CHECK(got[size_t(rows)] == -1.0f);  // nothing written past the rows
        std::vector<float> y0(size_t(n) + 1);
        for (float& v : y0) v = nd(rng);
        std::vector<float> y1(y0), y2(y0);
        kt->axpy_rows(c.data(), m.data(), stride, rows, y1.data(), n);
        for (int i = 0; i < rows; ++i) kt->axpy(c[size_t(i)], m.data() + size_t(i) * stride, y2.data(), n);
        bad = 0;
        for (size_t e = 0; e <= size_t(n); ++e) bad += bits(y1[e]) != bits(y2[e]);  // y[n]: untouched by both
        CHECK(bad == 0);
      }
}

TEST_CASE("rmsnorm, rope, silu and softmax against hand-derived values") {
  const float x[4] = {1, 2, 3, 4}, w[4] = {1, 1, 2, 0.5f};
  float out[4];
  cpu::rmsnorm(x, w, 0.0f, out, 4);
  const float rms = std::sqrt(30.0f / 4.0f);
  CHECK(out[0] == doctest::Approx(1 / rms));
  CHECK(out[2] == doctest::Approx(6 / rms));
  CHECK(out[3] == doctest::Approx(2 / rms));
  // Rotating (1, 0) by 90 degrees gives (0, 1); pairs interleaved vs NeoX.
  float v[4] = {1, 0, 1, 0};
  const float c[2] = {0, 1}, s[2] = {1, 0};
  cpu::rope_apply(v, c, s, 4, true);  // pair (0,1) by 90deg, pair (2,3) by 0deg
  CHECK(v[0] == doctest::Approx(0));
  CHECK(v[1] == doctest::Approx(1));
  CHECK(v[2] == doctest::Approx(1));
  CHECK(v[3] == doctest::Approx(0));
  float n[4] = {1, 0, 0, 0};
  cpu::rope_apply(n, c, s, 4, false);  // pairs (0,2) by 90deg and (1,3) by 0deg
  CHECK(n[0] == doctest::Approx(0));
  CHECK(n[2] == doctest::Approx(1));
  const float g[2] = {0.0f, 2.0f}, u[2] = {3.0f, 1.0f};
  float h[2];
  cpu::silu_mul(g, u, h, 2);
  CHECK(h[0] == 0.0f);
  CHECK(h[1] == doctest::Approx(2.0 / (1.0 + std::exp(-2.0))));
  float sm[3] = {1.0f, 2.0f, 3.0f};
  cpu::softmax(sm, 3);
  const double z = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  CHECK(sm[0] == doctest::Approx(std::exp(1.0) / z));
  CHECK(sm[2] == doctest::Approx(std::exp(3.0) / z));
}

TEST_CASE("CpuBackend: rope reuses a position's tables only for the same frequencies and split SiLU equals the unsplit kernel") {
  CpuBackend be(2);
  // One pair (rope_dim 2) rotated by pos * f: (1, 0) -> (cos, sin). The same frequency buffer
  // rewritten between two calls at the same position must not give the first call's tables.
  float f[1] = {0.5f};
  auto rotate = [&](int pos) {
    float v[2] = {1.0f, 0.0f};
    be.rope(v, 1, 1, 2, pos, f, 2, false, 1.0f);
    return std::vector<float>{v[0], v[1]};
  };
  std::vector<float> r = rotate(3);
  CHECK(r[0] == doctest::Approx(std::cos(1.5)));
  CHECK(r[1] == doctest::Approx(std::sin(1.5)));
  r = rotate(3);  // a table hit: the same values
  CHECK(r[0] == doctest::Approx(std::cos(1.5)));
  f[0] = 0.25f;  // same address, new value
  r = rotate(3);
  CHECK(r[0] == doctest::Approx(std::cos(0.75)));
  CHECK(r[1] == doctest::Approx(std::sin(0.75)));
  r = rotate(4);
  CHECK(r[0] == doctest::Approx(std::cos(1.0)));
  CHECK(r[1] == doctest::Approx(std::sin(1.0)));
  // SiLU(g) * u split into per-thread chunks equals the unsplit kernel bit for bit, tails included.
  for (size_t n : {size_t(1), size_t(511), size_t(1024), size_t(1537), size_t(4099)}) {
    std::mt19937 rng{unsigned(n)};
    std::uniform_real_distribution<float> dist(-6.0f, 6.0f);
    std::vector<float> g(n), u(n), split(n, -1.0f), whole(n);
    for (size_t i = 0; i < n; ++i) g[i] = dist(rng), u[i] = dist(rng);
    be.silu_mul(g.data(), u.data(), split.data(), n);
    cpu::silu_mul(g.data(), u.data(), whole.data(), int(n));
    CHECK(std::memcmp(split.data(), whole.data(), n * sizeof(float)) == 0);
  }
}
