// Attention over full / sliding / compressed memories on the GPU, with the exact visiting order
// of AttentionArgs (backend.h): compressed entries, then exact tokens oldest first, one softmax
// (online: running max and denominator per 128-key tile), the optional per-head sink logit in
// the denominator, GQA by query head -> KV head h / group. Correctness first: one block per
// (token, query head); split-key flash decoding is issue 14's.
#pragma once

#include "backend.h"

typedef struct CUstream_st* cudaStream_t;

namespace phasekv {
namespace cuda {

constexpr int kAttentionMaxHeadDim = 512;
void launch_attention(const AttentionArgs& a, cudaStream_t stream);

}  // namespace cuda
}  // namespace phasekv
