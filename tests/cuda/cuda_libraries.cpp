// The CUDA libraries this build links are loadable and are the release it was built for, with no
// GPU needed: the runtime's version (cudaRuntimeGetVersion), cuBLASLt's (cublasLtGetVersion),
// and what the runtime says about devices. In the aarch64 CUDA cross build (jetson-cross-cuda)
// this runs under qemu-aarch64 against the aarch64 libcudart.so.13 / libcublasLt.so.13 of the
// wheel tree: proof that the Jetson binary's CUDA dependencies link and load. With no driver or
// no device, cudaGetDeviceCount must fail with one of those two errors (not crash, not hang).
//   usage: phasekv_cuda_libraries CUDART_MAJOR CUBLASLT_MAJOR
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <sys/stat.h>

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s CUDART_MAJOR CUBLASLT_MAJOR\n", argv[0]);
    return 2;
  }
  const int want_rt = std::atoi(argv[1]), want_lt = std::atoi(argv[2]);
  int rt = 0;
  if (cudaRuntimeGetVersion(&rt) != cudaSuccess) {
    std::printf("cudaRuntimeGetVersion failed\n");
    return 1;
  }
  const size_t lt = cublasLtGetVersion();
  std::printf("libcudart %d.%d, libcublasLt %zu.%zu.%zu (CUDA headers %d)\n", rt / 1000, rt % 1000 / 10,
              lt / 10000, lt / 100 % 100, lt % 100, CUDART_VERSION);
  int ok = 1;
  if (rt / 1000 != want_rt) {
    std::printf("libcudart major %d, expected %d\n", rt / 1000, want_rt);
    ok = 0;
  }
  if (int(lt / 10000) != want_lt) {
    std::printf("libcublasLt major %zu, expected %d\n", lt / 10000, want_lt);
    ok = 0;
  }
  int n = -1;
  const cudaError_t e = cudaGetDeviceCount(&n);
  struct stat st;
  const bool has_gpu_node = stat("/dev/nvidiactl", &st) == 0 || stat("/dev/nvgpu", &st) == 0;
  std::printf("cudaGetDeviceCount: %s (%d), %d devices\n", cudaGetErrorName(e), int(e), e == cudaSuccess ? n : 0);
  if (!has_gpu_node && e != cudaErrorInsufficientDriver && e != cudaErrorNoDevice) {
    std::printf("without a GPU the runtime must report no driver or no device\n");
    ok = 0;
  }
  return ok ? 0 : 1;
}
