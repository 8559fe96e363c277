#include "common.cuh"
#include "matmul.cuh"

namespace phasekv {
namespace cuda {

namespace {

constexpr int kRowsPerBlock = 4;  // one warp each
constexpr int kTokenTile = 8;

template <DType T>
__global__ void matmul_warp_per_row(const uint8_t* __restrict__ w, size_t row_bytes, int rows, int k,
                                    const float* __restrict__ x, int n_tok, float* __restrict__ y) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int r = blockIdx.x * kRowsPerBlock + warp;
  const int t0 = blockIdx.y * kTokenTile;
  if (r >= rows) return;
  const int nt = min(kTokenTile, n_tok - t0);
  const uint8_t* row = w + size_t(r) * row_bytes;
  float acc[kTokenTile];
#pragma unroll
  for (int j = 0; j < kTokenTile; ++j) acc[j] = 0.0f;
  for (int i = lane; i < k; i += 32) {
    const float wv = dequant_element<T>(row, i);
#pragma unroll
    for (int j = 0; j < kTokenTile; ++j)
      if (j < nt) acc[j] += wv * x[size_t(t0 + j) * k + i];
  }
#pragma unroll
  for (int j = 0; j < kTokenTile; ++j) {
    const float s = warp_sum(acc[j]);
    if (j < nt && lane == 0) y[size_t(t0 + j) * rows + r] = s;
  }
}

}  // namespace

bool launch_matmul(const WeightView& w, const float* x, int n, float* y, cudaStream_t stream) {
  if (n <= 0 || w.rows <= 0) return true;
  const dim3 grid(unsigned((w.rows + kRowsPerBlock - 1) / kRowsPerBlock), unsigned((n + kTokenTile - 1) / kTokenTile));
  const uint8_t* wd = static_cast<const uint8_t*>(w.data);
  PKV_DISPATCH_DTYPE(w.dtype, T,
                     matmul_warp_per_row<T><<<grid, 32 * kRowsPerBlock, 0, stream>>>(wd, w.row_bytes, w.rows, w.cols,
                                                                                       x, n, y));
  return true;
}

}  // namespace cuda
}  // namespace phasekv
