#include "parallel/mpi_command.h"

#include <mpi.h>

#include <climits>
#include <cstdio>
#include <cstring>
#include <string>

#include "runtime/errors.h"
#include "runtime/stop_signal.h"

namespace trainer {

// Runs fn on every rank. If any rank fails, the lowest failing rank prints its
// message once and every rank returns that rank's exit code, so a recipe or
// data error seen by all ranks is reported once, not N times. A stop signal
// (SIGTERM, SIGUSR1, Ctrl-C) that came during fn is a failure too: set-up
// has trained nothing, so there is nothing to save, and the job ends with
// the requeue code at once instead of after the rest of set-up.
int agree_on_failure(MPI_Comm world, const std::function<void()>& fn) {
  int rank = 0, code = 0;
  std::string msg;
  MPI_Comm_rank(world, &rank);
  try {
    fn();
  } catch (const UserError& e) {
    code = e.exit_code, msg = e.what();
  } catch (const std::exception& e) {
    code = kExitInternal, msg = std::string("internal error: ") + e.what();
  }
  if (const int sig = stop_signal(); !code && sig)
    code = kExitPreempted, msg = std::string(strsignal(sig)) + " received during set-up (rank " +
                                 std::to_string(rank) + "): nothing trained, nothing to save; exiting with code " +
                                 std::to_string(kExitPreempted) + " (requeue me). The same command resumes from "
                                 "the newest checkpoint";
  int failed = code ? rank : INT_MAX, first = INT_MAX;
  MPI_Allreduce(&failed, &first, 1, MPI_INT, MPI_MIN, world);
  if (first == INT_MAX) return 0;
  MPI_Bcast(&code, 1, MPI_INT, first, world);
  if (rank == first) std::fprintf(stderr, "%s: %s\n", code == kExitPreempted ? "stopped" : "error", msg.c_str());
  return code;
}

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
