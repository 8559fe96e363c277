// The backend seam: the ops a forward pass needs, over buffers the context planned.
//
// Contract for every backend (CPU now, CUDA next):
//   * Plan, then bind: workspace_bytes() reports the scratch a backend needs for a context's
//     shapes; the context allocates it once (with everything else) and bind_workspace()
//     hands it over. No op allocates.
//   * Pointers passed to ops address the backend's memory (host for CPU, device for CUDA);
//     weights point into the mapped model file (or a device copy the backend made at bind).
//   * supports() answers per op and weight dtype; a context fails at creation, never inside
//     an op, when something is unsupported.
//   * Within one backend, results do not depend on the chunking of a prompt or on the
//     thread count (see kernels/cpu/cpu_kernels.h for how the CPU backend keeps that).
// Shapes are written [rows, cols], row-major; "tokens" is the chunk being evaluated.
#pragma once

#include <cstddef>
#include <cstdint>

#include "dtype.h"
#include "status.h"

namespace phasekv {

enum class BackendOp { Embed, RmsNorm, Matmul, Rope, Attention, Compress, SiluMul, Add };

// A weight matrix [rows, cols] in the model file.
struct WeightView {
  DType dtype = DType::F32;
  const void* data = nullptr;
  size_t row_bytes = 0;
  int rows = 0;
  int cols = 0;
};

// What a backend sizes its scratch from.
struct WorkspaceQuery {
  int max_tokens = 1;   // largest chunk
  int max_k = 1;        // largest inner dimension of a matmul
  int n_ctx = 1;        // most keys one query can see
  int attention_group = 1;  // query heads per KV head (scored together)
  int n_threads = 1;
};

// Attention of a chunk of queries over one layer's memory (DESIGN.md section 3). The query at
// absolute position t = first_pos + i sees, in ONE softmax (in this order):
//   1. compressed entries 0 .. floor((t+1)/stride) - 1           (stride > 0)
//   2. exact tokens: local < 0: every token 0..t, row p of k_cache (full memory);
//      local >= 0: tokens max(0, t-local+1)..t, where a token p < first_pos is row p % ring_rows
//      of k_cache (a ring of the last tokens before the chunk) and p >= first_pos is row
//      p - first_pos of k_chunk (the chunk's own rows)
//   plus, when sink is set, exp(sink[h]) in the denominator. A query that sees nothing gets 0.
struct AttentionArgs {
  const float* q = nullptr;        // [tokens, n_heads * head_dim], rotated
  const float* k_cache = nullptr;  // full: [n_ctx, kvd]; windowed: ring [ring_rows, kvd]
  const float* v_cache = nullptr;
  float* out = nullptr;            // [tokens, n_heads * head_dim]
  int n_tokens = 0;
  int first_pos = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  float scale = 1.0f;              // 1/sqrt(head_dim)
  int local = -1;                  // -1: full memory; >= 0: the last `local` exact tokens
  int ring_rows = 0;
  const float* k_chunk = nullptr;  // [tokens, kvd] (local >= 0)
  const float* v_chunk = nullptr;
  int stride = 0;                  // 0: no entries
  const float* k_entries = nullptr;  // [entries, kvd]
  const float* v_entries = nullptr;
  const float* sink = nullptr;     // [n_heads] extra logit (not scaled)
};

// The streaming compressor of one compressed layer (DESIGN.md section 3), for a chunk of
// tokens at positions first_pos..: every token is added to the open windows that contain it
// (online softmax: running max, denominator, weighted sum per KV head and gate channel), and
// entry j is written when token (j+1)S-1 has been added. Branch 0 pools keys, branch 1 values.
struct CompressArgs {
  int n_tokens = 0;
  int first_pos = 0;
  int window = 1;       // W
  int stride = 1;       // S
  int n_kv_heads = 0;
  int head_dim = 0;
  int d_g = 1;          // gate channels per KV head: 1 (uniform, scalar) or head_dim (vector)
  struct Branch {
    // Gate logit of token t in slot i, KV head h, channel c (G = n_kv_heads * d_g):
    //   (gate ? gate[t * gate_stride + (gate_per_offset ? i * G : 0) + h * d_g + c] : 0)
    //   + (bias ? bias[i * G + h * d_g + c] : 0)
    const float* gate = nullptr;
    int gate_stride = 0;
    bool gate_per_offset = false;
    const float* bias = nullptr;
    // Payload of token t in slot i: payload[t * payload_stride + (payload_per_offset ? i * kvd : 0) + h * head_dim ..]
    const float* payload = nullptr;
    int payload_stride = 0;
    bool payload_per_offset = false;
    float* acc = nullptr;      // [ceil(W/S), n_kv_heads, 2 * d_g + head_dim]: max, den, sum
    float* entries = nullptr;  // [max entries, kvd]
  } b[2];
  // Keys pooled un-rotated (RotateEntry): optional RMSNorm per head, then RoPE at j * S.
  bool rotate_entry = false;
  const float* entry_norm = nullptr;  // [head_dim] or null
  float norm_eps = 1e-5f;
  const float* inv_freq = nullptr;
  int rope_dim = 0;
  bool interleaved = true;
  float pos_scale = 1.0f;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;
  virtual bool supports(BackendOp op, DType weight_type) const = 0;

  virtual size_t workspace_bytes(const WorkspaceQuery& q) const = 0;
  virtual Status bind_workspace(void* base, size_t bytes, const WorkspaceQuery& q) = 0;

  // out[t, :] = dequantized table row tokens[t]                      out: [n, table.cols]
  virtual void embed(const WeightView& table, const int32_t* tokens, int n, float* out) = 0;
  // out[t, :] = x[t, :] / rms(x[t, :]) * w                           x, out: [n, dim]
  virtual void rmsnorm(const float* x, const float* w, float eps, int n, int dim, float* out) = 0;
  // y_m[t, :] = W_m x[t, :] for up to 3 matrices sharing x (q/k/v, gate/up) in one pass.
  //   x: [n, W.cols]; y_m: [n, W_m.rows]
  virtual void matmul(const WeightView* w, float* const* y, int n_mats, const float* x, int n) = 0;
  // Rotates every head of x in place at positions first_pos + t.    x: [n, n_heads * head_dim]
  virtual void rope(float* x, int n, int n_heads, int head_dim, int first_pos, const float* inv_freq, int rope_dim,
                    bool interleaved, float pos_scale) = 0;
  virtual void attention(const AttentionArgs& a) = 0;
  virtual void compress(const CompressArgs& a) = 0;
  // Resets compressor accumulators to the empty state (n_windows x n_kv_heads, d_g, head_dim).
  virtual void compress_reset(float* acc, int n_windows, int n_kv_heads, int d_g, int head_dim) = 0;
  // out = silu(g) * u                                                [n]
  virtual void silu_mul(const float* g, const float* u, float* out, size_t n) = 0;
  // x += y                                                           [n]
  virtual void add(float* x, const float* y, size_t n) = 0;
};

}  // namespace phasekv
