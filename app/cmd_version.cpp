// `trainer --version`: what this binary is and what it was built with.
#include <cstdio>

#include "app/commands.h"
#include "app/recipe.h"
#include "git_commit.h"
#include "runtime/backend.h"
#include "runtime/cpu/blas_core.h"
#include "runtime/cpu/cpu_kernels.h"
#include "runtime/library_versions.h"
#include "runtime/version.h"

namespace trainer {

const char* trainer_git_commit() { return TRAINER_GIT_COMMIT; }

int cmd_version() {
  std::printf("trainer %s (git %s)\n", kTrainerVersion, trainer_git_commit());
  std::string backends;
  for (const std::string& b : compiled_backends()) backends += (backends.empty() ? "" : ", ") + b;
  std::printf("backends: %s\n", backends.c_str());
  const cpu::KernelLimits limits = cpu::kernel_limits();
  std::printf("cpu kernels: %s (this CPU runs %s%s; runtime.cpu_kernels picks one)\n",
              cpu::kernel_set_name(cpu::kernel_set()), cpu::kernel_sets_up_to(limits.cpu).c_str(),
              limits.cap < limits.cpu ? (std::string(", TRAINER_CPU_KERNELS caps it at ") + cpu::kernel_set_name(limits.cap)).c_str() : "");
  if (const std::string gpu = backend_library_versions(); !gpu.empty()) std::printf("gpu libraries: %s\n", gpu.c_str());
  std::printf("libraries: %s, %s, toml++ %s, %s, compiler GCC %d.%d.%d\n", mpi_library_version().c_str(),
              hdf5_library_version().c_str(), toml_library_version().c_str(), blas_library_version().c_str(),
              __GNUC__, __GNUC_MINOR__, __GNUC_PATCHLEVEL__);
  return 0;
}

}  // namespace trainer
