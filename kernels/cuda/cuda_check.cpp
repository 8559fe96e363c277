#include "cuda_check.h"

#include <cuda_runtime_api.h>

namespace phasekv {
namespace cuda {

int device_count(std::string* why) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    if (why) *why = cudaGetErrorString(e);
    cudaGetLastError();  // clear the sticky error
    return 0;
  }
  if (n == 0 && why) *why = "no CUDA device";
  return n;
}

Status cuda_status(int err, const char* expr, const char* file, int line) {
  return make_error(StatusCode::kInternal, "CUDA call %s failed at %s:%d: %s", expr, file, line,
                    cudaGetErrorString(static_cast<cudaError_t>(err)));
}

}  // namespace cuda
}  // namespace phasekv
