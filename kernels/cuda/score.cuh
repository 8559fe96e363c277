// The self-test's gold score on the GPU: argmax (first index of the maximum), log-sum-exp in
// double and the gold token's NLL over one logit row, so a probe returns 16 bytes instead of
// the vocabulary. The argmax is exact; the double sum differs from the CPU's index-order sum
// only in its last bits.
#pragma once

#include "backend.h"

typedef struct CUstream_st* cudaStream_t;

namespace phasekv {
namespace cuda {

void launch_gold_score(const float* logits, int n, int32_t gold, ScoreResult* out, cudaStream_t stream);

}  // namespace cuda
}  // namespace phasekv
