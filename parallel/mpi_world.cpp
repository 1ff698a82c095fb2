#include "parallel/mpi_world.h"

#include <mpi.h>

#include <cstdio>
#include <cstdlib>

#include "runtime/peer_probe.h"

namespace trainer {

int ranks_on_node() {
  MPI_Comm node;
  int n = 1;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  MPI_Comm_size(node, &n);
  MPI_Comm_free(&node);
  return n;
}

std::string broadcast_string(std::string s) {
  int n = (int)s.size();
  MPI_Bcast(&n, 1, MPI_INT, 0, MPI_COMM_WORLD);
  s.resize(n);
  MPI_Bcast(s.data(), n, MPI_CHAR, 0, MPI_COMM_WORLD);
  return s;
}

double broadcast_double(double v) {
  MPI_Bcast(&v, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  return v;
}

void broadcast_ints(std::vector<int>& v) {
  int n = (int)v.size();
  MPI_Bcast(&n, 1, MPI_INT, 0, MPI_COMM_WORLD);
  v.resize(n);
  MPI_Bcast(v.data(), n, MPI_INT, 0, MPI_COMM_WORLD);
}

void broadcast_strings(std::vector<std::string>& v) {
  int n = (int)v.size();
  MPI_Bcast(&n, 1, MPI_INT, 0, MPI_COMM_WORLD);
  v.resize(n);
  for (std::string& s : v) s = broadcast_string(s);
}

std::vector<std::string> allgather_lines(std::string mine, int width) {
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  mine.resize(width - 1, ' ');
  std::vector<char> all((size_t)size * width);
  MPI_Allgather(mine.c_str(), width, MPI_CHAR, all.data(), width, MPI_CHAR, MPI_COMM_WORLD);
  std::vector<std::string> lines;
  for (int r = 0; r < size; r++) lines.emplace_back(all.data() + (size_t)r * width);
  return lines;
}

void swap_probe_addresses(PeerProbe& probe) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  probe.set_peers(allgather_lines(probe.record(), 512), rank);
}

void abort_job(int code, const std::string& msg) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::fprintf(stderr, "error (rank %d): %s\n", rank, msg.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

}  // namespace trainer
