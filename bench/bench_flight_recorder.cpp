// What the flight recorder costs: the same 8-byte all-reduce (the cheapest
// collective the trainer makes) through a plain MpiControlComm and through a
// RecordingControlComm, in alternating rounds, plus the recorder alone.
// Run by scripts/bench_supervision.sh under mpirun -np 2.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "parallel/mpi_communicator.h"
#include "parallel/recording_communicator.h"

using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::vector<int> members(size);
  for (int i = 0; i < size; i++) members[i] = i;
  trainer::MpiControlComm plain(MPI_COMM_WORLD);
  trainer::FlightRecorder rec(rank);
  trainer::RecordingControlComm recorded(plain, rec, rec.add_group("world", members), members);
  const int calls = 20000, rounds = 7;
  std::vector<double> t_plain, t_rec;
  double x = 1;
  for (int r = 0; r < rounds; r++) {
    for (int which = 0; which < 2; which++) {
      trainer::ControlComm& c = which ? (trainer::ControlComm&)recorded : plain;
      c.barrier();
      const auto t0 = Clock::now();
      for (int i = 0; i < calls; i++) c.allreduce_sum(&x, 1);
      const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / calls;
      (which ? t_rec : t_plain).push_back(us);
    }
  }
  trainer::FlightRecorder alone(rank);
  const int g = alone.add_group("g", members);
  const auto t0 = Clock::now();
  for (int i = 0; i < 1000000; i++) alone.end(alone.begin(g, "allreduce_sum", 8, -1));
  const double ns = std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / 1000000;
  std::sort(t_plain.begin(), t_plain.end());
  std::sort(t_rec.begin(), t_rec.end());
  const double p = t_plain[rounds / 2], q = t_rec[rounds / 2];
  if (rank == 0)
    std::printf("8-byte all-reduce over %d ranks, median of %d rounds x %d calls: plain %.2f us, recorded %.2f us "
                "(ratio %.3f)\nrecorder alone (begin + end, no MPI): %.0f ns per call\n",
                size, rounds, calls, p, q, q / p, ns);
  MPI_Finalize();
}
