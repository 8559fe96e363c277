#include "common.cuh"
#include "elementwise.cuh"

namespace phasekv {
namespace cuda {

namespace {

__global__ void silu_mul_elementwise(const float* __restrict__ g, const float* __restrict__ u, float* out, size_t n) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = mul_rn(g[i] / add_rn(1.0f, expf(-g[i])), u[i]);
}

__global__ void add_elementwise(float* x, const float* __restrict__ y, size_t n) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] = add_rn(x[i], y[i]);
}

// One thread per element of the rows kept (the chunk's last min(n, ring_rows) tokens).
__global__ void ring_write_elementwise(RingWriteArgs a, int first_kept) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t kept = int64_t(a.n_tokens - first_kept) * a.kvd;
  if (i >= kept) return;
  const int t = first_kept + int(i / a.kvd), c = int(i % a.kvd);
  const size_t row = size_t(a.first_pos + t) % size_t(a.ring_rows);
  a.ring_k[row * a.kvd + c] = a.k_rows[size_t(t) * a.kvd + c];
  a.ring_v[row * a.kvd + c] = a.v_rows[size_t(t) * a.kvd + c];
}

unsigned blocks_for(size_t n) { return unsigned((n + 255) / 256); }

}  // namespace

void launch_silu_mul(const float* g, const float* u, float* out, size_t n, cudaStream_t stream) {
  if (n) silu_mul_elementwise<<<blocks_for(n), 256, 0, stream>>>(g, u, out, n);
}

void launch_add(float* x, const float* y, size_t n, cudaStream_t stream) {
  if (n) add_elementwise<<<blocks_for(n), 256, 0, stream>>>(x, y, n);
}

void launch_ring_write(const RingWriteArgs& a, cudaStream_t stream) {
  if (a.ring_rows <= 0 || a.n_tokens <= 0) return;
  const int keep = a.n_tokens < a.ring_rows ? a.n_tokens : a.ring_rows;
  const size_t total = size_t(keep) * size_t(a.kvd);
  ring_write_elementwise<<<blocks_for(total), 256, 0, stream>>>(a, a.n_tokens - keep);
}

}  // namespace cuda
}  // namespace phasekv
