// NCCL's bootstrap over MPI, which needs no GPU: rank 0's unique id reaches
// every rank of the group unchanged (under mpirun -np 2, with
// NCCL_SOCKET_IFNAME=lo so NCCL finds an interface in a container).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstring>
#include <vector>

#include "parallel/mpi_communicator.h"
#include "parallel/nccl_communicator.h"

using namespace trainer;

TEST(NcclBootstrap, EveryRankGetsRankZerosUniqueId) {
  MpiControlComm world(MPI_COMM_WORLD);
  const ncclUniqueId id = nccl_unique_id(world);
  const ncclUniqueId zero{};
  EXPECT_NE(0, std::memcmp(&id, &zero, sizeof id)) << "the id is empty";
  std::vector<char> all(sizeof id * world.size());
  world.allgather_bytes(&id, all.data(), sizeof id);
  for (int r = 1; r < world.size(); r++)
    EXPECT_EQ(0, std::memcmp(all.data(), all.data() + r * sizeof id, sizeof id)) << "rank " << r << " differs";
  // A second bootstrap makes a different id (one per group).
  const ncclUniqueId second = nccl_unique_id(world);
  EXPECT_NE(0, std::memcmp(&id, &second, sizeof id));
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) ::testing::TestEventListeners().Release(nullptr);
  int ok = RUN_ALL_TESTS() == 0, all = 0;
  MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Finalize();
  return all ? 0 : 1;
}
