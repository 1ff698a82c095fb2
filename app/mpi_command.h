#pragma once
// A subcommand that runs under mpirun (calibrate, smoke): MPI up, the
// command's body on every rank, MPI down. A UserError on one rank is printed
// there and ends the whole job with its exit code (the other ranks may be
// waiting for that one in a collective).
#include <functional>

namespace trainer {

int run_under_mpi(const std::function<int(int rank, int size)>& body);

}  // namespace trainer
