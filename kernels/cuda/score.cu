#include "common.cuh"
#include "score.cuh"

namespace phasekv {
namespace cuda {

namespace {

constexpr int kThreads = 1024;

__global__ void gold_score_one_block(const float* __restrict__ lg, int n, int32_t gold, ScoreResult* out) {
  __shared__ float best_v[kThreads];
  __shared__ int best_i[kThreads];
  __shared__ double red[32];
  float bv = -INFINITY;
  int bi = n;  // past the end: loses every tie
  for (int i = threadIdx.x; i < n; i += kThreads)
    if (bi == n || lg[i] > bv) {  // the first element a thread sees seeds its scan, like lg[0] the CPU's
      bv = lg[i];
      bi = i;
    }
  best_v[threadIdx.x] = bv;
  best_i[threadIdx.x] = bi;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) {
      const float ov = best_v[threadIdx.x + s];
      const int oi = best_i[threadIdx.x + s];
      const float v = best_v[threadIdx.x];
      const int vi = best_i[threadIdx.x];
      // Larger value wins; equal values: the lower index (the CPU keeps the first maximum).
      if (oi < n && (vi == n || ov > v || (ov == v && oi < vi))) {
        best_v[threadIdx.x] = ov;
        best_i[threadIdx.x] = oi;
      }
    }
    __syncthreads();
  }
  const float mx = best_v[0];
  const int arg = best_i[0];
  double sum = 0.0;
  for (int i = threadIdx.x; i < n; i += kThreads) sum += exp(double(lg[i]) - double(mx));
  sum = block_reduce(sum, red, SumOp(), 0.0);
  if (threadIdx.x == 0) {
    out->nll = log(sum) - (double(lg[gold]) - double(mx));
    out->argmax = arg;
    out->hit = arg == gold ? 1 : 0;
  }
}

}  // namespace

void launch_gold_score(const float* logits, int n, int32_t gold, ScoreResult* out, cudaStream_t stream) {
  if (n > 0) gold_score_one_block<<<1, kThreads, 0, stream>>>(logits, n, gold, out);
}

}  // namespace cuda
}  // namespace phasekv
