// CUDA error checking and device discovery for the CUDA backend. Every CUDA runtime and
// cuBLASLt call goes through PKV_CUDA_CHECK, which turns a failure into a Status.
#pragma once

#include <string>

#include "status.h"

namespace phasekv {
namespace cuda {

// Returns the number of usable CUDA devices; 0 (with *why set) when there is no driver or
// no device, which is the normal state of a CI machine.
int device_count(std::string* why);

// Status for a cudaError_t value (as int, so this header needs no CUDA include).
Status cuda_status(int err, const char* expr, const char* file, int line);

}  // namespace cuda
}  // namespace phasekv

#define PKV_CUDA_CHECK(expr)                                                                  \
  do {                                                                                        \
    int pkv_err_ = static_cast<int>(expr);                                                    \
    if (pkv_err_ != 0) return ::phasekv::cuda::cuda_status(pkv_err_, #expr, __FILE__, __LINE__); \
  } while (0)
