// Matrix products on the GPU: y[t, r] = dot(W[r, :], x[t, :]) with W in any weight dtype,
// dequantized in registers. Correctness first: one warp per output row and a tile of up to 8
// tokens, f32 accumulation in lane-strided order then a warp tree (the CPU accumulates 8-lane
// partial sums in index order). cuBLASLt GEMMs for prefill and a 128-bit-load GEMV for decode
// are issue 14's: this kernel is the reference they will be checked against, besides the CPU.
#pragma once

#include "backend.h"

typedef struct CUstream_st* cudaStream_t;

namespace phasekv {
namespace cuda {

// x: [n, W.cols] device; y: [n, W.rows] device. false: the dtype has no kernel.
bool launch_matmul(const WeightView& w, const float* x, int n, float* y, cudaStream_t stream);

}  // namespace cuda
}  // namespace phasekv
