// Data parallelism under mpirun -np 2: the dp = 2 loss curve and weights
// equal one process training the same global batch (which each rank also
// runs alone on MPI_COMM_SELF), within fp32 reduction rounding; and a rerun
// of either layout is bit-identical.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "app/recipe.h"
#include "engine/rank_step.h"
#include "tests/multirank/mpi_test_main.h"
#include "parallel/mpi_communicator.h"
#include "parallel/solo_communicator.h"
#include "parallel/staged_communicator.h"
#include "runtime/cpu/cpu_backend.h"

using namespace trainer;

namespace {

std::string g_data;  // shard path shared by all ranks

Recipe small_recipe(Arch arch, int dp) {
  Recipe r = default_recipe();
  r.model.arch = arch;
  r.model.vocab_size = 256;
  r.model.d_model = 32;
  r.model.n_layers = 2;
  r.model.n_heads = 4;
  r.model.n_kv_heads = arch == Arch::Llama ? 2 : 4;
  r.model.d_ff = 64;
  r.model.seq_len = 16;
  r.model.tie_embeddings = arch == Arch::GPT2;
  r.training.steps = 5;
  r.training.global_batch = 8;
  r.training.micro_batch = 2;
  r.training.grad_clip = 1.0f;
  r.lr.lr = 3e-3f;
  r.lr.min_lr = 3e-4f;
  r.lr.warmup_steps = 2;
  r.parallel.grid.dp = dp;
  r.data.prefetch = 2;
  r.run.seed = 42;
  return r;
}

struct TrainResult {
  std::vector<double> losses;
  std::vector<float> params;
};

TrainResult train(Arch arch, MPI_Comm comm) {
  int size = 1;
  MPI_Comm_size(comm, &size);
  const Recipe r = small_recipe(arch, size);
  CpuBackend be(1);
  MpiDataComm dp(comm);
  MpiControlComm dp_control(comm);
  TokenDataset ds({g_data}, r.model.seq_len, r.model.vocab_size);
  ParallelGroups groups;
  groups["dp"] = {&dp, &dp_control};
  RankStep loop(be, groups, r, Blend::single(ds));
  TrainResult out;
  for (int s = 0; s < r.training.steps; s++) out.losses.push_back(loop.step().loss);
  out.params = host_copy(be, loop.model().params().ref(), loop.model().num_params());
  return out;
}

void expect_same_curve(const TrainResult& a, const TrainResult& b, double rtol) {
  ASSERT_EQ(a.losses.size(), b.losses.size());
  for (size_t i = 0; i < a.losses.size(); i++)
    EXPECT_NEAR(a.losses[i], b.losses[i], rtol * std::fabs(b.losses[i])) << "step " << i + 1;
  double max_diff = 0;
  for (size_t i = 0; i < a.params.size(); i++)
    max_diff = std::max(max_diff, (double)std::fabs(a.params[i] - b.params[i]));
  EXPECT_LT(max_diff, 1e-5) << "largest weight difference after training";
}

class DataParallel : public ::testing::TestWithParam<Arch> {};

TEST_P(DataParallel, TwoRanksMatchOneProcess) {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  ASSERT_EQ(size, 2) << "run under mpirun -np 2";
  const TrainResult dp2 = train(GetParam(), MPI_COMM_WORLD);
  const TrainResult single = train(GetParam(), MPI_COMM_SELF);
  expect_same_curve(dp2, single, 1e-5);
  EXPECT_LT(dp2.losses.back(), dp2.losses.front()) << "the loss should fall";
}

TEST_P(DataParallel, RerunsAreBitIdentical) {
  for (MPI_Comm comm : {MPI_COMM_WORLD, MPI_COMM_SELF}) {
    const TrainResult a = train(GetParam(), comm), b = train(GetParam(), comm);
    EXPECT_EQ(a.losses, b.losses);
    EXPECT_EQ(0, std::memcmp(a.params.data(), b.params.data(), a.params.size() * sizeof(float)));
  }
}

INSTANTIATE_TEST_SUITE_P(Archs, DataParallel, ::testing::Values(Arch::GPT2, Arch::Llama),
                         [](const auto& info) { return std::string(arch_name(info.param)); });

// A group of one rank: its collectives are what MPI over MPI_COMM_SELF gives
// (the identity), and it has no peer to send to.
TEST(SoloDataComm, CollectivesOfOneRankMatchMpiOverSelf) {
  CpuBackend be(1);
  MpiDataComm self(MPI_COMM_SELF);
  SoloDataComm solo(be);
  const size_t n = 300;
  std::vector<float> h(n);
  for (size_t i = 0; i < n; i++) h[i] = (float)((i * 7) % 101) / 8.f;
  Buffer a = be.alloc(n, DType::F32, Mem::Comm), b = be.alloc(n, DType::F32, Mem::Comm);
  be.from_host(a.ref(), h.data(), n), be.from_host(b.ref(), h.data(), n);
  self.allreduce_sum(a.ref(), n), solo.allreduce_sum(b.ref(), n);
  EXPECT_EQ(0, std::memcmp(a.ref().p, b.ref().p, n * 4)) << "allreduce";
  Buffer r1 = be.alloc(n, DType::F32, Mem::Comm), r2 = be.alloc(n, DType::F32, Mem::Comm);
  self.reduce_scatter_sum(a.ref(), r1.ref(), n), solo.reduce_scatter_sum(a.ref(), r2.ref(), n);
  EXPECT_EQ(0, std::memcmp(r1.ref().p, r2.ref().p, n * 4)) << "reduce_scatter";
  self.allgather(a.ref(), r1.ref(), n), solo.allgather(b.ref(), r2.ref(), n);
  EXPECT_EQ(0, std::memcmp(r1.ref().p, r2.ref().p, n * 4)) << "allgather";
  self.wait(self.start_alltoall(a.ref(), r1.ref(), n)), solo.wait(solo.start_alltoall(b.ref(), r2.ref(), n));
  EXPECT_EQ(0, std::memcmp(r1.ref().p, r2.ref().p, n * 4)) << "alltoall";
  EXPECT_THROW(solo.isend(a.ref(), n, 1, 0), std::logic_error);
}

// The variable all-to-all (a Mixture-of-Experts layer's tokens to their
// experts): every row reaches its rank in order, each block where the counts
// put it, with counts of 0 (rank 1 sends none to rank 0; rank 0 none to
// itself); plain MPI, the staged path and, over one rank, Solo alike.
TEST(AllToAllV, RowsReachTheirRanksInOrder) {
  CpuBackend be(1);
  MpiDataComm plain(MPI_COMM_WORLD);
  StagedDataComm staged(std::make_unique<MpiDataComm>(MPI_COMM_WORLD), be);
  const int rank = plain.rank(), size = plain.size();
  ASSERT_EQ(size, 2);
  const size_t row = 5;
  const size_t counts[2][2] = {{0, 3}, {0, 4}};  // [from][to]
  // Row i of the block rank `from` sends to rank `to`, column c.
  const auto value = [](int from, int to, size_t i, size_t c) { return (float)(100 * from + 10 * to + i) + c / 8.f; };
  const size_t send[2] = {counts[rank][0], counts[rank][1]}, recv[2] = {counts[0][rank], counts[1][rank]};
  std::vector<float> h;
  for (int to = 0; to < size; to++)
    for (size_t i = 0; i < send[to]; i++)
      for (size_t c = 0; c < row; c++) h.push_back(value(rank, to, i, c));
  std::vector<float> want;
  for (int from = 0; from < size; from++)
    for (size_t i = 0; i < recv[from]; i++)
      for (size_t c = 0; c < row; c++) want.push_back(value(from, rank, i, c));
  Buffer in = be.alloc(std::max<size_t>(h.size(), 1), DType::F32, Mem::Comm);
  be.from_host(in.ref(), h.data(), h.size());
  for (DataComm* comm : {(DataComm*)&plain, (DataComm*)&staged}) {
    Buffer out = be.alloc(std::max<size_t>(want.size(), 1), DType::F32, Mem::Comm);
    comm->wait(comm->start_alltoallv(in.ref(), send, out.ref(), recv, row));
    const std::vector<float> got(out.ref().f32(), out.ref().f32() + want.size());
    EXPECT_EQ(got, want) << (comm == &plain ? "mpi" : "staged");
  }
  MpiDataComm self(MPI_COMM_SELF);
  SoloDataComm solo(be);
  const size_t mine[1] = {send[1]};
  Buffer o1 = be.alloc(send[1] * row, DType::F32, Mem::Comm), o2 = be.alloc(send[1] * row, DType::F32, Mem::Comm);
  self.wait(self.start_alltoallv(in.ref() + send[0] * row, mine, o1.ref(), mine, row));
  solo.wait(solo.start_alltoallv(in.ref() + send[0] * row, mine, o2.ref(), mine, row));
  EXPECT_EQ(0, std::memcmp(o1.ref().p, o2.ref().p, o1.bytes())) << "one rank";
}

// On GPUs: no NCCL communicator for a group of one; the pipeline group and
// ranks sharing a GPU take the staged MPI path.
TEST(SoloDataComm, GpuGroupsGetTheCommunicatorTheyNeed) {
  EXPECT_EQ(gpu_data_comm(1, false, false), GpuDataComm::Solo);
  EXPECT_EQ(gpu_data_comm(1, true, true), GpuDataComm::Solo);
  EXPECT_EQ(gpu_data_comm(4, false, false), GpuDataComm::Nccl);
  EXPECT_EQ(gpu_data_comm(2, true, false), GpuDataComm::StagedMpi);
  EXPECT_EQ(gpu_data_comm(2, false, true), GpuDataComm::StagedMpi);
}

// The staged data communicator (what GPU ranks sharing a GPU use) on the CPU
// backend: every operation through pinned-style staging gives what the plain
// MPI one gives, for fp32 and bf16, including send/receive by tag and the
// all-to-all (itself checked against the blocks each rank sent).
TEST(StagedDataComm, EveryOperationMatchesPlainMpi) {
  CpuBackend be(1);
  MpiDataComm plain(MPI_COMM_WORLD);
  StagedDataComm staged(std::make_unique<MpiDataComm>(MPI_COMM_WORLD), be);
  const int rank = plain.rank(), peer = 1 - rank;
  const size_t n = 1000;
  for (DType dt : {DType::F32, DType::BF16}) {
    std::vector<float> h(2 * n);
    for (size_t i = 0; i < h.size(); i++) h[i] = (float)((i * 7 + rank * 13) % 101) / 8.f;
    auto make = [&](size_t count) {
      Buffer b = be.alloc(count, dt, Mem::Comm);
      Buffer f = be.alloc(count, DType::F32, Mem::Comm);
      be.from_host(f.ref(), h.data(), count);
      be.convert(b.ref(), f.ref(), count);
      return b;
    };
    auto same = [&](const Buffer& a, const Buffer& b, const char* what) {
      ASSERT_EQ(0, std::memcmp(a.ref().p, b.ref().p, a.bytes())) << what << " " << dtype_name(dt);
    };
    Buffer a1 = make(n), a2 = make(n);
    plain.allreduce_sum(a1.ref(), n), staged.allreduce_sum(a2.ref(), n);
    same(a1, a2, "allreduce");
    Buffer in = make(2 * n), r1 = be.alloc(n, dt, Mem::Comm), r2 = be.alloc(n, dt, Mem::Comm);
    plain.reduce_scatter_sum(in.ref(), r1.ref(), n), staged.reduce_scatter_sum(in.ref(), r2.ref(), n);
    same(r1, r2, "reduce_scatter");
    Buffer g1 = be.alloc(2 * n, dt, Mem::Comm), g2 = be.alloc(2 * n, dt, Mem::Comm);
    plain.allgather(a1.ref(), g1.ref(), n), staged.allgather(a1.ref(), g2.ref(), n);
    same(g1, g2, "allgather");
    Buffer t1 = be.alloc(2 * n, dt, Mem::Comm), t2 = be.alloc(2 * n, dt, Mem::Comm);
    plain.wait(plain.start_alltoall(in.ref(), t1.ref(), n)), staged.wait(staged.start_alltoall(in.ref(), t2.ref(), n));
    same(t1, t2, "alltoall");
    if (dt == DType::F32)  // block j is rank j's block for this rank, by the formula the input was made with
      for (int j = 0; j < 2; j++)
        for (size_t i = 0; i < n; i++)
          ASSERT_EQ(t1.ref().f32()[j * n + i], (float)(((rank * n + i) * 7 + j * 13) % 101) / 8.f) << j << " " << i;
    // Two messages with different tags, received in the opposite order.
    Buffer s1 = make(n), s2 = make(2 * n), q1 = be.alloc(n, dt, Mem::Comm), q2 = be.alloc(2 * n, dt, Mem::Comm);
    const auto h2 = staged.irecv(q2.ref(), 2 * n, peer, 2);
    const auto h1 = staged.irecv(q1.ref(), n, peer, 1);
    const auto e1 = staged.isend(s1.ref(), n, peer, 1), e2 = staged.isend(s2.ref(), 2 * n, peer, 2);
    staged.wait(h1), staged.wait(h2), staged.wait(e1), staged.wait(e2);
    Buffer p1 = be.alloc(n, dt, Mem::Comm), p2 = be.alloc(2 * n, dt, Mem::Comm);
    const auto k1 = plain.irecv(p1.ref(), n, peer, 1), k2 = plain.irecv(p2.ref(), 2 * n, peer, 2);
    const auto f1 = plain.isend(s1.ref(), n, peer, 1), f2 = plain.isend(s2.ref(), 2 * n, peer, 2);
    plain.wait(k1), plain.wait(k2), plain.wait(f1), plain.wait(f2);
    same(p1, q1, "tag 1"), same(p2, q2, "tag 2");
  }
}

}  // namespace

int main(int argc, char** argv) {
  // 20000 tokens among 64 letters from 'a'
  return trainer::testing::run_mpi_tests(argc, argv, 2, 20000, 64, 'a', &g_data);
}
