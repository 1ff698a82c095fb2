// Linked into every test binary: TRAINER_CPU_KERNELS=avx2 (or generic) caps
// the binary's CPU kernel sets there, as it does for `trainer` (app/main.cpp),
// so that the whole suite runs as on a CPU without the wider sets:
//   TRAINER_CPU_KERNELS=avx2 OPENBLAS_CORETYPE=Haswell scripts/test.sh
#include <cstdio>
#include <cstdlib>
#include <exception>

#include "runtime/cpu/cpu_kernels.h"

namespace {
const bool applied = [] {
  const char* name = std::getenv("TRAINER_CPU_KERNELS");
  if (!name || !*name) return false;
  try {
    namespace cpu = trainer::cpu;
    cpu::cap_kernel_sets(cpu::resolve_kernel_set(name, {cpu::kernel_limits().cpu}, "TRAINER_CPU_KERNELS"));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    std::exit(2);
  }
  return true;
}();
}  // namespace
