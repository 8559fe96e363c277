// The backend-consistency harness: every BackendOp x dtype x shape class run through the
// Backend interface on the CUDA backend and on the CPU backend (the reference), compared.
// Dequantization, embed, add, copies, ring writes and the compressor reset are bit-exact; every
// other op is within a normalised-MSE bound stated next to it (NMSE = |a - b|^2 / |b|^2).
//
// Usage: phasekv_backend_ops [--filter SUBSTRING] [--list]
// Exit: 0 all passed; 1 a case failed; 77 "skipped: no CUDA device" (ctest: skipped).
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backends.h"
#include "cpu_backend.h"
#include "dtype.h"

using namespace phasekv;

namespace {

// ---- bounds (NMSE against the CPU) and why each is tight ------------------------------------
// f32 has a unit roundoff u = 2^-24 ~ 6e-8. A sum of k terms reordered (tree vs index order)
// moves each result by at most ~k u sum|terms|; on random data sum|terms| / |sum| ~ sqrt(k) and
// the errors are not systematic, so NMSE ~ k u^2 * O(1): ~ 4e-12 for k = 576, 3e-11 for k = 1536.
constexpr double kMatmulBound = 1e-9;    // k <= 1536, plus rows of cancellation: 30x headroom
constexpr double kNormBound = 1e-11;     // one reordered sum of squares (a scale error of ~sqrt(dim) u)
constexpr double kRopeBound = 1e-11;     // cosf/sinf within 2 ulps of the host's, one rotation
constexpr double kSiluBound = 1e-12;     // expf within 2 ulps; one division and product
constexpr double kAttentionBound = 1e-9; // online vs two-pass softmax (exp within 2 ulps), reordered dot and value sums
constexpr double kCompressBound = 1e-9;  // the same recurrence, expf within 2 ulps; RMSNorm of the entry reordered
constexpr double kScoreRel = 1e-9;       // the double log-sum-exp reordered: relative error ~ n * 2^-53

struct Counts {
  int passed = 0, failed = 0;
} g_counts;
std::string g_filter;

bool selected(const std::string& name) { return g_filter.empty() || name.find(g_filter) != std::string::npos; }

double nmse(const std::vector<float>& got, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = double(got[i]) - double(ref[i]);
    num += d * d;
    den += double(ref[i]) * double(ref[i]);
  }
  if (!std::isfinite(num)) return INFINITY;
  return den > 0 ? num / den : num;
}

void report(const std::string& name, bool ok, const char* fmt, double v, double bound) {
  std::printf("%-6s %-72s ", ok ? "ok" : "FAIL", name.c_str());
  std::printf(fmt, v, bound);
  std::printf("\n");
  (ok ? g_counts.passed : g_counts.failed)++;
}

void check_nmse(const std::string& name, const std::vector<float>& got, const std::vector<float>& ref, double bound) {
  const double e = nmse(got, ref);
  report(name, e <= bound, "nmse %.3g (bound %.0e)", e, bound);
}

void check_exact(const std::string& name, const std::vector<float>& got, const std::vector<float>& ref) {
  size_t diff = got.size() == ref.size() ? 0 : 1;
  for (size_t i = 0; i < ref.size() && i < got.size(); ++i) diff += std::memcmp(&got[i], &ref[i], 4) != 0;
  report(name, diff == 0, "%.0f elements differ (bound %.0f: bit-exact)", double(diff), 0.0);
}

// A buffer in the GPU backend's device memory, released with it.
struct DeviceBuffer {
  Backend* be = nullptr;
  void* p = nullptr;
  DeviceBuffer(Backend* b, size_t bytes) : be(b) {
    Status s = be->allocate(MemorySpace::Device, bytes ? bytes : 4, &p);
    if (!s.ok()) {
      std::fprintf(stderr, "device allocation failed: %s\n", s.to_string().c_str());
      std::exit(1);
    }
  }
  ~DeviceBuffer() { be->release(MemorySpace::Device, p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  template <class T>
  T* as() const { return static_cast<T*>(p); }
};

struct Ctx {
  CpuBackend cpu{2};
  std::unique_ptr<Backend> gpu;
  std::mt19937 rng{12345};

  std::vector<float> randn(size_t n, float scale = 1.0f) {
    std::normal_distribution<float> d(0.0f, scale);
    std::vector<float> v(n);
    for (float& x : v) x = d(rng);
    return v;
  }
  std::unique_ptr<DeviceBuffer> up(const void* host, size_t bytes) {
    auto b = std::make_unique<DeviceBuffer>(gpu.get(), bytes);
    gpu->upload(b->p, host, bytes);
    return b;
  }
  std::unique_ptr<DeviceBuffer> up(const std::vector<float>& v) { return up(v.data(), v.size() * 4); }
  std::vector<float> down(const DeviceBuffer& b, size_t n) {
    std::vector<float> v(n);
    gpu->download(v.data(), b.p, n * 4);
    Status s = gpu->synchronize();
    if (!s.ok()) {
      std::printf("FAIL   the CUDA backend reported: %s\n", s.to_string().c_str());
      g_counts.failed++;
    }
    return v;
  }
};

// Random weights [rows, cols] in `t`, with finite f16 scales.
std::vector<uint8_t> random_weights(Ctx& c, DType t, int rows, int cols, size_t* row_bytes) {
  const DTypeInfo& info = dtype_info(t);
  *row_bytes = size_t(cols) / info.block_elems * info.block_bytes;
  std::vector<uint8_t> w(*row_bytes * size_t(rows));
  std::vector<float> v = c.randn(size_t(cols));
  std::uniform_int_distribution<int> byte(0, 255);
  for (int r = 0; r < rows; ++r) {
    uint8_t* row = w.data() + size_t(r) * *row_bytes;
    switch (t) {
      case DType::F32: v = c.randn(size_t(cols)); std::memcpy(row, v.data(), size_t(cols) * 4); break;
      case DType::F16:
      case DType::BF16:
        v = c.randn(size_t(cols));
        for (int i = 0; i < cols; ++i) {
          const uint16_t h = t == DType::F16 ? fp32_to_fp16(v[size_t(i)]) : fp32_to_bf16(v[size_t(i)]);
          std::memcpy(row + 2 * i, &h, 2);
        }
        break;
      default: {
        // Random quants, f16 scale fields set to small finite values (d, and dmin / m where the
        // type has one; dtype_scale_fields). K-quant sub-block scales multiply d by up to 63
        // (Q6_K: 127), so their d is smaller, keeping weights O(1).
        for (size_t b = 0; b < *row_bytes; ++b) row[b] = uint8_t(byte(c.rng));
        const ScaleFields f = dtype_scale_fields(t);
        const bool k_quant = info.block_elems == 256;
        for (int k = 0; k < cols / int(info.block_elems); ++k) {
          uint8_t* blk = row + size_t(k) * info.block_bytes;
          const uint16_t d = fp32_to_fp16((k_quant ? 0.001f : 0.02f) * (1.0f + float(k % 5)));
          std::memcpy(blk + f.d, &d, 2);
          if (f.min >= 0) {
            const uint16_t m = fp32_to_fp16(k_quant ? 0.002f : -0.1f);
            std::memcpy(blk + f.min, &m, 2);
          }
        }
      }
    }
  }
  return w;
}

const DType kAllTypes[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0,
                           DType::Q5_1, DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K};
// Row length: 576 (SmolLM2's width) where the block size divides it, else 768 (K-quants: 256).
int cols_for(DType t) { return dtype_info(t).block_elems == 256 ? 768 : 576; }

void test_dequant_embed(Ctx& c) {
  for (DType t : kAllTypes) {
    const int rows = 64, cols = cols_for(t), n = 7;
    const std::string name = std::string("embed ") + dtype_name(t) + " 64 rows x " + std::to_string(cols) + ", 7 tokens";
    if (!selected(name)) continue;
    size_t rb = 0;
    std::vector<uint8_t> w = random_weights(c, t, rows, cols, &rb);
    std::vector<int32_t> tok = {0, 63, 5, 5, 17, 42, 1};
    WeightView hv{t, w.data(), rb, rows, cols};
    std::vector<float> ref(size_t(n) * cols);
    c.cpu.embed(hv, tok.data(), n, ref.data());
    auto dw = c.up(w.data(), w.size());
    auto dt = c.up(tok.data(), tok.size() * 4);
    DeviceBuffer out(c.gpu.get(), ref.size() * 4);
    WeightView dv{t, dw->p, rb, rows, cols};
    c.gpu->embed(dv, dt->as<int32_t>(), n, out.as<float>());
    check_exact(name, c.down(out, ref.size()), ref);
  }
}

void test_matmul(Ctx& c) {
  for (DType t : kAllTypes)
    for (int n : {1, 7, 256}) {
      const int rows = 96, cols = cols_for(t);
      const std::string name = std::string("matmul ") + dtype_name(t) + " [96 x " + std::to_string(cols) + "] x " +
                               std::to_string(n) +
                               " tokens, 3 matrices";
      if (!selected(name)) continue;
      size_t rb = 0;
      std::vector<uint8_t> w0 = random_weights(c, t, rows, cols, &rb), w1 = random_weights(c, t, rows / 2, cols, &rb),
                           w2 = random_weights(c, t, 32, cols, &rb);
      std::vector<float> x = c.randn(size_t(n) * cols);
      const int rws[3] = {rows, rows / 2, 32};
      const uint8_t* ws[3] = {w0.data(), w1.data(), w2.data()};
      const size_t wsz[3] = {w0.size(), w1.size(), w2.size()};
      WeightView hv[3], dv[3];
      std::vector<float> ref[3];
      float* hy[3];
      std::unique_ptr<DeviceBuffer> dw[3], dy[3];
      float* gy[3];
      for (int m = 0; m < 3; ++m) {
        hv[m] = WeightView{t, ws[m], rb, rws[m], cols};
        ref[m].assign(size_t(n) * rws[m], 0.0f);
        hy[m] = ref[m].data();
        dw[m] = c.up(ws[m], wsz[m]);
        dv[m] = WeightView{t, dw[m]->p, rb, rws[m], cols};
        dy[m] = std::make_unique<DeviceBuffer>(c.gpu.get(), ref[m].size() * 4);
        gy[m] = dy[m]->as<float>();
      }
      {
        // The CPU backend needs its workspace bound.
        WorkspaceQuery q;
        q.max_tokens = n;
        q.max_k = cols;
        std::vector<float> ws_buf(c.cpu.workspace_bytes(q) / 4 + 16);
        Status s = c.cpu.bind_workspace(ws_buf.data(), ws_buf.size() * 4, q);
        (void)s;
        c.cpu.matmul(hv, hy, 3, x.data(), n);
        auto dx = c.up(x);
        c.gpu->matmul(dv, gy, 3, dx->as<float>(), n);
        for (int m = 0; m < 3; ++m)
          check_nmse(name + " (matrix " + std::to_string(m) + ")", c.down(*dy[m], ref[m].size()), ref[m],
                     kMatmulBound);
      }
    }
}

void test_rmsnorm_silu_add(Ctx& c) {
  for (int n : {1, 7, 256}) {
    const int dim = 576;
    std::string name = "rmsnorm dim 576 x " + std::to_string(n);
    if (selected(name)) {
      std::vector<float> x = c.randn(size_t(n) * dim, 3.0f), w = c.randn(size_t(dim)), ref(x.size());
      c.cpu.rmsnorm(x.data(), w.data(), 1e-5f, n, dim, ref.data());
      auto dx = c.up(x), dw = c.up(w);
      DeviceBuffer out(c.gpu.get(), x.size() * 4);
      c.gpu->rmsnorm(dx->as<float>(), dw->as<float>(), 1e-5f, n, dim, out.as<float>());
      check_nmse(name, c.down(out, x.size()), ref, kNormBound);
    }
    const size_t len = size_t(n) * 1536;
    name = "silu_mul " + std::to_string(len);
    if (selected(name)) {
      std::vector<float> g = c.randn(len, 4.0f), u = c.randn(len), ref(len);
      c.cpu.silu_mul(g.data(), u.data(), ref.data(), len);
      auto dg = c.up(g), du = c.up(u);
      c.gpu->silu_mul(dg->as<float>(), du->as<float>(), dg->as<float>(), len);  // in place, as the context does
      check_nmse(name, c.down(*dg, len), ref, kSiluBound);
    }
    name = "add " + std::to_string(len);
    if (selected(name)) {
      std::vector<float> x = c.randn(len), y = c.randn(len), ref = x;
      c.cpu.add(ref.data(), y.data(), len);
      auto dx = c.up(x), dy = c.up(y);
      c.gpu->add(dx->as<float>(), dy->as<float>(), len);
      check_exact(name, c.down(*dx, len), ref);
    }
  }
}

void test_rope(Ctx& c) {
  for (int hd : {64, 128})
    for (bool inter : {true, false})
      for (int first_pos : {0, 70000})
        for (int rope_dim : {hd, hd / 2}) {
          const int n = 7, heads = 3;
          const float pos_scale = first_pos ? 0.25f : 1.0f;
          const std::string name = "rope hd " + std::to_string(hd) + (inter ? " interleaved" : " neox") +
                                   " rope_dim " + std::to_string(rope_dim) + " first_pos " +
                                   std::to_string(first_pos) + " pos_scale " + std::to_string(pos_scale).substr(0, 4);
          if (!selected(name)) continue;
          std::vector<float> x = c.randn(size_t(n) * heads * hd), inv(size_t(rope_dim / 2));
          for (int i = 0; i < rope_dim / 2; ++i) inv[size_t(i)] = std::pow(10000.0f, -2.0f * float(i) / float(rope_dim));
          std::vector<float> ref = x;
          c.cpu.rope(ref.data(), n, heads, hd, first_pos, inv.data(), rope_dim, inter, pos_scale);
          auto dx = c.up(x), di = c.up(inv);
          c.gpu->rope(dx->as<float>(), n, heads, hd, first_pos, di->as<float>(), rope_dim, inter, pos_scale);
          check_nmse(name, c.down(*dx, x.size()), ref, kRopeBound);
        }
}

// One attention case: memory kind via local/stride, GQA group, sinks.
struct AttnCase {
  const char* kind;
  int hd, n_kv, group, n_tokens, first_pos, local, stride;
  bool sink;
};

void test_attention(Ctx& c) {
  const AttnCase cases[] = {
      {"full", 64, 3, 3, 7, 20, -1, 0, false},      {"full", 128, 2, 4, 1, 300, -1, 0, false},
      {"full", 64, 1, 1, 256, 0, -1, 0, true},      {"full", 64, 3, 3, 1, 0, -1, 0, false},
      {"sliding", 64, 3, 3, 7, 40, 16, 0, false},   {"sliding", 128, 2, 4, 256, 512, 64, 0, true},
      {"compressed W>S", 64, 3, 3, 7, 41, 8, 4, false}, {"compressed", 128, 2, 4, 1, 70001, 16, 8, true},
      {"compressed L=0 (gap)", 64, 3, 3, 7, 33, 0, 4, false}, {"compressed S=1", 64, 1, 1, 7, 12, 0, 1, false},
      {"compressed past 2^16", 64, 3, 3, 256, 65600, 64, 4, false},
  };
  for (const AttnCase& k : cases) {
    const std::string name = std::string("attention ") + k.kind + " hd " + std::to_string(k.hd) + " group " +
                             std::to_string(k.group) + " tokens " + std::to_string(k.n_tokens) + " first_pos " +
                             std::to_string(k.first_pos) + (k.sink ? " sinks" : "");
    if (!selected(name)) continue;
    const int nh = k.n_kv * k.group, hd = k.hd, kvd = k.n_kv * hd;
    const int last = k.first_pos + k.n_tokens - 1;
    const int cache_rows = k.local < 0 ? last + 1 : std::max(1, k.local);
    const int n_ent = k.stride > 0 ? (last + 1) / k.stride : 0;
    std::vector<float> q = c.randn(size_t(k.n_tokens) * nh * hd), kc = c.randn(size_t(cache_rows) * kvd),
                       vc = c.randn(size_t(cache_rows) * kvd), kch = c.randn(size_t(k.n_tokens) * kvd),
                       vch = c.randn(size_t(k.n_tokens) * kvd), ke = c.randn(size_t(std::max(n_ent, 1)) * kvd),
                       ve = c.randn(size_t(std::max(n_ent, 1)) * kvd), sink = c.randn(size_t(nh)),
                       ref(size_t(k.n_tokens) * nh * hd);
    AttentionArgs a;
    a.n_tokens = k.n_tokens;
    a.first_pos = k.first_pos;
    a.n_heads = nh;
    a.n_kv_heads = k.n_kv;
    a.head_dim = hd;
    a.scale = 1.0f / std::sqrt(float(hd));
    a.local = k.local;
    a.ring_rows = k.local < 0 ? 0 : cache_rows;
    a.stride = k.stride;
    AttentionArgs h = a, d = a;
    h.q = q.data(); h.k_cache = kc.data(); h.v_cache = vc.data(); h.out = ref.data();
    if (k.local >= 0) { h.k_chunk = kch.data(); h.v_chunk = vch.data(); }
    if (k.stride) { h.k_entries = ke.data(); h.v_entries = ve.data(); }
    if (k.sink) h.sink = sink.data();
    WorkspaceQuery wq;
    wq.max_tokens = k.n_tokens;
    wq.n_ctx = n_ent + std::max(cache_rows, k.n_tokens) + 1;
    wq.attention_group = k.group;
    std::vector<float> ws(c.cpu.workspace_bytes(wq) / 4 + 16);
    (void)c.cpu.bind_workspace(ws.data(), ws.size() * 4, wq);
    c.cpu.attention(h);
    auto dq = c.up(q), dkc = c.up(kc), dvc = c.up(vc), dkch = c.up(kch), dvch = c.up(vch), dke = c.up(ke),
         dve = c.up(ve), ds = c.up(sink);
    DeviceBuffer out(c.gpu.get(), ref.size() * 4);
    d.q = dq->as<float>(); d.k_cache = dkc->as<float>(); d.v_cache = dvc->as<float>(); d.out = out.as<float>();
    if (k.local >= 0) { d.k_chunk = dkch->as<float>(); d.v_chunk = dvch->as<float>(); }
    if (k.stride) { d.k_entries = dke->as<float>(); d.v_entries = dve->as<float>(); }
    if (k.sink) d.sink = ds->as<float>();
    c.gpu->attention(d);
    check_nmse(name, c.down(out, ref.size()), ref, kAttentionBound);
  }
}

struct CmpCase {
  const char* what;
  int W, S, hd, n_kv, n_tokens, first_pos;
  int gate;  // 0 uniform, 1 scalar, 2 vector
  bool gate_per_offset, payload_map, payload_per_offset, rotate_entry, entry_norm;
};

void test_compress(Ctx& c) {
  const CmpCase cases[] = {
      {"uniform W8/S4 layer payload", 8, 4, 64, 3, 7, 0, 0, false, false, false, false, false},
      {"scalar W8/S4 shared gate", 8, 4, 64, 3, 256, 5, 1, false, false, false, false, false},
      {"scalar W4/S4 per-offset gate+payload", 4, 4, 64, 2, 7, 13, 1, true, true, true, false, false},
      {"vector W8/S8 shared map payload", 8, 8, 128, 2, 7, 3, 2, false, true, false, false, false},
      {"vector W8/S4 per-offset", 8, 4, 64, 3, 1, 70001, 2, true, true, true, false, false},
      {"scalar W=S=1", 1, 1, 64, 3, 7, 0, 1, false, false, false, false, false},
      {"rotate-entry W8/S4 entry norm", 8, 4, 64, 3, 256, 65530, 1, false, false, false, true, true},
      {"rotate-entry W4/S4 no norm", 4, 4, 128, 2, 7, 2, 0, false, false, false, true, false},
  };
  for (const CmpCase& k : cases)
    for (int chunks : {1, 3}) {
      const std::string name = std::string("compress ") + k.what + " hd " + std::to_string(k.hd) + " tokens " +
                               std::to_string(k.n_tokens) + " first_pos " + std::to_string(k.first_pos) + " in " +
                               std::to_string(chunks) + " call(s)";
      if (!selected(name)) continue;
      const int hd = k.hd, nkv = k.n_kv, kvd = nkv * hd, dg = k.gate == 2 ? hd : 1;
      const int G = nkv * dg, n_acc = (k.W + k.S - 1) / k.S;
      const int last = k.first_pos + k.n_tokens;
      const int n_ent = last / k.S + 1;
      const int gate_cols = k.gate ? (k.gate_per_offset ? k.W * G : G) : 0;
      const int pay_cols = k.payload_map && k.payload_per_offset ? k.W * kvd : kvd;
      std::vector<float> gk = c.randn(size_t(k.n_tokens) * std::max(gate_cols, 1)),
                         gv = c.randn(size_t(k.n_tokens) * std::max(gate_cols, 1)),
                         bk = c.randn(size_t(k.W) * G), bv = c.randn(size_t(k.W) * G),
                         pk = c.randn(size_t(k.n_tokens) * pay_cols), pv = c.randn(size_t(k.n_tokens) * pay_cols),
                         norm = c.randn(size_t(hd)), inv(size_t(hd / 2));
      for (int i = 0; i < hd / 2; ++i) inv[size_t(i)] = std::pow(10000.0f, -2.0f * float(i) / float(hd));
      const size_t acc_n = size_t(2) * n_acc * nkv * (2 * dg + hd);
      const size_t ent_n = size_t(n_ent) * kvd;
      // Host: acc (both branches) and entries.
      std::vector<float> acc(acc_n), ek(ent_n, 0.0f), ev(ent_n, 0.0f);
      c.cpu.compress_reset(acc.data(), 2 * n_acc, nkv, dg, hd);
      auto dacc = std::make_unique<DeviceBuffer>(c.gpu.get(), acc_n * 4);
      c.gpu->compress_reset(dacc->as<float>(), 2 * n_acc, nkv, dg, hd);
      check_exact("compress_reset " + std::string(k.what), c.down(*dacc, acc_n), acc);
      auto dek = c.up(ek), dev = c.up(ev), dgk = c.up(gk), dgv = c.up(gv), dbk = c.up(bk), dbv = c.up(bv),
           dpk = c.up(pk), dpv = c.up(pv), dnorm = c.up(norm), dinv = c.up(inv);
      const float* hg[2] = {gk.data(), gv.data()};
      const float* hb[2] = {bk.data(), bv.data()};
      const float* hp[2] = {pk.data(), pv.data()};
      float* he[2] = {ek.data(), ev.data()};
      const float* dgp[2] = {dgk->as<float>(), dgv->as<float>()};
      const float* dbp[2] = {dbk->as<float>(), dbv->as<float>()};
      const float* dpp[2] = {dpk->as<float>(), dpv->as<float>()};
      float* dep[2] = {dek->as<float>(), dev->as<float>()};
      int done = 0;
      for (int part = 0; part < chunks; ++part) {
        const int len = part + 1 == chunks ? k.n_tokens - done : k.n_tokens / chunks;
        if (len <= 0) continue;
        CompressArgs a;
        a.n_tokens = len;
        a.first_pos = k.first_pos + done;
        a.window = k.W;
        a.stride = k.S;
        a.n_kv_heads = nkv;
        a.head_dim = hd;
        a.d_g = dg;
        a.rotate_entry = k.rotate_entry;
        a.norm_eps = 1e-5f;
        a.rope_dim = hd;
        a.interleaved = true;
        CompressArgs h = a, d = a;
        for (int b = 0; b < 2; ++b) {
          const size_t acc_off = size_t(b) * n_acc * nkv * (2 * dg + hd);
          for (CompressArgs* x : {&h, &d}) {
            CompressArgs::Branch& br = x->b[b];
            const bool host = x == &h;
            if (k.gate) {
              br.gate = (host ? hg[b] : dgp[b]) + size_t(done) * gate_cols;
              br.gate_stride = gate_cols;
              br.gate_per_offset = k.gate_per_offset;
              br.bias = host ? hb[b] : dbp[b];
            }
            br.payload = (host ? hp[b] : dpp[b]) + size_t(done) * pay_cols;
            br.payload_stride = pay_cols;
            br.payload_per_offset = k.payload_map && k.payload_per_offset;
            br.acc = (host ? acc.data() : dacc->as<float>()) + acc_off;
            br.entries = host ? he[b] : dep[b];
          }
        }
        h.inv_freq = inv.data();
        d.inv_freq = dinv->as<float>();
        if (k.entry_norm) {
          h.entry_norm = norm.data();
          d.entry_norm = dnorm->as<float>();
        }
        c.cpu.compress(h);
        c.gpu->compress(d);
        done += len;
      }
      check_nmse(name + ": K entries", c.down(*dek, ent_n), ek, kCompressBound);
      check_nmse(name + ": V entries", c.down(*dev, ent_n), ev, kCompressBound);
      // Accumulators hold -inf maxima in empty windows: compare where the CPU's are finite.
      std::vector<float> ga = c.down(*dacc, acc_n), ha = acc;
      size_t inf_mismatch = 0;
      for (size_t i = 0; i < acc_n; ++i)
        if (std::isinf(ha[i]) || std::isinf(ga[i])) {
          inf_mismatch += ha[i] != ga[i];
          ha[i] = ga[i] = 0.0f;
        }
      report(name + ": empty windows", inf_mismatch == 0, "%.0f -inf maxima differ (bound %.0f)", double(inf_mismatch),
             0.0);
      check_nmse(name + ": accumulators", ga, ha, kCompressBound);
    }
}

void test_copies_ring_score(Ctx& c) {
  std::string name = "copy / upload / download round trip, 1 MiB";
  if (selected(name)) {
    std::vector<float> x = c.randn(262144);
    auto a = c.up(x);
    DeviceBuffer b(c.gpu.get(), x.size() * 4);
    c.gpu->copy(b.p, a->p, x.size() * 4);
    check_exact(name, c.down(b, x.size()), x);
  }
  for (int n : {1, 7, 256}) {
    name = "ring_write " + std::to_string(n) + " tokens into 16 rows at first_pos 70001";
    if (!selected(name)) continue;
    const int kvd = 192, rows = 16;
    std::vector<float> rk = c.randn(size_t(rows) * kvd), rv = c.randn(size_t(rows) * kvd),
                       kr = c.randn(size_t(n) * kvd), vr = c.randn(size_t(n) * kvd);
    auto drk = c.up(rk), drv = c.up(rv), dkr = c.up(kr), dvr = c.up(vr);
    RingWriteArgs a{rk.data(), rv.data(), kr.data(), vr.data(), n, 70001, rows, kvd};
    c.cpu.ring_write(a);
    RingWriteArgs d{drk->as<float>(), drv->as<float>(), dkr->as<float>(), dvr->as<float>(), n, 70001, rows, kvd};
    c.gpu->ring_write(d);
    check_exact(name + " (K)", c.down(*drk, rk.size()), rk);
    check_exact(name + " (V)", c.down(*drv, rv.size()), rv);
  }
  for (int vocab : {49152, 1000}) {
    name = "gold_score vocab " + std::to_string(vocab) + " (ties at the maximum)";
    if (!selected(name)) continue;
    std::vector<float> lg = c.randn(size_t(vocab), 3.0f);
    lg[size_t(vocab / 3)] = 20.0f;
    lg[size_t(vocab / 2)] = 20.0f;  // a tie: the first index must win
    for (int32_t gold : {int32_t(vocab / 3), int32_t(vocab / 2), int32_t(7)}) {
      ScoreResult ref;
      c.cpu.gold_score(lg.data(), vocab, gold, &ref);
      auto dl = c.up(lg);
      DeviceBuffer out(c.gpu.get(), sizeof(ScoreResult));
      c.gpu->gold_score(dl->as<float>(), vocab, gold, out.as<ScoreResult>());
      ScoreResult got;
      c.gpu->download(&got, out.p, sizeof got);
      (void)c.gpu->synchronize();
      const double rel = std::fabs(got.nll - ref.nll) / std::max(1e-300, std::fabs(ref.nll));
      const bool ok = got.argmax == ref.argmax && got.hit == ref.hit && rel <= kScoreRel;
      char what[160];
      std::snprintf(what, sizeof what, "%s gold %d: argmax %d/%d hit %d/%d", name.c_str(), gold, got.argmax,
                    ref.argmax, got.hit, ref.hit);
      report(what, ok, "nll rel err %.3g (bound %.0e)", rel, kScoreRel);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--filter") && i + 1 < argc) g_filter = argv[++i];
    else if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h")) {
      std::printf("usage: %s [--filter SUBSTRING]\n  every CUDA backend op against the CPU backend; exit 77 without a "
                  "CUDA device\n",
                  argv[0]);
      return 0;
    } else {
      std::fprintf(stderr, "%s: unknown argument '%s' (see --help)\n", argv[0], argv[i]);
      return 2;
    }
  }
  std::string why;
  if (!cuda_backend_available(&why)) {
    std::printf("skipped: no CUDA device: %s\n", why.c_str());
    return 77;
  }
  Ctx c;
  BackendParams bp;
  bp.kind = BackendKind::Cuda;
  Status s = make_backend(bp, &c.gpu);
  if (!s.ok()) {
    std::printf("FAIL cannot create the CUDA backend: %s\n", s.to_string().c_str());
    return 1;
  }
  std::printf("CUDA backend: %s\n", c.gpu->kernels_name());
  test_dequant_embed(c);
  test_matmul(c);
  test_rmsnorm_silu_add(c);
  test_rope(c);
  test_attention(c);
  test_compress(c);
  test_copies_ring_score(c);
  std::printf("%d passed, %d failed\n", g_counts.passed, g_counts.failed);
  if (g_counts.passed + g_counts.failed == 0) {
    std::printf("no case matched the filter '%s'\n", g_filter.c_str());
    return 1;
  }
  return g_counts.failed ? 1 : 0;
}
