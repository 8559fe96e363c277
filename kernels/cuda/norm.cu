#include "common.cuh"
#include "norm.cuh"

namespace phasekv {
namespace cuda {

namespace {

// One block of 256 threads per row. x and out may be the same rows (qwen3's per-head q/k norm
// runs in place): each thread writes only elements it read itself, after the reduction.
__global__ void rmsnorm_block_per_row(const float* x, const float* __restrict__ w, float eps, int dim, float* out) {
  __shared__ float red[32];
  const float* xr = x + size_t(blockIdx.x) * dim;
  float* o = out + size_t(blockIdx.x) * dim;
  float ss = 0.0f;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) ss += xr[i] * xr[i];
  ss = block_reduce(ss, red, SumOp(), 0.0f);
  const float scale = 1.0f / sqrtf(ss / float(dim) + eps);
  for (int i = threadIdx.x; i < dim; i += blockDim.x) o[i] = mul_rn(mul_rn(xr[i], scale), w[i]);
}

}  // namespace

void launch_rmsnorm(const float* x, const float* w, float eps, int n, int dim, float* out, cudaStream_t stream) {
  if (n > 0) rmsnorm_block_per_row<<<unsigned(n), 256, 0, stream>>>(x, w, eps, dim, out);
}

}  // namespace cuda
}  // namespace phasekv
