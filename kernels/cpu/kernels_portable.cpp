// Portable instantiation of the CPU kernels (any C++17 compiler and CPU).
#include "kernels_impl.h"
#include "q8_impl.h"
#include "vec8_portable.h"

namespace phasekv {
namespace cpu {

extern const KernelTable kPortableKernels;  // external linkage (a namespace-scope const is internal otherwise)
const KernelTable kPortableKernels = {
    "portable",
    impl::dequant_reference,
    impl::dot<Vec8Portable>,
    impl::matmul_rows<Vec8Portable, impl::dequant_reference>,
    impl::axpy<Vec8Portable>,
    impl::dot_rows<Vec8Portable>,
    impl::axpy_rows<Vec8Portable>,
    q8::quantize_portable,
    q8::matmul_rows<q8::Portable>,
    q8::quantize_x2_portable,
    q8::matmul_rows<q8::PortableX2>,
    impl::softmax_q8<Vec8Portable>,
    impl::silu_mul_q8<Vec8Portable>,
    "portable",
};

}  // namespace cpu
}  // namespace phasekv
