#pragma once
#include <string>
// OpenBLAS picks its kernels at load time from the CPU id. Debian's 0.3.21
// does not know some newer CPUs (seen: Sapphire Rapids under a hypervisor)
// and falls back to its "Prescott" SSE3 kernels, about 8x slower than the
// AVX-512 ones the CPU runs. These functions detect that case; app/ then
// restarts the process with OPENBLAS_CORETYPE set (it is only read at load).

namespace trainer {

// A better kernel set for this CPU when OpenBLAS fell back to a generic one,
// else nullptr.
const char* blas_core_upgrade();

// "OpenBLAS 0.3.21 (DYNAMIC_ARCH ... core)", for `trainer --version`.
std::string blas_library_version();

}  // namespace trainer
