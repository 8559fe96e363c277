// Benchmark of the CUDA dequantization op (the one GPU op so far): bytes read + written per
// second for each dtype over a weight-sized buffer, timed with CUDA events (median of
// --reps runs after warm-up). Prints "skipped: no CUDA device" and exits 77 without a GPU.
// Usage: phasekv_cuda_bench [--mib N] [--reps R]
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cuda_check.h"
#include "dequant.cuh"
#include "dtype.h"

using namespace phasekv;

namespace {

Status bench(DType t, int64_t n, int reps, float* median_ms) {
  const DTypeInfo& info = dtype_info(t);
  const size_t bytes = size_t(n / info.block_elems) * info.block_bytes;
  void* d_src = nullptr;
  float* d_dst = nullptr;
  PKV_CUDA_CHECK(cudaMalloc(&d_src, bytes));
  PKV_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&d_dst), size_t(n) * 4));
  PKV_CUDA_CHECK(cudaMemset(d_src, 0x11, bytes));  // finite scales, any pattern is timed alike
  cudaEvent_t a, b;
  PKV_CUDA_CHECK(cudaEventCreate(&a));
  PKV_CUDA_CHECK(cudaEventCreate(&b));
  for (int i = 0; i < 3; ++i) PKV_RETURN_IF_ERROR(cuda::dequantize_checked(t, d_src, d_dst, n, nullptr));
  std::vector<float> ms(size_t(reps), 0.f);
  for (int r = 0; r < reps; ++r) {
    PKV_CUDA_CHECK(cudaEventRecord(a, nullptr));
    PKV_RETURN_IF_ERROR(cuda::dequantize_checked(t, d_src, d_dst, n, nullptr));
    PKV_CUDA_CHECK(cudaEventRecord(b, nullptr));
    PKV_CUDA_CHECK(cudaEventSynchronize(b));
    PKV_CUDA_CHECK(cudaEventElapsedTime(&ms[size_t(r)], a, b));
  }
  std::sort(ms.begin(), ms.end());
  *median_ms = ms[ms.size() / 2];
  PKV_CUDA_CHECK(cudaEventDestroy(a));
  PKV_CUDA_CHECK(cudaEventDestroy(b));
  PKV_CUDA_CHECK(cudaFree(d_src));
  PKV_CUDA_CHECK(cudaFree(d_dst));
  return Status::Ok();
}

}  // namespace

int main(int argc, char** argv) {
  int64_t mib = 64;
  int reps = 20;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::printf("usage: %s [--mib N (f32 output size, default 64)] [--reps R (default 20)]\n", argv[0]);
      return 0;
    } else if (a == "--mib" && i + 1 < argc) {
      mib = std::atoll(argv[++i]);
    } else if (a == "--reps" && i + 1 < argc) {
      reps = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "error: unknown argument '%s' (see --help)\n", a.c_str());
      return 2;
    }
  }
  if (mib < 1 || mib > 16384 || reps < 1 || reps > 10000) {
    std::fprintf(stderr, "error: --mib must be in [1, 16384] and --reps in [1, 10000]\n");
    return 2;
  }
  std::string why;
  if (cuda::device_count(&why) == 0) {
    std::printf("skipped: no CUDA device (%s)\n", why.c_str());
    return 77;
  }
  cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess)
    std::printf("device: %s (sm_%d%d, %d SMs)\n", prop.name, prop.major, prop.minor, prop.multiProcessorCount);
  const int64_t n = (mib << 20) / 4 / 32 * 32;  // elements, a multiple of every block size
  std::printf("%-6s %12s %12s %10s %10s\n", "dtype", "elements", "bytes moved", "median ms", "GB/s");
  const DType all[] = {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1};
  for (DType t : all) {
    float ms = 0;
    Status s = bench(t, n, reps, &ms);
    if (!s.ok()) {
      std::printf("%-6s error: %s\n", dtype_name(t), s.to_string().c_str());
      return 1;
    }
    const DTypeInfo& info = dtype_info(t);
    const double moved = double(n / info.block_elems) * info.block_bytes + double(n) * 4;
    std::printf("%-6s %12lld %12.0f %10.4f %10.1f\n", dtype_name(t), static_cast<long long>(n), moved, ms,
                moved / (ms * 1e-3) / 1e9);
  }
  return 0;
}
