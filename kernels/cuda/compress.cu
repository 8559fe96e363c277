#include "common.cuh"
#include "compress.cuh"

namespace phasekv {
namespace cuda {

namespace {

__global__ void compress_block_per_head(CompressArgs a) {
  __shared__ float red[32];
  const int br = blockIdx.x / a.n_kv_heads, h = blockIdx.x % a.n_kv_heads;
  const CompressArgs::Branch& b = a.b[br];
  const int W = a.window, S = a.stride, hd = a.head_dim, dg = a.d_g;
  const int n_acc = (W + S - 1) / S;
  const size_t G = size_t(a.n_kv_heads) * dg, kvd = size_t(a.n_kv_heads) * hd;
  const size_t acc_row = size_t(2 * dg + hd);
  const int c = threadIdx.x;  // channel
  const bool active = c < hd;
  for (int t = 0; t < a.n_tokens; ++t) {
    const int p = a.first_pos + t;
    const int j_first = p / S, j_end = (p + W) / S;
    for (int jw = j_first; jw < j_end; ++jw) {
      const int slot = p - ((jw + 1) * S - W);
      float* acc = b.acc + (size_t(jw % n_acc) * a.n_kv_heads + h) * acc_row;
      float* mx = acc;
      float* den = acc + dg;
      float* sum = acc + 2 * dg;
      const float* x = b.payload + size_t(t) * b.payload_stride + (b.payload_per_offset ? size_t(slot) * kvd : 0) +
                       size_t(h) * hd;
      const float* g = b.gate ? b.gate + size_t(t) * b.gate_stride + (b.gate_per_offset ? size_t(slot) * G : 0) +
                                    size_t(h) * dg
                              : nullptr;
      const float* bias = b.bias ? b.bias + size_t(slot) * G + size_t(h) * dg : nullptr;
      const int gc = dg == 1 ? 0 : c;  // the gate channel this thread's payload channel uses
      float m_new = 0.0f, keep = 0.0f, e = 0.0f;
      if (active) {
        const float s = add_rn(g ? g[gc] : 0.0f, bias ? bias[gc] : 0.0f);
        m_new = s > mx[gc] ? s : mx[gc];
        keep = expf(mx[gc] - m_new);  // 0 on the first slot (max = -inf)
        e = expf(s - m_new);
      }
      __syncthreads();  // every thread has read the shared max/den before they change
      if (active) {
        sum[c] = accumulate(sum[c], keep, e, x[c]);
        if (dg > 1 || c == 0) {
          den[gc] = add_rn(mul_rn(den[gc], keep), e);
          mx[gc] = m_new;
        }
      }
      __syncthreads();
    }
    if ((p + 1) % S != 0) continue;
    const int j = (p + 1) / S - 1;
    float* acc = b.acc + (size_t(j % n_acc) * a.n_kv_heads + h) * acc_row;
    float* out = b.entries + size_t(j) * kvd + size_t(h) * hd;
    if (active) out[c] = acc[2 * dg + c] / acc[dg + (dg == 1 ? 0 : c)];
    __syncthreads();
    if (active) {
      if (c < dg) {
        acc[c] = -INFINITY;
        acc[dg + c] = 0.0f;
      }
      acc[2 * dg + c] = 0.0f;
    }
    if (br == 0 && a.rotate_entry) {  // uniform over the block: every thread takes this branch
      if (a.entry_norm) {
        const float v = active ? out[c] : 0.0f;
        const float ss = block_reduce(active ? v * v : 0.0f, red, SumOp(), 0.0f);
        const float scale = 1.0f / sqrtf(ss / float(hd) + a.norm_eps);
        if (active) out[c] = mul_rn(mul_rn(v, scale), a.entry_norm[c]);
        __syncthreads();
      }
      const int half = a.rope_dim / 2;
      if (c < half) {
        const float angle = mul_rn(mul_rn(float(j * S), a.pos_scale), a.inv_freq[c]);
        const int ia = a.interleaved ? 2 * c : c;
        const int ib = a.interleaved ? 2 * c + 1 : c + half;
        float x0 = out[ia], x1 = out[ib];
        rope_rotate(x0, x1, cosf(angle), sinf(angle));
        out[ia] = x0;
        out[ib] = x1;
      }
    }
    __syncthreads();
  }
}

__global__ void compress_reset_rows(float* acc, int64_t rows, int d_g, int head_dim) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int row = 2 * d_g + head_dim;
  if (i >= rows * row) return;
  const int c = int(i % row);
  acc[i] = c < d_g ? -INFINITY : 0.0f;
}

}  // namespace

void launch_compress(const CompressArgs& a, cudaStream_t stream) {
  const int threads = ((a.head_dim + 31) / 32) * 32;
  if (a.n_tokens > 0) compress_block_per_head<<<unsigned(2 * a.n_kv_heads), unsigned(threads), 0, stream>>>(a);
}

void launch_compress_reset(float* acc, int n_windows, int n_kv_heads, int d_g, int head_dim, cudaStream_t stream) {
  const int64_t total = int64_t(n_windows) * n_kv_heads * (2 * d_g + head_dim);
  if (total > 0)
    compress_reset_rows<<<unsigned((total + 255) / 256), 256, 0, stream>>>(acc, int64_t(n_windows) * n_kv_heads, d_g,
                                                                          head_dim);
}

}  // namespace cuda
}  // namespace phasekv
