#pragma once
// The main() of the multi-rank GoogleTest binaries: MPI up, one token shard
// of pseudo-random tokens written by rank 0 and shared by path, one report
// (rank 0's), every rank's verdict combined, MPI down.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "data/token_shard.h"

namespace trainer::testing {

// tokens: count; vocab: ids drawn in [offset, offset + vocab) (vocab a power of two).
inline int run_mpi_tests(int argc, char** argv, int ranks, size_t tokens, uint32_t vocab,
                         uint32_t offset, std::string* shard_path) {
  MPI_Init(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size != ranks) {
    if (rank == 0) std::fprintf(stderr, "run under mpirun -np %d\n", ranks);
    MPI_Finalize();
    return 1;
  }
  char dir[256] = {0};
  if (rank == 0) {
    char tmpl[] = "/tmp/trainer_mpitest_XXXXXX";
    std::strcpy(dir, mkdtemp(tmpl));
    std::vector<uint32_t> t(tokens);
    uint64_t x = 1;
    const int shift = 64 - __builtin_ctz(vocab);
    for (auto& v : t) v = (uint32_t)((x = x * 6364136223846793005ull + 1442695040888963407ull) >> shift) + offset;
    write_token_shard(std::string(dir) + "/train.bin", t);
  }
  MPI_Bcast(dir, sizeof dir, MPI_CHAR, 0, MPI_COMM_WORLD);
  *shard_path = std::string(dir) + "/train.bin";
  if (rank != 0) {  // one report, from rank 0
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  const int rc = RUN_ALL_TESTS();
  int all = 0;
  MPI_Allreduce(&rc, &all, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) std::filesystem::remove_all(dir);
  MPI_Finalize();
  return all;
}

}  // namespace trainer::testing
