// Element-wise ops on the GPU: silu(g) * u, x += y, and the ring write of a windowed layer.
// add and ring_write are exact; silu_mul uses the device expf (a couple of ulps from the host's).
#pragma once

#include <cstddef>

#include "backend.h"

typedef struct CUstream_st* cudaStream_t;

namespace phasekv {
namespace cuda {

void launch_silu_mul(const float* g, const float* u, float* out, size_t n, cudaStream_t stream);
void launch_add(float* x, const float* y, size_t n, cudaStream_t stream);
void launch_ring_write(const RingWriteArgs& a, cudaStream_t stream);

}  // namespace cuda
}  // namespace phasekv
