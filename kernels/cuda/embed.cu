#include "common.cuh"
#include "embed.cuh"

namespace phasekv {
namespace cuda {

namespace {

// One thread per output element.
template <DType T>
__global__ void embed_rows_elementwise(const uint8_t* __restrict__ table, size_t row_bytes, int cols,
                                       const int32_t* __restrict__ tokens, int n, float* __restrict__ out) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= int64_t(n) * cols) return;
  const int t = int(i / cols), c = int(i % cols);
  out[i] = dequant_element<T>(table + size_t(tokens[t]) * row_bytes, c);
}

}  // namespace

bool launch_embed(const WeightView& w, const int32_t* tokens, int n, float* out, cudaStream_t stream) {
  const int64_t total = int64_t(n) * w.cols;
  const unsigned blocks = unsigned((total + 255) / 256);
  const uint8_t* table = static_cast<const uint8_t*>(w.data);
  PKV_DISPATCH_DTYPE(w.dtype, T,
                     embed_rows_elementwise<T><<<blocks, 256, 0, stream>>>(table, w.row_bytes, w.cols, tokens, n, out));
  return true;
}

}  // namespace cuda
}  // namespace phasekv
