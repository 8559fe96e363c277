#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "cuda_check.h"
#include "dequant.cuh"

namespace phasekv {
namespace cuda {

namespace {

__device__ __forceinline__ float half_bits_to_float(uint16_t h) { return __half2float(__ushort_as_half(h)); }

// One thread per output element; blocks of 32 elements are read with byte loads because
// GGUF blocks (18/20/34 bytes) are not 4-byte aligned.
__global__ void dequantize_q4_0_elementwise(const uint8_t* __restrict__ src, float* __restrict__ dst, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const uint8_t* blk = src + (i / 32) * 18;
  const int j = int(i % 32);
  const float d = half_bits_to_float(uint16_t(blk[0] | (blk[1] << 8)));
  const uint8_t q = blk[2 + (j & 15)];
  const int v = j < 16 ? (q & 0x0f) : (q >> 4);
  dst[i] = d * float(v - 8);
}

__global__ void dequantize_q4_1_elementwise(const uint8_t* __restrict__ src, float* __restrict__ dst, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const uint8_t* blk = src + (i / 32) * 20;
  const int j = int(i % 32);
  const float d = half_bits_to_float(uint16_t(blk[0] | (blk[1] << 8)));
  const float m = half_bits_to_float(uint16_t(blk[2] | (blk[3] << 8)));
  const uint8_t q = blk[4 + (j & 15)];
  const int v = j < 16 ? (q & 0x0f) : (q >> 4);
  dst[i] = __fadd_rn(__fmul_rn(d, float(v)), m);  // no FMA: match the CPU reference exactly
}

__global__ void dequantize_q8_0_elementwise(const uint8_t* __restrict__ src, float* __restrict__ dst, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const uint8_t* blk = src + (i / 32) * 34;
  const float d = half_bits_to_float(uint16_t(blk[0] | (blk[1] << 8)));
  dst[i] = d * float(int8_t(blk[2 + i % 32]));
}

__global__ void dequantize_f16_elementwise(const uint16_t* __restrict__ src, float* __restrict__ dst, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) dst[i] = half_bits_to_float(src[i]);
}

__global__ void dequantize_bf16_elementwise(const uint16_t* __restrict__ src, float* __restrict__ dst, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) dst[i] = __uint_as_float(uint32_t(src[i]) << 16);
}

__global__ void copy_f32_elementwise(const float* __restrict__ src, float* __restrict__ dst, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) dst[i] = src[i];
}

}  // namespace

void launch_dequantize(DType t, const void* src, float* dst, int64_t n, cudaStream_t stream) {
  constexpr int kThreads = 256;
  const unsigned blocks = unsigned((n + kThreads - 1) / kThreads);
  const uint8_t* s8 = static_cast<const uint8_t*>(src);
  switch (t) {
    case DType::Q4_0: dequantize_q4_0_elementwise<<<blocks, kThreads, 0, stream>>>(s8, dst, n); return;
    case DType::Q4_1: dequantize_q4_1_elementwise<<<blocks, kThreads, 0, stream>>>(s8, dst, n); return;
    case DType::Q8_0: dequantize_q8_0_elementwise<<<blocks, kThreads, 0, stream>>>(s8, dst, n); return;
    case DType::F16:
      dequantize_f16_elementwise<<<blocks, kThreads, 0, stream>>>(static_cast<const uint16_t*>(src), dst, n);
      return;
    case DType::BF16:
      dequantize_bf16_elementwise<<<blocks, kThreads, 0, stream>>>(static_cast<const uint16_t*>(src), dst, n);
      return;
    case DType::F32:
      copy_f32_elementwise<<<blocks, kThreads, 0, stream>>>(static_cast<const float*>(src), dst, n);
      return;
  }
}

Status dequantize_checked(DType t, const void* src, float* dst, int64_t n, cudaStream_t stream) {
  const DTypeInfo* info = dtype_info(static_cast<uint8_t>(t));
  if (!info) return make_error(StatusCode::kInvalidArgument, "dequantize: dtype %u is unknown", unsigned(t));
  if (uint8_t(t) > uint8_t(DType::Q4_1))
    return make_error(StatusCode::kUnsupported, "dequantize: no CUDA decoder for %s yet (the CPU backend has one)",
                      info->name);
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
