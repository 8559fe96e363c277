#include <cuda_runtime.h>

#include "common.cuh"
#include "cuda_check.h"
#include "dequant.cuh"

namespace phasekv {
namespace cuda {

namespace {

// One thread per output element: the element's block found from the int64 index, decoded by
// dequant_element (common.cuh), the same decoder embed and matmul use.
template <DType T>
__global__ void dequantize_elementwise(const uint8_t* __restrict__ src, float* __restrict__ dst, int64_t n,
                                       int block_elems, int block_bytes) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  dst[i] = dequant_element<T>(src + (i / block_elems) * block_bytes, int(i % block_elems));
}

bool launch(DType t, const uint8_t* src, float* dst, int64_t n, cudaStream_t stream) {
  constexpr int kThreads = 256;
  const unsigned blocks = unsigned((n + kThreads - 1) / kThreads);
  const DTypeInfo& info = dtype_info(t);
  PKV_DISPATCH_DTYPE(t, T,
                     dequantize_elementwise<T><<<blocks, kThreads, 0, stream>>>(src, dst, n, int(info.block_elems),
                                                                               int(info.block_bytes)));
  return true;
}

}  // namespace

void launch_dequantize(DType t, const void* src, float* dst, int64_t n, cudaStream_t stream) {
  (void)launch(t, static_cast<const uint8_t*>(src), dst, n, stream);
}

Status dequantize_checked(DType t, const void* src, float* dst, int64_t n, cudaStream_t stream) {
  const DTypeInfo* info = dtype_info(static_cast<uint8_t>(t));
  if (!info) return make_error(StatusCode::kInvalidArgument, "dequantize: dtype %u is unknown", unsigned(t));
  if (n <= 0 || n % info->block_elems != 0)
    return make_error(StatusCode::kInvalidArgument, "dequantize: n = %lld is not a positive multiple of %u (%s)",
                      (long long)n, info->block_elems, info->name);
  if (!src || !dst) return make_error(StatusCode::kInvalidArgument, "dequantize: null pointer");
  if ((n + 255) / 256 > 0x7fffffff)
    return make_error(StatusCode::kInvalidArgument, "dequantize: n = %lld is too large for one launch", (long long)n);
  launch_dequantize(t, src, dst, n, stream);
  PKV_CUDA_CHECK(cudaGetLastError());
  return Status::Ok();
}

}  // namespace cuda
}  // namespace phasekv
