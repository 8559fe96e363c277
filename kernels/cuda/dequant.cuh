// Dequantization to f32 on the GPU: the CUDA twin of dequantize_row (model_format/dtype.h),
// checked against it element by element in tests/unit/test_cuda_dequant.cpp.
//
// Three tiers, as in every CUDA op of PhaseKV:
//   kernel (dequant.cu, internal) -> launch_dequantize (raw device pointers + stream)
//   -> dequantize_checked (argument checks, returns a Status).
#pragma once

#include <cstdint>

#include "dtype.h"
#include "status.h"

typedef struct CUstream_st* cudaStream_t;

namespace phasekv {
namespace cuda {

// src: n elements of `t` on the device (n a multiple of the block size); dst: n floats on the device.
void launch_dequantize(DType t, const void* src, float* dst, int64_t n, cudaStream_t stream);

// Checks n and the pointers, launches, and reports a launch error as a Status.
Status dequantize_checked(DType t, const void* src, float* dst, int64_t n, cudaStream_t stream);

}  // namespace cuda
}  // namespace phasekv
