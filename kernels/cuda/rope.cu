#include "common.cuh"
#include "rope.cuh"

namespace phasekv {
namespace cuda {

namespace {

// One thread per (token, head, pair).
__global__ void rope_pairwise(RopeParams p) {
  const int half = p.rope_dim / 2;
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= int64_t(p.n) * p.n_heads * half) return;
  const int pair = int(i % half);
  const int64_t th = i / half;  // token * n_heads + head
  const int t = int(th / p.n_heads);
  const float pos = mul_rn(float(p.first_pos + t), p.pos_scale);
  const float angle = mul_rn(pos, p.inv_freq[pair]);
  const float c = cosf(angle), s = sinf(angle);
  float* v = p.x + th * p.head_dim;
  const int a = p.interleaved ? 2 * pair : pair;
  const int b = p.interleaved ? 2 * pair + 1 : pair + half;
  float x0 = v[a], x1 = v[b];
  rope_rotate(x0, x1, c, s);
  v[a] = x0;
  v[b] = x1;
}

}  // namespace

void launch_rope(const RopeParams& p, cudaStream_t stream) {
  const int64_t total = int64_t(p.n) * p.n_heads * (p.rope_dim / 2);
  if (total > 0) rope_pairwise<<<unsigned((total + 255) / 256), 256, 0, stream>>>(p);
}

}  // namespace cuda
}  // namespace phasekv
