// Token embedding on the GPU: out[t, :] = dequantized table row tokens[t], bit-identical to the
// CPU (common.cuh dequant_element rounds exactly as dequantize_row).
#pragma once

#include "backend.h"

typedef struct CUstream_st* cudaStream_t;

namespace phasekv {
namespace cuda {

// tokens: [n] device; out: [n, table.cols] device. false: the dtype has no kernel.
bool launch_embed(const WeightView& table, const int32_t* tokens, int n, float* out, cudaStream_t stream);

}  // namespace cuda
}  // namespace phasekv
