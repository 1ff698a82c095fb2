// `trainer --version`: what this binary is and what it was built with.
#include <hdf5.h>
#include <mpi.h>

#include <cstdio>

#include "app/commands.h"
#include "app/recipe.h"
#include "git_commit.h"
#include "runtime/backend.h"
#include "runtime/cpu/blas_core.h"
#include "runtime/version.h"

namespace trainer {

int cmd_version() {
  unsigned h5maj = 0, h5min = 0, h5rel = 0;
  H5get_libversion(&h5maj, &h5min, &h5rel);
  char mpi[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
  int len = 0;
  MPI_Get_library_version(mpi, &len);  // allowed before MPI_Init
  std::string mpi_line = mpi;
  mpi_line = mpi_line.substr(0, mpi_line.find_first_of(",\n"));
  std::printf("trainer %s (git %s)\n", kTrainerVersion, TRAINER_GIT_COMMIT);
  std::string backends;
  for (const std::string& b : compiled_backends()) backends += (backends.empty() ? "" : ", ") + b;
  std::printf("backends: %s\n", backends.c_str());
  if (const std::string gpu = backend_library_versions(); !gpu.empty()) std::printf("gpu libraries: %s\n", gpu.c_str());
  std::printf("libraries: %s, HDF5 %u.%u.%u, toml++ %s, %s, compiler GCC %d.%d.%d\n", mpi_line.c_str(), h5maj,
              h5min, h5rel, toml_library_version().c_str(), blas_library_version().c_str(), __GNUC__,
              __GNUC_MINOR__, __GNUC_PATCHLEVEL__);
  return 0;
}

}  // namespace trainer
