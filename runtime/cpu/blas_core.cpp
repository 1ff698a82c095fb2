#include "runtime/cpu/blas_core.h"

#include <cblas.h>

#include <cstring>

namespace trainer {

const char* blas_core_upgrade() {
  const char* core = openblas_get_corename();
  const bool generic = !core || !std::strcmp(core, "Prescott") || !std::strcmp(core, "Core2") ||
                       !std::strcmp(core, "Nehalem") || !std::strcmp(core, "Sandybridge") ||
                       !std::strcmp(core, "Unknown");
  if (!generic) return nullptr;
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl"))
    return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
  return nullptr;
}

std::string blas_library_version() {
  std::string c = openblas_get_config();  // "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY Haswell MAX_THREADS=64"
  while (!c.empty() && c.back() == ' ') c.pop_back();
  return c + (openblas_get_corename() ? std::string(" (running ") + openblas_get_corename() + " kernels)" : "");
}

}  // namespace trainer
