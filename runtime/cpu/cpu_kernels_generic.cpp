// The elementwise kernels built for generic (flags set in CMakeLists.txt).
#define TRAINER_KERNEL_ISA generic
#include "runtime/cpu/cpu_kernels_impl.inc"
