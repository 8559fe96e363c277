// NEON instantiation of the CPU kernels (aarch64: Jetson Orin / Thor CPUs).
#if defined(__aarch64__)
#include "kernels_impl.h"
#include "vec8_neon.h"

namespace phasekv {
namespace cpu {

namespace {
void dequant_reference(DType t, const void* src, float* out, int n) { dequantize_row(t, src, out, n); }
}  // namespace

extern const KernelTable kNeonKernels;  // external linkage (a namespace-scope const is internal otherwise)
const KernelTable kNeonKernels = {
    "neon",
    dequant_reference,
    impl::dot<Vec8Neon>,
    impl::matmul_rows<Vec8Neon, dequant_reference>,
    impl::axpy<Vec8Neon>,
};

}  // namespace cpu
}  // namespace phasekv
#endif
