// Linked into every test binary: TRAINER_CPU_KERNELS=avx2 (or generic) runs
// the binary's CPU kernels with that set, as it does for `trainer` (app/main.cpp),
// so that the whole suite can run narrower kernels than the machine's widest:
//   TRAINER_CPU_KERNELS=avx2 scripts/test.sh
#include <cstdio>
#include <cstdlib>
#include <exception>

#include "runtime/cpu/cpu_kernels.h"

namespace {
const bool applied = [] {
  const char* name = std::getenv("TRAINER_CPU_KERNELS");
  if (!name || !*name) return false;
  try {
    trainer::cpu::use_kernel_set(
        trainer::cpu::resolve_kernel_set(name, trainer::cpu::widest_kernel_set(), "TRAINER_CPU_KERNELS"));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    std::exit(2);
  }
  return true;
}();
}  // namespace
