// The elementwise kernels built for avx2 (flags set in CMakeLists.txt).
#define TRAINER_KERNEL_ISA avx2
#include "runtime/cpu/cpu_kernels_impl.inc"
