#include "runtime/cpu/blas_core.h"

#include <cblas.h>

#include "runtime/cpu/cpu_kernels.h"

#include <cstring>

namespace trainer {

const char* blas_core_upgrade() {
  const char* core = openblas_get_corename();
  const bool generic = !core || !std::strcmp(core, "Prescott") || !std::strcmp(core, "Core2") ||
                       !std::strcmp(core, "Nehalem") || !std::strcmp(core, "Sandybridge") ||
                       !std::strcmp(core, "Unknown");
  if (!generic) return nullptr;
  switch (cpu::kernel_limits().cpu) {  // what the CPU runs, whatever TRAINER_CPU_KERNELS says
    case cpu::KernelSet::Avx512: return "SkylakeX";
    case cpu::KernelSet::Avx2: return "Haswell";
    default: return nullptr;
  }
}

std::string blas_library_version() {
  std::string c = openblas_get_config();  // "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY Haswell MAX_THREADS=64"
  while (!c.empty() && c.back() == ' ') c.pop_back();
  return c + (openblas_get_corename() ? std::string(" (running ") + openblas_get_corename() + " kernels)" : "");
}

}  // namespace trainer
