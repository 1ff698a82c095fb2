// The elementwise kernels built for avx512 (flags set in CMakeLists.txt).
#define TRAINER_KERNEL_ISA avx512
#include "runtime/cpu/cpu_kernels_impl.inc"
