#pragma once
// A subcommand that runs under mpirun (calibrate, smoke): MPI up, the
// command's body on every rank, MPI down. A UserError on one rank is printed
// there and ends the whole job with its exit code (the other ranks may be
// waiting for that one in a collective).
#include <mpi.h>

#include <functional>

namespace trainer {

// Set-up that may fail on some ranks only, run on every rank of `world`:
// 0 when it worked everywhere, else the lowest failing rank's exit code on
// every rank, its message printed once (by that rank). A stop signal that
// came meanwhile ends it with the requeue code (75). fn must not start a
// collective after anything in it that can fail on one rank alone.
int agree_on_failure(MPI_Comm world, const std::function<void()>& fn);

int run_under_mpi(const std::function<int(int rank, int size)>& body);

}  // namespace trainer
