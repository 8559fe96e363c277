// The q8 (--x2: q8x2) decode matmul alone (one token x rows of Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 / Q4_K / Q5_K / Q6_K weights): Gblock/s and GB/s
// of weights per instruction set, with the weights hot in L2 (the default 192 rows of k 576) or
// streamed from DRAM (--rows 262144: 94 MB of Q4_1). Every instruction set is timed in each
// round, rounds interleaved, so a noisy host slows all of them alike; prints the median round.
// Checks the instruction sets' outputs equal the portable kernels' bit for bit before timing
// (the portable kernels themselves are timed only where there is no other), and, where the
// AVX-512 VNNI kernels are, the same on the R4 layout (cpu_kernels.h WeightLayout), and (AVX2,
// AVX-512 VNNI) R16 to f32 rounding (its own order).
//   phasekv_q8_bench [--type Q4_1] [--rows 192] [--k 576, K-quants 768] [--rounds 9] [--ms 200] [--x2]
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "cpu_kernels.h"

using namespace phasekv;

int main(int argc, char** argv) {
  DType dt = DType::Q4_1;
  int rows = 192, k = 0, rounds = 9, tokens = 1;
  struct Type {
    const char* name;
    DType t;
    int bytes, elems;  // per block (super-block for K-quants)
  };
  const Type types[] = {{"Q4_0", DType::Q4_0, 18, 32},   {"Q4_1", DType::Q4_1, 20, 32},  {"Q5_0", DType::Q5_0, 22, 32},
                        {"Q5_1", DType::Q5_1, 24, 32},   {"Q8_0", DType::Q8_0, 34, 32},
                        {"Q4_K", DType::Q4_K, 144, 256}, {"Q5_K", DType::Q5_K, 176, 256}, {"Q6_K", DType::Q6_K, 210, 256}};
  const Type* ty = &types[1];
  double ms = 200;
  bool x2 = false;  // --x2: the q8x2 mode's kernels (15-bit activations, two products per weight)
  for (int i = 1; i < argc; ++i) {
    const std::string o = argv[i];
    if (o == "--x2") {
      x2 = true;
      continue;
    }
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    const bool known = o == "--type" || o == "--rows" || o == "--k" || o == "--tokens" || o == "--rounds" || o == "--ms";
    if (o == "-h" || o == "--help") {
      std::printf("Usage: %s [--type Q4_0|Q4_1|Q5_0|Q5_1|Q8_0|Q4_K|Q5_K|Q6_K] [--rows N] [--k K] [--tokens N] [--rounds N] [--ms MS] [--x2]\n"
                  "  --rows 192 (default) keeps the weights in L2; --rows 262144 streams ~94 MB of Q4_1 from DRAM\n"
                  "  --tokens 1 (default) times decode's matrix-vector kernels; --tokens 64 prefill's tiles\n"
                  "  --x2 the q8x2 mode's kernels (default: the q8 mode's)\n",
                  argv[0]);
      return 0;
    }
    if (!known) {
      std::fprintf(stderr, "%s: unknown option '%s' (see --help)\n", argv[0], o.c_str());
      return 2;
    }
    if (!v) {
      std::fprintf(stderr, "%s: %s needs a value (see --help)\n", argv[0], o.c_str());
      return 2;
    }
    // Whole numbers only ("1e6", "12abc" refused); --ms a finite positive number.
    auto integer = [&](int* out) {
      char* end = nullptr;
      errno = 0;
      const long n = std::strtol(v, &end, 10);
      if (errno || end == v || *end || n < 0 || n > (1L << 30)) {
        std::fprintf(stderr, "%s: %s '%s' is not a whole number in [0, 2^30]\n", argv[0], o.c_str(), v);
        return false;
      }
      *out = int(n);
      return true;
    };
    ++i;
    if (o == "--type") {
      ty = nullptr;
      for (const Type& t : types)
        if (std::strcmp(v, t.name) == 0) ty = &t;
      if (!ty) {
        std::fprintf(stderr, "%s: --type '%s': Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K or Q6_K\n", argv[0], v);
        return 2;
      }
    } else if (o == "--rows") {
      if (!integer(&rows)) return 2;
    } else if (o == "--k") {
      if (!integer(&k)) return 2;
      if (k == 0) {
        std::fprintf(stderr, "%s: --k 0: give a positive multiple of the block size\n", argv[0]);
        return 2;
      }
    } else if (o == "--tokens") {
      if (!integer(&tokens)) return 2;
    } else if (o == "--rounds") {
      if (!integer(&rounds)) return 2;
    } else {  // --ms
      char* end = nullptr;
      ms = std::strtod(v, &end);
      if (end == v || *end) ms = -1;  // refused below
    }
  }
  dt = ty->t;
  if (k == 0) k = ty->elems == 256 ? 768 : 576;
  if (rows < 4 || rows > (1 << 24) || k < ty->elems || k % ty->elems || k > (1 << 16) || rounds < 1 || rounds > 1000 || tokens < 1 || tokens > 4096 ||
      !(ms > 0 && ms <= 1e5)) {  // NaN fails too
    std::fprintf(stderr, "%s: --rows in [4, 2^24], --k a multiple of %d up to 65536, --tokens in [1, 4096], --rounds in [1, 1000], --ms in (0, 1e5]\n",
                 argv[0], ty->elems);
    return 2;
  }
  const size_t rb = size_t(k) / size_t(ty->elems) * size_t(ty->bytes);
  const double blk = double(ty->bytes) * 32 / ty->elems;  // bytes per 32 weights
  if (double(rb) * rows > 16e9) {
    std::fprintf(stderr, "%s: %d rows x %zu bytes is more than 16 GB of weights\n", argv[0], rows, rb);
    return 2;
  }
  std::vector<uint8_t> w(rb * size_t(rows));
  std::mt19937 rng(1);
  for (uint8_t& b : w) b = uint8_t(rng());
  for (int r = 0; r < rows; ++r)  // finite f16 scales (d ~ 2^-7, m ~ -2^-7; K-quants' d, dmin ~ 2^-7)
    for (int b = 0; b < k / ty->elems; ++b) {
      uint8_t* p = &w[size_t(r) * rb + size_t(b) * size_t(ty->bytes)];
      const uint16_t d = 0x2000, m = 0xa000;
      if (dt == DType::Q6_K) {
        std::memcpy(p + 208, &d, 2);
      } else {
        std::memcpy(p, &d, 2);
        if (dt == DType::Q4_1 || dt == DType::Q5_1) std::memcpy(p + 2, &m, 2);
        if (dt == DType::Q4_K || dt == DType::Q5_K) std::memcpy(p + 2, &d, 2);
      }
    }
  std::vector<float> x(size_t(k) * size_t(tokens));
  for (float& v : x) v = float(rng() % 2001) / 1000.0f - 1.0f;
  std::vector<const cpu::KernelTable*> ts;
  for (const char* n : {"portable", "avx2-maddubs", "avx512vnni", "neon-nodotprod", "neon-dotprod"})
    if (const cpu::KernelTable* t = cpu::kernels_by_name(n)) ts.push_back(t);
  std::vector<cpu::BlockQ8x> xq(size_t(k) / 32 * size_t(tokens));
  std::vector<cpu::BlockQ8x2> xq2(x2 ? xq.size() : 0);
  for (int t = 0; t < tokens; ++t) {
    if (x2)
      ts[0]->quantize_q8x2(x.data() + size_t(t) * k, xq2.data() + size_t(t) * (k / 32), k);
    else
      ts[0]->quantize_q8(x.data() + size_t(t) * k, xq.data() + size_t(t) * (k / 32), k);
  }
  // The mode's kernels of a table: rows, R4, R16.
  auto rows_fn = [&](const cpu::KernelTable* t) { return x2 ? t->matmul_q8x2_rows : t->matmul_q8_rows; };
  auto r4_fn = [&](const cpu::KernelTable* t) { return x2 ? t->matmul_q8x2_rows_r4 : t->matmul_q8_rows_r4; };
  auto r16_fn = [&](const cpu::KernelTable* t) { return x2 ? t->matmul_q8x2_rows_r16 : t->matmul_q8_rows_r16; };
  std::vector<float> y_ref(size_t(rows) * size_t(tokens)), y(y_ref.size());
  cpu::MatmulArgs a{dt, w.data(), rb, x.data(), y_ref.data(), k, tokens, rows};
  a.xq = xq.data();
  a.xq2 = xq2.data();
  rows_fn(ts[0])(a, 0, rows);
  for (const cpu::KernelTable* t : ts) {
    std::fill(y.begin(), y.end(), std::numeric_limits<float>::quiet_NaN());  // an output left unwritten fails
    a.y = y.data();
    rows_fn(t)(a, 0, rows);
    if (std::memcmp(y.data(), y_ref.data(), y.size() * sizeof(float)) != 0) {
      std::fprintf(stderr, "%s: %s's outputs differ from the portable kernels'\n", argv[0], t->q8_isa);
      return 1;
    }
  }
  // What is timed: each table's kernels on the file's rows, and where it has them on the R4 and R16 layouts.
  struct Entry {
    std::string name;
    void (*fn)(const cpu::MatmulArgs&, int, int);
    cpu::MatmulArgs a;
  };
  std::vector<Entry> es;
  // The portable kernels (30-50x slower) only checked, not timed, where an instruction set is.
  for (size_t i = ts.size() > 1 ? 1 : 0; i < ts.size(); ++i) es.push_back({ts[i]->q8_isa, rows_fn(ts[i]), a});
  std::vector<uint8_t> r4;
  for (const cpu::KernelTable* t : ts)
    if (r4_fn(t) && cpu::r4_fits(dt, rows, k)) {
      r4.resize(cpu::r4_bytes(dt, rows, k));
      cpu::repack_r4(dt, w.data(), rb, rows, k, r4.data());
      Entry e{std::string(t->q8_isa) + "-r4", r4_fn(t), a};
      e.a.w = r4.data();
      e.a.w_layout = cpu::WeightLayout::R4;
      e.a.w_hdr = r4.data() + cpu::r4_hdr_offset(dt, rows, k);
      std::fill(y.begin(), y.end(), std::numeric_limits<float>::quiet_NaN());
      e.a.y = y.data();
      e.fn(e.a, 0, rows);
      if (std::memcmp(y.data(), y_ref.data(), y.size() * sizeof(float)) != 0) {
        std::fprintf(stderr, "%s: %s's outputs differ from the portable kernels'\n", argv[0], e.name.c_str());
        return 1;
      }
      es.push_back(e);
    }
  // ... and on the R16 layout (Q4_0 / Q4_1 / Q8_0, rows a multiple of 16): its own order, so checked
  // against the portable kernels to f32 rounding (relative L2 <= 1e-5), not bit for bit (the
  // bit-exact check of its order: tests/unit/test_q8.cpp).
  std::vector<uint8_t> r16_buf;
  for (const cpu::KernelTable* t : ts)
    if (r16_fn(t) && cpu::r16_fits(dt, rows, k)) {
      r16_buf.resize(cpu::r16_bytes(dt, rows, k) + 64);
      uint8_t* r16 = r16_buf.data() + (64 - uintptr_t(r16_buf.data()) % 64) % 64;  // its aligned loads
      cpu::repack_r16(dt, w.data(), rb, rows, k, r16);
      Entry e{std::string(t->q8_isa) + "-r16", r16_fn(t), a};
      e.a.w = r16;
      e.a.w_layout = cpu::WeightLayout::R16;
      e.a.w_hdr = r16 + cpu::r16_hdr_offset(dt, rows, k);
      std::fill(y.begin(), y.end(), std::numeric_limits<float>::quiet_NaN());
      e.a.y = y.data();
      e.fn(e.a, 0, rows);
      double num = 0, den = 0;
      for (size_t i = 0; i < y.size(); ++i) {
        num += (double(y[i]) - y_ref[i]) * (double(y[i]) - y_ref[i]);
        den += double(y_ref[i]) * y_ref[i];
      }
      if (!(num <= 1e-10 * den)) {  // NaN (an output left unwritten) fails too
        std::fprintf(stderr, "%s: %s's outputs are not within 1e-5 of the portable kernels'\n", argv[0], e.name.c_str());
        return 1;
      }
      es.push_back(e);
    }
  // Calls per timed round: about --ms milliseconds at 1 Gblock/s (blocks: 32-weight blocks times tokens).
  const double blocks = double(rows) * (k / 32) * tokens;
  const int calls = int(std::min(1e9, std::max(1.0, ms * 1e6 / blocks)));
  std::vector<std::vector<double>> gbs(es.size());
  using clock = std::chrono::steady_clock;
  for (int r = 0; r < rounds; ++r)
    for (size_t i = 0; i < es.size(); ++i) {  // the median printed below: the upper one for an even count
      const auto t0 = clock::now();
      for (int c = 0; c < calls; ++c) es[i].fn(es[i].a, 0, rows);
      const double s = std::chrono::duration<double>(clock::now() - t0).count();
      gbs[i].push_back(blocks * calls / s / 1e9);
    }
  std::printf("%s %s matmul, %s, %d rows x k %d (%.1f KiB of weights) x %d tokens, %d calls per round, %d rounds%s:\n",
              x2 ? "q8x2" : "q8", tokens == 1 ? "decode" : "prefill", ty->name, rows, k, double(w.size()) / 1024, tokens, calls, rounds,
              tokens == 1 ? "" : " (Gblock/s: blocks times tokens; GB/s: of weights read once per call)");
  for (size_t i = 0; i < es.size(); ++i) {
    std::vector<double> v = gbs[i];
    std::sort(v.begin(), v.end());
    const double med = v[v.size() / 2];
    std::printf("  %-17s median %.3f Gblock/s = %5.1f GB/s of weights (rounds %.3f .. %.3f)\n", es[i].name.c_str(), med,
                med * blk / tokens, v.front(), v.back());
  }
  return 0;
}
