#include "gate_analysis.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>

#include "context.h"
#include "selftest.h"

namespace phasekv {
namespace tools {

namespace {

// Sums per (layer, branch, KV head): alpha over the W slots, exp(H(alpha)), entries.
struct Acc {
  uint32_t layer = 0;
  int branch = 0, head = 0, W = 0, S = 0;
  std::vector<double> sum_alpha;
  double sum_nwin = 0;
  uint64_t n = 0;
};

struct Collector {
  std::vector<Acc> acc;                 // indexed by (layer slot, branch, head)
  std::vector<int> slot_of_layer;       // layer -> first index in acc, -1 for other layers
  std::vector<double> s, a;             // scratch [W] (sized before the run)
  int n_kv = 0;
};

// exp(H(p)) of a distribution p[0..n): its effective number of outcomes.
double entropy_exp(const double* p, int n) {
  double H = 0;
  for (int i = 0; i < n; ++i)
    if (p[i] > 0) H -= p[i] * std::log(p[i]);
  return std::exp(H);
}

void observe(void* user, uint32_t layer, const CompressArgs& ca) {
  Collector& c = *static_cast<Collector*>(user);
  const int base = c.slot_of_layer[layer];
  if (base < 0) return;
  const int W = ca.window, S = ca.stride, dg = ca.d_g, nkv = ca.n_kv_heads;
  const int G = nkv * dg;
  const int p0 = ca.first_pos, p1 = ca.first_pos + ca.n_tokens;  // the chunk's positions [p0, p1)
  // Entries whose every valid slot (position >= 0) lies in this chunk.
  for (int j = 0;; ++j) {
    const int first = (j + 1) * S - W, last = (j + 1) * S - 1;
    if (last >= p1) break;
    if (std::max(first, 0) < p0) continue;
    for (int br = 0; br < 2; ++br) {
      const CompressArgs::Branch& b = ca.b[br];
      for (int h = 0; h < nkv; ++h) {
        Acc& A = c.acc[size_t(base + br * c.n_kv + h)];
        for (int ch = 0; ch < dg; ++ch) {
          double mx = -INFINITY;
          for (int i = 0; i < W; ++i) {
            const int p = first + i;
            if (p < 0) {
              c.s[size_t(i)] = -INFINITY;
              continue;
            }
            const int t = p - p0;
            double v = 0;
            if (b.gate)
              v += b.gate[size_t(t) * size_t(b.gate_stride) + (b.gate_per_offset ? size_t(i) * size_t(G) : 0) +
                          size_t(h * dg + ch)];
            if (b.bias) v += b.bias[size_t(i) * size_t(G) + size_t(h * dg + ch)];
            c.s[size_t(i)] = v;
            mx = std::max(mx, v);
          }
          double den = 0;
          for (int i = 0; i < W; ++i) den += (c.a[size_t(i)] = std::isinf(c.s[size_t(i)]) ? 0.0 : std::exp(c.s[size_t(i)] - mx));
          for (int i = 0; i < W; ++i) A.sum_alpha[size_t(i)] += (c.a[size_t(i)] /= den);
          A.sum_nwin += entropy_exp(c.a.data(), W);
          ++A.n;
        }
      }
    }
  }
}


}  // namespace

Status analyze_gates(const Model& model, const std::string& text, int n_threads, GateAnalysis* out) {
  const ModelSpec& spec = model.spec();
  const ModelConfig& cfg = model.config();
  uint32_t P = 0;
  std::vector<uint32_t> strides;
  PKV_RETURN_IF_ERROR(phase_period(spec, &P, &strides));
  if (strides.empty())
    return make_error(StatusCode::kInvalidArgument, "--gates: the model has no compressed layer (nothing to analyse)");
  std::vector<int32_t> ids;
  const Tokenizer& tok = model.tokenizer();
  if (tok.add_bos() && tok.bos() >= 0) ids.push_back(tok.bos());
  std::vector<int32_t> body;
  PKV_RETURN_IF_ERROR(tok.encode(text, false, &body).with_context("--gates text"));
  ids.insert(ids.end(), body.begin(), body.end());
  uint32_t need = 0;
  for (const AttentionMemory& m : spec.layers)
    if (m.kind == MemoryKind::Compressed) need = std::max(need, m.stride * 2 + m.window);
  if (ids.size() < need)
    return make_error(StatusCode::kInvalidArgument,
                      "--gates: the calibration text is %zu tokens; at least %u are needed (two complete entries of "
                      "every compressed layer)",
                      ids.size(), need);
  if (ids.size() > cfg.max_positions)
    return make_error(StatusCode::kInvalidArgument,
                      "--gates: the calibration text is %zu tokens, more than the model's %u positions; shorten it",
                      ids.size(), cfg.max_positions);

  Collector col;
  col.n_kv = int(cfg.n_kv_heads);
  col.slot_of_layer.assign(spec.layers.size(), -1);
  int max_w = 1;
  for (uint32_t l = 0; l < spec.layers.size(); ++l) {
    const AttentionMemory& m = spec.layers[l];
    if (m.kind != MemoryKind::Compressed) continue;
    col.slot_of_layer[l] = int(col.acc.size());
    max_w = std::max(max_w, int(m.window));
    for (int br = 0; br < 2; ++br)
      for (int h = 0; h < col.n_kv; ++h) {
        Acc a;
        a.layer = l;
        a.branch = br;
        a.head = h;
        a.W = int(m.window);
        a.S = int(m.stride);
        a.sum_alpha.assign(m.window, 0.0);
        col.acc.push_back(std::move(a));
      }
  }
  col.s.assign(size_t(max_w), 0.0);
  col.a.assign(size_t(max_w), 0.0);

  ContextParams cp = default_context_params();
  cp.n_ctx = uint32_t(ids.size());
  cp.n_batch = uint32_t(ids.size());  // one chunk: every entry's slots are in the observer's view
  if (n_threads > 0) cp.n_threads = n_threads;  // else the default: every hardware thread
  cp.backend = BackendKind::Cpu;
  cp.kernels = "reference";
  std::unique_ptr<Context> ctx;
  PKV_RETURN_IF_ERROR(Context::create(model, cp, &ctx));
  PKV_RETURN_IF_ERROR(ctx->set_compress_observer(observe, &col));
  PKV_RETURN_IF_ERROR(ctx->prefill(ids.data(), ids.size()));
  PKV_RETURN_IF_ERROR(ctx->set_compress_observer(nullptr, nullptr));

  GateAnalysis r;
  r.tokens = uint32_t(ids.size());
  r.period = P;
  std::vector<std::vector<double>> cover_l;  // per (layer, head): min(key, value) cover per residue
  for (const Acc& a : col.acc) {
    GateBranchStats b;
    b.layer = a.layer;
    b.branch = a.branch;
    b.kv_head = a.head;
    b.entries = a.n;
    b.mean_alpha.resize(a.sum_alpha.size());
    for (size_t i = 0; i < a.sum_alpha.size(); ++i) b.mean_alpha[i] = a.n ? a.sum_alpha[i] / double(a.n) : 0.0;
    b.n_static = entropy_exp(b.mean_alpha.data(), int(b.mean_alpha.size()));
    b.n_window = a.n ? a.sum_nwin / double(a.n) : 0.0;
    std::vector<int> order(b.mean_alpha.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int x, int y) { return b.mean_alpha[size_t(x)] > b.mean_alpha[size_t(y)]; });
    for (int i : order)
      if (b.mean_alpha[size_t(i)] >= 1.5 / double(a.W)) b.favoured.push_back(i);
    r.branches.push_back(std::move(b));
  }
  // cover(r): value token at residue r, key token at r - 2.
  r.cover.assign(P, 0.0);
  auto slot_weight = [](const GateBranchStats& b, int W, int S, int pos_mod) {
    // Slots i in [0, W) with i == (p + W) mod S for a token at position p (p mod S = pos_mod).
    double w = 0;
    for (int i = ((pos_mod + W) % S + S) % S; i < W; i += S) w = std::max(w, b.mean_alpha[size_t(i)]);
    return w;
  };
  // r.branches follows the collector's layout: per compressed layer, the key branch's n_kv
  // heads, then the value branch's.
  const size_t nkv = size_t(col.n_kv);
  for (size_t k = 0; k < r.branches.size(); k += 2 * nkv)
    for (size_t h = 0; h < nkv; ++h) {
      const GateBranchStats& kb = r.branches[k + h];
      const GateBranchStats& vb = r.branches[k + nkv + h];
      const AttentionMemory& m = spec.layers[kb.layer];
      const int W = int(m.window), S = int(m.stride);
      for (uint32_t res = 0; res < P; ++res) {
        const int pv = int(res % uint32_t(S)), pk = ((int(res) - 2) % S + S) % S;
        r.cover[res] = std::max(r.cover[res], std::min(slot_weight(kb, W, S, pk), slot_weight(vb, W, S, pv)));
      }
    }
  const double best = *std::max_element(r.cover.begin(), r.cover.end());
  for (uint32_t res = 0; res < P; ++res)
    if (r.cover[res] < 0.5 * best) r.predicted_weak.push_back(int(res));
  *out = std::move(r);
  return Status::Ok();
}

}  // namespace tools
}  // namespace phasekv
