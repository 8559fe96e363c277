// The streaming compressor on the GPU (DESIGN.md section 3; CompressArgs in backend.h): the
// chunk's tokens in order through the open windows' online-softmax accumulators, entry j
// emitted when token (j+1)S-1 is added; uniform / scalar / vector gates, shared and per-offset
// gate maps and payloads, rotate-entry keys (optional RMSNorm, RoPE at j*S). One block per
// (branch, KV head), one thread per channel: the recurrence is sequential in t, as on the CPU,
// and each channel's update rounds as the CPU's (common.cuh accumulate); exp is the device's.
#pragma once

#include "backend.h"

typedef struct CUstream_st* cudaStream_t;

namespace phasekv {
namespace cuda {

constexpr int kCompressMaxHeadDim = 1024;
void launch_compress(const CompressArgs& a, cudaStream_t stream);
// acc: [n_windows * n_kv_heads] rows of (2 d_g + head_dim): max -inf, den 0, sum 0.
void launch_compress_reset(float* acc, int n_windows, int n_kv_heads, int d_g, int head_dim, cudaStream_t stream);

}  // namespace cuda
}  // namespace phasekv
