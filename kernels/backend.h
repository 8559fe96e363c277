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

enum class BackendOp { Embed, RmsNorm, Matmul, Rope, Attention, SiluMul, Add };

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
  int n_ctx = 1;        // longest attention span
  int n_threads = 1;
};

struct AttentionArgs {
  const float* q;         // [tokens, n_heads * head_dim]
  const float* k_cache;   // [n_ctx, n_kv_heads * head_dim] (rows 0..pos of each query are valid)
  const float* v_cache;   // [n_ctx, n_kv_heads * head_dim]
  float* out;             // [tokens, n_heads * head_dim]
  int n_tokens;
  int first_pos;          // absolute position of token 0; token t attends to 0..first_pos+t
  int n_heads;
  int n_kv_heads;
  int head_dim;
  float scale;            // 1/sqrt(head_dim)
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
  // out = silu(g) * u                                                [n]
  virtual void silu_mul(const float* g, const float* u, float* out, size_t n) = 0;
  // x += y                                                           [n]
  virtual void add(float* x, const float* y, size_t n) = 0;
};

}  // namespace phasekv
