#pragma once
// Training a small model in a parallel layout under MPI and comparing what it
// computed with one process: the multi-rank equivalence tests' shared part
// (test_parallel.cpp: tensor, pipeline and data parallelism;
// test_context_parallel.cpp: context parallelism). A layout runs on groups
// of its size cut from a communicator (each group a copy); its losses and
// every gradient gathered to its global shape come back.
#include <mpi.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "app/recipe.h"
#include "data/dataset.h"
#include "engine/rank_step.h"
#include "parallel/process_grid.h"
#include "runtime/cpu/cpu_backend.h"

namespace trainer::testing {

extern std::string g_data;  // the token shard every run reads (the test main's)

struct Layout {
  Arch arch;
  int tp, dp;
  bool sp;
  int pp = 1, virtual_stages = 1;
  RecomputeConfig recompute = {};
  DType precision = DType::F32;
  int cp = 1;
  CpComm cp_comm = CpComm::Ring;
  int zero_stage = 0;
  bool reshard = true;  // ZeRO-3's parallel.reshard_after_forward
  int prefetch = 1;     // ZeRO-3's parallel.zero_prefetch
  long persist = 0;     // ZeRO-3's parallel.zero_persist_below
  int steps = 5;
  int accum = 0;  // micro-batches per step and replica (micro_batch 1); 0: micro_batch 2 of a global batch of 8
  int n_layers = 4;
  MoeConfig moe{};  // experts > 0: Mixture-of-Experts MLPs
  int ep = 1;       // parallel.ep (of the dp x cp replicas)
  // Changes each chunk's initial weights (the fp32 master; null: none).
  std::function<void(Backend&, Transformer&)> init;
  float lr = 3e-3f;  // the peak (min_lr a tenth of it)
  double bucket_mb = 0;  // parallel.dp_bucket_mb (0: the default)

  int ranks() const { return tp * dp * pp * cp; }
};

std::string layout_name(const Layout& l);
Recipe recipe(const Layout& l);

struct Result {
  std::vector<double> losses;
  // A Mixture-of-Experts model's per step: the routers' losses, the
  // experts' selections (StepStats::moe_selections).
  std::vector<double> moe_aux, moe_z, moe_dropped;  // (dropped: the layers' shares summed)
  std::vector<std::vector<double>> moe_selections;
  std::map<std::string, std::vector<float>> grads;  // global shapes
  std::map<std::string, std::vector<float>> weights;  // the fp32 master weights after training, global shapes
  double grad_norm = 0;
  CommCounters comm_tp, comm_dp, comm_cp;  // the last step's
  size_t params_per_rank = 0;
  MemoryStats memory;  // this rank's, after training
  int stage = 0;
};

// Gradient names and sizes of the one-process model: every test first runs
// its model in one process (MPI_COMM_SELF) with g_shapes cleared to fill it.
extern std::map<std::string, std::vector<float>> g_shapes;

// A recipe's training set-up on one group of `world`: the ranks are cut into
// groups of the recipe's size (this rank's group gets a communicator of its
// own), and the group has its grid, a CPU backend and the token shard. Each
// rank_step() starts a fresh run (initial weights, data from the start).
class LayoutGroup {
 public:
  LayoutGroup(const Recipe& r, MPI_Comm world);
  std::unique_ptr<RankStep> rank_step() { return std::make_unique<RankStep>(be, groups_of(grid), r, Blend::single(ds)); }
  MPI_Comm comm() const { return comm_.c; }
  int index() const { return index_; }  // which group of `world` this rank is in

 private:
  struct SplitComm {  // declared first: freed after everything that uses it
    MPI_Comm c;
    ~SplitComm() { MPI_Comm_free(&c); }
  };
  static MPI_Comm split(MPI_Comm world, int size, int* index);
  int index_ = 0;
  SplitComm comm_;

 public:
  const Recipe r;
  ProcessGrid grid;
  CpuBackend be{1};
  TokenDataset ds;
};

// A step directory every rank of `world` knows: world rank 0's.
std::string shared_path(std::string path, MPI_Comm world);

// Runs a layout on groups of l.ranks() ranks of `world` (each group a copy).
Result run(const Layout& l, MPI_Comm world);
// A group's fp32 master weights now, every tensor in its global shape (the
// names g_shapes holds), on every rank of the group.
std::map<std::string, std::vector<float>> model_weights(LayoutGroup& g, RankStep& loop);

// fp32: losses within loss_rtol relative, the gradient norm and every
// gradient within 1e-5 relative (of the tensor's largest entry).
void expect_equivalent(const Result& got, const Result& ref, const std::string& what, double loss_rtol = 1e-5);
// The largest relative difference of the losses over all steps; of the
// weights after them, relative Frobenius norms of the differences: of the
// whole model, and of the tensor where it is largest (exact: GPT-2's key
// bias too, whose gradient is rounding noise).
struct TrainingGap {
  double loss = 0, model = 0, tensor = 0;
  std::string worst;  // that tensor
};
TrainingGap training_gap(const Result& got, const Result& ref, const std::string& what, bool exact);
// Training runs of 20 steps (ZeRO stages against ZeRO-0): the losses and
// every weight after them (Result::weights) the same to the bit (bits), or
// else (sums taken in another order) losses within 1e-6 relative, the
// model's weights within 1e-6 (relative norm of the difference) and its
// most affected tensor within 1e-5.
void expect_same_training(const Result& got, const Result& ref, const std::string& what, bool bits);
// The same losses, gradient norm and gradients to the bit.
void expect_same_bits(const Result& got, const Result& ref, const std::string& what);
// bf16 layouts against the one-process bf16 run: statistical bounds.
void expect_close_bf16(const Result& got, const Result& ref, const std::string& what);

}  // namespace trainer::testing
