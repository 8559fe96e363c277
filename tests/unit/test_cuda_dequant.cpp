// CUDA dequantization against the CPU reference (dequantize_row), bit for bit, for every
// dtype. Exits 77 with "skipped: no CUDA device" where there is no GPU (ctest: Skipped).
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "cuda_check.h"
#include "dequant.cuh"
#include "dtype.h"

using namespace phasekv;

namespace {

Status check_dtype(DType t, int64_t n, int* mismatches) {
  const DTypeInfo& info = dtype_info(t);
  const size_t bytes = size_t(n / info.block_elems) * info.block_bytes;
  std::vector<uint8_t> host(bytes);
  std::mt19937 rng(uint32_t(t) + 1);
  for (auto& b : host) b = uint8_t(rng());
  // Keep scales finite so that comparisons are meaningful: clear the exponent's top bit of
  // every f16 scale field (dtype_scale_fields: d, and dmin / m where the type has one).
  if (t == DType::F16)
    for (size_t i = 1; i < bytes; i += 2) host[i] &= 0x3b;
  const ScaleFields f = dtype_scale_fields(t);
  if (f.d >= 0)
    for (size_t off = 0; off < bytes; off += info.block_bytes) {
      host[off + size_t(f.d) + 1] &= 0x3b;
      if (f.min >= 0) host[off + size_t(f.min) + 1] &= 0x3b;
    }
  if (t == DType::F32)
    for (size_t i = 3; i < bytes; i += 4) host[i] &= 0x3f;
  if (t == DType::BF16)
    for (size_t i = 1; i < bytes; i += 2) host[i] &= 0x3f;
  std::vector<float> ref(static_cast<size_t>(n)), got(static_cast<size_t>(n));
  dequantize_row(t, host.data(), ref.data(), n);
  void* d_src = nullptr;
  float* d_dst = nullptr;
  PKV_CUDA_CHECK(cudaMalloc(&d_src, bytes));
  PKV_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&d_dst), size_t(n) * 4));
  PKV_CUDA_CHECK(cudaMemcpy(d_src, host.data(), bytes, cudaMemcpyHostToDevice));
  PKV_RETURN_IF_ERROR(cuda::dequantize_checked(t, d_src, d_dst, n, nullptr));
  PKV_CUDA_CHECK(cudaMemcpy(got.data(), d_dst, size_t(n) * 4, cudaMemcpyDeviceToHost));
  PKV_CUDA_CHECK(cudaFree(d_src));
  PKV_CUDA_CHECK(cudaFree(d_dst));
  *mismatches = 0;
  for (int64_t i = 0; i < n; ++i)
    if (std::memcmp(&ref[size_t(i)], &got[size_t(i)], 4) != 0) ++*mismatches;
  return Status::Ok();
}

}  // namespace

int main() {
  std::string why;
  if (cuda::device_count(&why) == 0) {
    std::printf("skipped: no CUDA device (%s)\n", why.c_str());
    return 77;
  }
  int failures = 0;
  for (uint8_t raw = 0; raw < kDTypeCount; ++raw) {
    const DType t = static_cast<DType>(raw);
    int mism = 0;
    Status s = check_dtype(t, 256 * 513, &mism);  // a multiple of every block size
    if (!s.ok()) {
      std::printf("FAIL %s: %s\n", dtype_name(t), s.to_string().c_str());
      ++failures;
    } else if (mism) {
      std::printf("FAIL %s: %d elements differ from the CPU reference\n", dtype_name(t), mism);
      ++failures;
    } else {
      std::printf("ok   %s: bit-identical to the CPU reference\n", dtype_name(t));
    }
  }
  // Argument checks: a bad n is refused before launch.
  Status bad = cuda::dequantize_checked(DType::Q4_1, reinterpret_cast<void*>(16), reinterpret_cast<float*>(16), 33,
                                        nullptr);
  if (bad.ok()) {
    std::printf("FAIL: n = 33 accepted for Q4_1\n");
    ++failures;
  }
  std::printf("%d passed, %d failed\n", int(kDTypeCount) + 1 - failures, failures);
  return failures ? 1 : 0;
}
