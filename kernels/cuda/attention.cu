#include "attention.cuh"
#include "common.cuh"

namespace phasekv {
namespace cuda {

namespace {

constexpr int kThreads = 128;  // keys per tile, one per thread
constexpr int kChannelSlots = kAttentionMaxHeadDim / kThreads;

// Row of visible key i (0-based over entries then exact tokens) for the query at `pos`.
__device__ __forceinline__ const float* key_row(const AttentionArgs& a, bool values, int i, int n_ent, int lo,
                                                size_t kv_stride, size_t kv_off) {
  if (i < n_ent) return (values ? a.v_entries : a.k_entries) + size_t(i) * kv_stride + kv_off;
  const int p = lo + (i - n_ent);
  const float* cache = values ? a.v_cache : a.k_cache;
  if (a.local < 0) return cache + size_t(p) * kv_stride + kv_off;
  if (p < a.first_pos) return cache + size_t(p % a.ring_rows) * kv_stride + kv_off;
  return (values ? a.v_chunk : a.k_chunk) + size_t(p - a.first_pos) * kv_stride + kv_off;
}

__global__ void attention_online_softmax(AttentionArgs a) {
  extern __shared__ float smem[];
  float* q_s = smem;                 // [head_dim]
  float* p_s = smem + a.head_dim;    // [kThreads] this tile's probabilities
  __shared__ float red[32];
  const int t = blockIdx.x / a.n_heads, h = blockIdx.x % a.n_heads;
  const int group = a.n_heads / a.n_kv_heads, kvh = h / group, hd = a.head_dim;
  const size_t q_stride = size_t(a.n_heads) * hd, kv_stride = size_t(a.n_kv_heads) * hd;
  const size_t kv_off = size_t(kvh) * hd;
  const int pos = a.first_pos + t;
  const int n_ent = a.stride > 0 ? (pos + 1) / a.stride : 0;
  const int lo = a.local < 0 ? 0 : max(0, pos - a.local + 1);
  const int n_keys = n_ent + (pos + 1 - lo);
  float* out = a.out + size_t(t) * q_stride + size_t(h) * hd;
  for (int c = threadIdx.x; c < hd; c += blockDim.x) q_s[c] = a.q[size_t(t) * q_stride + size_t(h) * hd + c];
  __syncthreads();

  float m = a.sink ? a.sink[h] : -INFINITY;  // running max
  float l = a.sink ? 1.0f : 0.0f;            // running denominator (exp(sink - m) when m = sink)
  float acc[kChannelSlots];
#pragma unroll
  for (int j = 0; j < kChannelSlots; ++j) acc[j] = 0.0f;
  for (int base = 0; base < n_keys; base += kThreads) {
    const int i = base + int(threadIdx.x);
    float s = -INFINITY;
    if (i < n_keys) {
      const float* k = key_row(a, false, i, n_ent, lo, kv_stride, kv_off);
      float d = 0.0f;
      for (int c = 0; c < hd; ++c) d += q_s[c] * k[c];
      s = d * a.scale;
    }
    const float m_new = fmaxf(m, block_reduce(s, red, MaxOp(), -INFINITY));
    const float corr = expf(m - m_new);
    const float p = i < n_keys ? expf(s - m_new) : 0.0f;
    p_s[threadIdx.x] = p;
    l = l * corr + block_reduce(p, red, SumOp(), 0.0f);  // synchronizes: p_s is complete
    const int tile = min(kThreads, n_keys - base);
#pragma unroll
    for (int j = 0; j < kChannelSlots; ++j) {
      const int c = int(threadIdx.x) + j * kThreads;
      if (c >= hd) continue;
      float sum = acc[j] * corr;
      for (int kk = 0; kk < tile; ++kk) sum += p_s[kk] * key_row(a, true, base + kk, n_ent, lo, kv_stride, kv_off)[c];
      acc[j] = sum;
    }
    m = m_new;
    __syncthreads();  // p_s is rewritten by the next tile
  }
#pragma unroll
  for (int j = 0; j < kChannelSlots; ++j) {
    const int c = int(threadIdx.x) + j * kThreads;
    if (c < hd) out[c] = n_keys > 0 ? acc[j] / l : 0.0f;
  }
}

}  // namespace

void launch_attention(const AttentionArgs& a, cudaStream_t stream) {
  const unsigned blocks = unsigned(a.n_tokens) * unsigned(a.n_heads);
  const size_t smem = size_t(a.head_dim + kThreads) * sizeof(float);
  if (blocks > 0) attention_online_softmax<<<blocks, kThreads, smem, stream>>>(a);
}

}  // namespace cuda
}  // namespace phasekv
