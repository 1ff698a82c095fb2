#include "app/mpi_command.h"

#include <mpi.h>

#include <cstdio>

#include "runtime/errors.h"

namespace trainer {

int run_under_mpi(const std::function<int(int rank, int size)>& body) {
  int provided = 0;
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
  int rank = 0, size = 1, code = kExitOk;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  try {
    code = body(rank, size);
  } catch (const UserError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    if (size > 1) MPI_Abort(MPI_COMM_WORLD, e.exit_code);
    code = e.exit_code;
  }
  MPI_Finalize();
  return code;
}

}  // namespace trainer
