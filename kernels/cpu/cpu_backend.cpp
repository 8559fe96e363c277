#include "cpu_backend.h"

#include <algorithm>
#include <cmath>

namespace phasekv {

CpuBackend::CpuBackend(int n_threads, const cpu::KernelTable* table)
    : k_(table ? *table : cpu::kernels()), pool_(n_threads) {}

bool CpuBackend::supports(BackendOp op, DType t) const {
  (void)op;
  return dtype_info(uint8_t(t)) != nullptr;  // every op, every dtype
}

size_t CpuBackend::workspace_bytes(const WorkspaceQuery& q) const {
  const size_t per_thread = std::max<size_t>(size_t(4) * size_t(q.max_k), size_t(q.n_ctx));
  return size_t(pool_.size()) * ((per_thread + 15) & ~size_t(15)) * sizeof(float);
}

Status CpuBackend::bind_workspace(void* base, size_t bytes, const WorkspaceQuery& q) {
  if (bytes < workspace_bytes(q))
    return make_error(StatusCode::kInternal, "cpu backend: workspace of %zu bytes, %zu needed", bytes,
                      workspace_bytes(q));
  scratch_ = static_cast<float*>(base);
  scratch_stride_ = (std::max<size_t>(size_t(4) * size_t(q.max_k), size_t(q.n_ctx)) + 15) & ~size_t(15);
  return Status::Ok();
}

void CpuBackend::embed(const WeightView& table, const int32_t* tokens, int n, float* out) {
  for (int t = 0; t < n; ++t)
    k_.dequant_row(table.dtype, static_cast<const uint8_t*>(table.data) + size_t(tokens[t]) * table.row_bytes,
                   out + size_t(t) * table.cols, table.cols);
}

void CpuBackend::rmsnorm(const float* x, const float* w, float eps, int n, int dim, float* out) {
  for (int t = 0; t < n; ++t) cpu::rmsnorm(x + size_t(t) * dim, w, eps, out + size_t(t) * dim, dim);
}

namespace {

struct MatmulJob {
  const cpu::KernelTable* k;
  cpu::MatmulArgs args[3];
  int rows[3];
  int row_block;
  int blocks[3];  // row blocks per matrix
  float* scratch;
  size_t scratch_stride;
};

void matmul_task(void* ctx, int task, int thread) {
  MatmulJob& j = *static_cast<MatmulJob*>(ctx);
  int m = 0;
  while (task >= j.blocks[m]) task -= j.blocks[m++];
  const int r0 = task * j.row_block;
  const int r1 = std::min(j.rows[m], r0 + j.row_block);
  j.k->matmul_rows(j.args[m], r0, r1, j.scratch + size_t(thread) * j.scratch_stride);
}

}  // namespace

void CpuBackend::matmul(const WeightView* w, float* const* y, int n_mats, const float* x, int n) {
  MatmulJob j;
  j.k = &k_;
  j.scratch = scratch_;
  j.scratch_stride = scratch_stride_;
  int total_rows = 0;
  for (int m = 0; m < n_mats; ++m) total_rows += w[m].rows;
  // Enough blocks to balance the threads; multiples of 4 rows (the kernel's row tile).
  int block = total_rows / (pool_.size() * 8);
  block = std::max(4, (block + 3) & ~3);
  j.row_block = block;
  int tasks = 0;
  for (int m = 0; m < n_mats; ++m) {
    j.args[m] = cpu::MatmulArgs{w[m].dtype, w[m].data, w[m].row_bytes, x, y[m], w[m].cols, n, w[m].rows};
    j.rows[m] = w[m].rows;
    j.blocks[m] = (w[m].rows + block - 1) / block;
    tasks += j.blocks[m];
  }
  pool_.run(tasks, matmul_task, &j);
}

void CpuBackend::rope(float* x, int n, int n_heads, int head_dim, int first_pos, const float* inv_freq, int rope_dim,
                      bool interleaved, float pos_scale) {
  float cos_t[512], sin_t[512];
  const int half = rope_dim / 2;
  for (int t = 0; t < n; ++t) {
    const float pos = float(first_pos + t) * pos_scale;
    for (int i = 0; i < half; ++i) {
      const float angle = pos * inv_freq[i];
      cos_t[i] = std::cos(angle);
      sin_t[i] = std::sin(angle);
    }
    for (int h = 0; h < n_heads; ++h)
      cpu::rope_apply(x + size_t(t) * n_heads * head_dim + size_t(h) * head_dim, cos_t, sin_t, rope_dim, interleaved);
  }
}

namespace {

struct AttentionJob {
  const cpu::KernelTable* k;
  const AttentionArgs* a;
  float* scratch;
  size_t scratch_stride;
};

// One (token, head) pair: scores over positions 0..pos in order, softmax, weighted sum of
// V rows in order. The sequence is the same whatever chunk the token arrives in.
void attention_task(void* ctx, int task, int thread) {
  AttentionJob& j = *static_cast<AttentionJob*>(ctx);
  const AttentionArgs& a = *j.a;
  const int t = task / a.n_heads, h = task % a.n_heads;
  const int kvh = h / (a.n_heads / a.n_kv_heads);
  const int hd = a.head_dim;
  const size_t q_stride = size_t(a.n_heads) * hd, kv_stride = size_t(a.n_kv_heads) * hd;
  const int n_keys = a.first_pos + t + 1;
  const float* q = a.q + size_t(t) * q_stride + size_t(h) * hd;
  float* scores = j.scratch + size_t(thread) * j.scratch_stride;
  for (int p = 0; p < n_keys; ++p)
    scores[p] = j.k->dot(q, a.k_cache + size_t(p) * kv_stride + size_t(kvh) * hd, hd) * a.scale;
  cpu::softmax(scores, n_keys);
  float* out = a.out + size_t(t) * q_stride + size_t(h) * hd;
  for (int i = 0; i < hd; ++i) out[i] = 0.0f;
  for (int p = 0; p < n_keys; ++p) j.k->axpy(scores[p], a.v_cache + size_t(p) * kv_stride + size_t(kvh) * hd, out, hd);
}

}  // namespace

void CpuBackend::attention(const AttentionArgs& a) {
  AttentionJob j{&k_, &a, scratch_, scratch_stride_};
  pool_.run(a.n_tokens * a.n_heads, attention_task, &j);
}

void CpuBackend::silu_mul(const float* g, const float* u, float* out, size_t n) { cpu::silu_mul(g, u, out, int(n)); }

void CpuBackend::add(float* x, const float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) x[i] = x[i] + y[i];
}

}  // namespace phasekv
