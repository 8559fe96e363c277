// NEON instantiation of the CPU kernels (aarch64: Jetson Orin / Thor CPUs).
#if defined(__aarch64__)
#include "kernels_impl.h"
#include "q8_impl.h"
#include "vec8_neon.h"

namespace phasekv {
namespace cpu {

extern const KernelTable kNeonKernels;  // external linkage (a namespace-scope const is internal otherwise)
const KernelTable kNeonKernels = {
    "neon",
    impl::dequant_reference,
    impl::dot<Vec8Neon>,
    impl::matmul_rows<Vec8Neon, impl::dequant_reference>,
    impl::axpy<Vec8Neon>,
    impl::dot_rows<Vec8Neon>,
    impl::axpy_rows<Vec8Neon>,
    q8::quantize_portable,
    q8::matmul_rows<q8::Portable>,  // a CPU without the dot-product extension
    q8::quantize_x2_portable,
    q8::matmul_rows<q8::PortableX2>,
    impl::softmax_q8<Vec8Neon>,
    impl::silu_mul_q8<Vec8Neon>,
    "portable",
};

}  // namespace cpu
}  // namespace phasekv
#endif
