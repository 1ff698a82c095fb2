#pragma once
// Training a small model in a parallel layout under MPI and comparing what it
// computed with one process: the multi-rank equivalence tests' shared part
// (test_parallel.cpp: tensor, pipeline and data parallelism;
// test_context_parallel.cpp: context parallelism). A layout runs on groups
// of its size cut from a communicator (each group a copy); its losses and
// every gradient gathered to its global shape come back.
#include <mpi.h>

#include <map>
#include <string>
#include <vector>

#include "app/recipe.h"
#include "engine/rank_step.h"

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
  int zero_stage = 0;
  int steps = 5;
  int ranks() const { return tp * dp * pp * cp; }
};

std::string layout_name(const Layout& l);
Recipe recipe(const Layout& l);

struct Result {
  std::vector<double> losses;
  std::map<std::string, std::vector<float>> grads;  // global shapes
  double grad_norm = 0;
  CommCounters comm_tp, comm_dp, comm_cp;
  size_t params_per_rank = 0;
  MemoryStats memory;  // this rank's, after training
  int stage = 0;
};

// Gradient names and sizes of the one-process model: every test first runs
// its model in one process (MPI_COMM_SELF) with g_shapes cleared to fill it.
extern std::map<std::string, std::vector<float>> g_shapes;

// Runs a layout on groups of l.ranks() ranks of `world` (each group a copy).
Result run(const Layout& l, MPI_Comm world);

// fp32: losses within loss_rtol relative, the gradient norm and every
// gradient within 1e-5 relative (of the tensor's largest entry).
void expect_equivalent(const Result& got, const Result& ref, const std::string& what, double loss_rtol = 1e-5);
// The same losses, gradient norm and gradients to the bit.
void expect_same_bits(const Result& got, const Result& ref, const std::string& what);
// bf16 layouts against the one-process bf16 run: statistical bounds.
void expect_close_bf16(const Result& got, const Result& ref, const std::string& what);

}  // namespace trainer::testing
