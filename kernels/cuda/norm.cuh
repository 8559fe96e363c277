// RMSNorm on the GPU: out[t, :] = x[t, :] / sqrt(mean(x[t, :]^2) + eps) * w. The sum of squares
// is a block tree reduction (the CPU sums in index order): results differ in the last bits.
#pragma once

typedef struct CUstream_st* cudaStream_t;

namespace phasekv {
namespace cuda {

// x, out: [n, dim] device; w: [dim] device.
void launch_rmsnorm(const float* x, const float* w, float eps, int n, int dim, float* out, cudaStream_t stream);

}  // namespace cuda
}  // namespace phasekv
