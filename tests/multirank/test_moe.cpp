// Mixture-of-Experts models (recipe section [moe]; model/layer/moe_mlp.cpp)
// trained through the engine on one process: recomputation (selective and
// full) gives the run without it bit for bit, since a micro-batch's routing
// is decided once and kept. (Training on text through the binary:
// tests/e2e/moe_check.py.)
#include <gtest/gtest.h>
#include <mpi.h>

#include "tests/multirank/layout_runs.h"
#include "tests/multirank/mpi_test_main.h"

using namespace trainer;
using namespace trainer::testing;

namespace {

MoeConfig experts(int n, int k, bool sigmoid = false) {
  MoeConfig m;
  m.experts = n, m.top_k = k, m.expert_ffn = 48;
  m.score = sigmoid ? MoeConfig::Score::Sigmoid : MoeConfig::Score::Softmax;
  return m;
}

TEST(Moe, RecomputationGivesTheSameBits) {
  for (bool sigmoid : {false, true}) {
    Layout l{Arch::Llama, 1, 1, false};
    l.moe = experts(4, 2, sigmoid);
    g_shapes.clear();
    const Result none = run(l, MPI_COMM_WORLD);
    for (RecomputeMode mode : {RecomputeMode::Selective, RecomputeMode::Full}) {
      l.recompute = {mode, -1};
      expect_same_bits(run(l, MPI_COMM_WORLD), none, layout_name(l));
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  return trainer::testing::run_mpi_tests(argc, argv, 1, 30000, 256, 0, &g_data);
}
