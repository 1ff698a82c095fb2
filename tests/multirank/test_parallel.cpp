// 3D parallelism under mpirun -np 8, for gpt2 and llama: tensor parallelism
// (tp in {2, 4}, with and without sequence parallelism, dp in {1, 2}) and
// pipeline parallelism ((dp, pp, tp) in {(1,2,1), (1,4,1), (2,2,2), (1,2,2)
// interleaved with 2 virtual stages}): the loss over 5 steps and every
// gradient gathered to its global shape agree with one process training the
// same recipe. Also: the bytes each TP collective moves match the analytic
// count, and the split tensors shrink as 1/tp.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>

#include "app/recipe.h"
#include "engine/layout.h"
#include "engine/rank_step.h"
#include "tests/multirank/layout_runs.h"
#include "tests/multirank/mpi_test_main.h"
#include "parallel/process_grid.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/cpu/cpu_kernels.h"

using namespace trainer;
using namespace trainer::testing;

namespace {

class Bf16Equivalence : public ::testing::TestWithParam<Arch> {};

TEST_P(Bf16Equivalence, EveryLayoutMatchesOneProcessBf16) {
  Layout one{GetParam(), 1, 1, false};
  one.precision = DType::BF16;
  g_shapes.clear();
  const Result ref = run(one, MPI_COMM_SELF);
  const Result fp32 = run({GetParam(), 1, 1, false}, MPI_COMM_SELF);
  for (size_t i = 0; i < ref.losses.size(); i++)  // bf16 is not fp32: it differs, a little
    EXPECT_NEAR(ref.losses[i], fp32.losses[i], 0.05 * fp32.losses[i]) << "bf16 vs fp32, step " << i + 1;
  // Every layout the fp32 tests below run: tensor (x data, +- sequence)
  // parallel, and the pipeline ones.
  std::vector<Layout> layouts;
  for (int tp : {2, 4})
    for (int dp : {1, 2})
      for (bool sp : {false, true}) layouts.push_back({GetParam(), tp, dp, sp});
  layouts.push_back({GetParam(), 1, 1, false, 2, 1});
  layouts.push_back({GetParam(), 1, 1, false, 4, 1});
  layouts.push_back({GetParam(), 2, 2, false, 2, 1});
  layouts.push_back({GetParam(), 2, 2, true, 2, 1});
  layouts.push_back({GetParam(), 2, 1, false, 2, 2});
  for (Layout& l : layouts) {
    l.precision = DType::BF16;
    expect_close_bf16(run(l, MPI_COMM_WORLD), ref, layout_name(l));
  }
}

INSTANTIATE_TEST_SUITE_P(Archs, Bf16Equivalence, ::testing::Values(Arch::GPT2, Arch::Llama),
                         [](const auto& info) { return std::string(arch_name(info.param)); });

class TensorParallelEquivalence : public ::testing::TestWithParam<Arch> {};

TEST_P(TensorParallelEquivalence, EveryLayoutMatchesOneProcess) {
  g_shapes.clear();
  const Result ref = run({GetParam(), 1, 1, false}, MPI_COMM_SELF);
  for (int tp : {2, 4})
    for (int dp : {1, 2})
      for (bool sp : {false, true}) {
        const Layout l{GetParam(), tp, dp, sp};
        expect_equivalent(run(l, MPI_COMM_WORLD), ref, layout_name(l));
      }
}

class PipelineParallelEquivalence : public ::testing::TestWithParam<Arch> {};

TEST_P(PipelineParallelEquivalence, EveryLayoutMatchesOneProcess) {
  g_shapes.clear();
  const Result ref = run({GetParam(), 1, 1, false}, MPI_COMM_SELF);
  const Layout layouts[] = {
      {GetParam(), 1, 1, false, 2, 1},  // (dp, pp, tp) = (1, 2, 1)
      {GetParam(), 1, 1, false, 4, 1},  // (1, 4, 1)
      {GetParam(), 2, 2, false, 2, 1},  // (2, 2, 2)
      {GetParam(), 2, 2, true, 2, 1},   // (2, 2, 2) with sequence parallelism
      {GetParam(), 2, 1, false, 2, 2},  // (1, 2, 2) interleaved, 2 virtual stages
  };
  for (const Layout& l : layouts) expect_equivalent(run(l, MPI_COMM_WORLD), ref, layout_name(l));
}

// ZeRO-3 in the largest layout here: tp 2 x pp 2 x dp 2, the gathered
// weights dropped after each forward or kept for the step, trains 20 steps
// as the same layout without it: losses and weights (gathered from their
// owners) to the bit with one micro-batch a step (the same sums), within
// 1e-6 with four (each micro-batch's gradient reduced over dp first).
// (cp 2 x dp 2 and the smaller layouts: tests/multirank/test_zero.cpp.)
class ZeroThreeEquivalence : public ::testing::TestWithParam<Arch> {};
TEST_P(ZeroThreeEquivalence, TensorPipelineDataEqualsItselfWithoutIt) {
  g_shapes.clear();
  run({GetParam(), 1, 1, false}, MPI_COMM_SELF);
  for (int accum : {1, 4}) {
    Layout l{GetParam(), 2, 2, true, 2, 1};
    l.steps = 20, l.accum = accum;
    const Result ref = run(l, MPI_COMM_WORLD);
    l.zero_stage = 3;
    for (bool reshard : {true, false}) {
      l.reshard = reshard;
      expect_same_training(run(l, MPI_COMM_WORLD), ref, layout_name(l), accum == 1);
    }
  }
}
INSTANTIATE_TEST_SUITE_P(Archs, ZeroThreeEquivalence, ::testing::Values(Arch::GPT2, Arch::Llama),
                         [](const auto& info) { return std::string(arch_name(info.param)); });

// Recomputation reruns the same ops on the same inputs: losses and every
// gradient must be equal to the bit, in one process and in pipelined and 3D
// layouts (several micro-batches in flight, sequence-parallel collectives).
class RecomputeBitIdentical : public ::testing::TestWithParam<Arch> {};

TEST_P(RecomputeBitIdentical, SelectiveAndFullEqualNone) {
  const Layout bf16_one = {GetParam(), 1, 1, false, 1, 1, {}, DType::BF16};
  const Layout layouts[] = {
      {GetParam(), 1, 1, false, 1, 1},  // one process
      {GetParam(), 1, 1, false, 2, 1},  // pp = 2, 1F1B
      {GetParam(), 2, 2, true, 2, 1},   // 2 x 2 x 2, sequence parallel
      {GetParam(), 2, 1, false, 2, 2},  // (1, 2, 2) interleaved, 2 virtual stages
      bf16_one,                         // bf16: one process
      {GetParam(), 2, 2, true, 2, 1, {}, DType::BF16},  // bf16: 2 x 2 x 2, sequence parallel
  };
  g_shapes.clear();
  run(layouts[0], MPI_COMM_SELF);  // the one-process model defines the gradient names
  for (Layout l : layouts) {
    const Result none = run(l, l.ranks() == 1 ? MPI_COMM_SELF : MPI_COMM_WORLD);
    for (RecomputeConfig rc : {RecomputeConfig{RecomputeMode::Selective, -1},
                               RecomputeConfig{RecomputeMode::Full, -1},
                               RecomputeConfig{RecomputeMode::Full, 1}}) {
      l.recompute = rc;
      const Result got = run(l, l.ranks() == 1 ? MPI_COMM_SELF : MPI_COMM_WORLD);
      expect_same_bits(got, none, layout_name(l) + (rc.layers > 0 ? "_layers" + std::to_string(rc.layers) : ""));
    }
  }
}

// `trainer plan`'s prediction (model/memory_plan.h, formulas from the layer
// definitions) against the activation memory each rank measured, for every
// recompute mode and several layouts.
TEST(MemoryPlan, PredictsMeasuredActivationPeakWithin10Percent) {
  int wrank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
  for (Arch arch : {Arch::GPT2, Arch::Llama}) {
    const Layout layouts[] = {{arch, 1, 1, false, 1, 1}, {arch, 1, 1, false, 2, 1}, {arch, 2, 2, true, 2, 1},
                              {arch, 1, 1, false, 1, 1, {}, DType::BF16}, {arch, 2, 2, true, 2, 1, {}, DType::BF16}};
    g_shapes.clear();
    run(layouts[0], MPI_COMM_SELF);
    for (Layout l : layouts)
      for (RecomputeMode m : {RecomputeMode::None, RecomputeMode::Selective, RecomputeMode::Full}) {
        l.recompute = {m, -1};
        const Result res = run(l, l.ranks() == 1 ? MPI_COMM_SELF : MPI_COMM_WORLD);
        const Recipe r = recipe(l);
        const MemoryPlan plan = plan_memory(r.model, rank_layout(r, res.stage), l.recompute);
        const double want = plan.bytes[(int)Mem::Activations];
        const double got = (double)res.memory.peak[(int)Mem::Activations];
        EXPECT_NEAR(got, want, 0.10 * want) << layout_name(l) << " " << recompute_name(m) << " stage " << res.stage;
        if (wrank == 0)
          std::printf("  %-22s %-9s activations measured %8.1f KB, planned %8.1f KB (%+.1f%%)\n",
                      layout_name(l).c_str(), recompute_name(m), got / 1024, want / 1024, 100 * (got - want) / want);
      }
  }
}

INSTANTIATE_TEST_SUITE_P(Archs, RecomputeBitIdentical, ::testing::Values(Arch::GPT2, Arch::Llama),
                         [](const auto& info) { return std::string(arch_name(info.param)); });

// The CPU kernel sets (runtime.cpu_kernels) change speed, not results: a few
// training steps under every set this CPU runs give the same losses and
// gradients to the bit, in one process (fp32 and bf16) and in 2 x 2 x 2.
class KernelSetsBitIdentical : public ::testing::TestWithParam<Arch> {};

TEST_P(KernelSetsBitIdentical, EverySetTrainsTheSameBits) {
  const Layout layouts[] = {
      {GetParam(), 1, 1, false, 1, 1},
      {GetParam(), 1, 1, false, 1, 1, {}, DType::BF16},
      {GetParam(), 2, 2, true, 2, 1},
  };
  g_shapes.clear();
  run(layouts[0], MPI_COMM_SELF);  // the one-process model defines the gradient names
  struct Restore {
    cpu::KernelSet was = cpu::kernel_set();
    ~Restore() { cpu::use_kernel_set(was); }
  } restore;
  int sets = 0;
  for (const Layout& l : layouts) {
    MPI_Comm comm = l.ranks() == 1 ? MPI_COMM_SELF : MPI_COMM_WORLD;
    cpu::use_kernel_set(cpu::KernelSet::Generic);
    const Result generic = run(l, comm);
    sets = 1;
    for (cpu::KernelSet s : {cpu::KernelSet::Avx2, cpu::KernelSet::Avx512}) {
      if (s > cpu::kernel_limits().widest()) continue;
      cpu::use_kernel_set(s);
      const Result got = run(l, comm);
      sets++;
      const std::string what = layout_name(l) + " " + cpu::kernel_set_name(s) + " against generic";
      EXPECT_EQ(got.losses, generic.losses) << what;
      EXPECT_EQ(got.grad_norm, generic.grad_norm) << what;
      for (const auto& [name, g] : generic.grads)
        EXPECT_EQ(0, std::memcmp(g.data(), got.grads.at(name).data(), g.size() * sizeof(float)))
            << what << ": gradient " << name;
    }
  }
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0) std::printf("  %d kernel sets trained the same bits (this process runs %s)\n", sets,
                           cpu::kernel_sets_up_to(cpu::kernel_limits().widest()).c_str());
}

INSTANTIATE_TEST_SUITE_P(Archs, KernelSetsBitIdentical, ::testing::Values(Arch::GPT2, Arch::Llama),
                         [](const auto& info) { return std::string(arch_name(info.param)); });

INSTANTIATE_TEST_SUITE_P(Archs, PipelineParallelEquivalence,
                         ::testing::Values(Arch::GPT2, Arch::Llama),
                         [](const auto& info) { return std::string(arch_name(info.param)); });

INSTANTIATE_TEST_SUITE_P(Archs, TensorParallelEquivalence,
                         ::testing::Values(Arch::GPT2, Arch::Llama),
                         [](const auto& info) { return std::string(arch_name(info.param)); });

// Bytes per step against the analytic count. M = micro_batch * seq_len token
// rows, d = d_model, L layers, p = tp, a = accumulation steps; a ring moves
// 2(p-1)/p of an all-reduce's buffer and (p-1)/p of an all-gather's or
// reduce-scatter's full buffer per rank.
TEST(TensorParallelComm, BytesMatchTheAnalyticCount) {
  g_shapes.clear();
  run({Arch::GPT2, 1, 1, false}, MPI_COMM_SELF);  // gradient names of this model
  for (DType dt : {DType::F32, DType::BF16})
  for (bool sp : {false, true}) {
    Layout l{Arch::GPT2, 2, 2, sp};
    l.precision = dt;
    const Recipe r = recipe(l);
    const Result res = run(l, MPI_COMM_WORLD);
    const double p = l.tp, M = r.training.micro_batch * r.model.seq_len, d = r.model.d_model;
    const double L = r.model.n_layers, a = r.accum_steps();
    const double es = dtype_size(dt);  // activations and the gradient traffic: the compute type
    const double act = M * d * es;  // one activation tensor [b*s, h] in bytes
    const double ar = 2 * (p - 1) / p, ag = (p - 1) / p;
    const double ce = 3 * M * 4;  // vocab-parallel loss: max, sum-exp, target logit (fp32)
    // Host values (the gradient norm's partial sums, the loss, the data wait)
    // go over the control communicator, which is not counted here.
    if (!sp) {
      // all-reduce: embedding + 2 per layer forward, LM head + 2 per layer backward
      EXPECT_DOUBLE_EQ(res.comm_tp.bytes[CommCounters::AllReduce],
                       a * ((2 + 4 * L) * act + ce) * ar) << "tp all-reduce " << layout_name(l);
      EXPECT_EQ(res.comm_tp.bytes[CommCounters::AllGather], 0);
    } else {
      double seq_partial = 0;  // replicated tensors whose gradients are partial
      for (const ParamInfo& pi : build_params(r.model, 2, 0).reg.all())
        if (pi.seq_partial_grad) seq_partial += pi.numel * 4.0;
      EXPECT_DOUBLE_EQ(res.comm_tp.bytes[CommCounters::AllGather], a * (2 + 4 * L) * act * ag);
      EXPECT_DOUBLE_EQ(res.comm_tp.bytes[CommCounters::ReduceScatter], a * (2 + 4 * L) * act * ag);
      // the partial gradients of replicated tensors stay fp32
      EXPECT_DOUBLE_EQ(res.comm_tp.bytes[CommCounters::AllReduce], (a * ce + seq_partial) * ar) << layout_name(l);
    }
    // DP: the gradient of this rank's shard, in the compute type.
    const double shard = build_params(r.model, 2, 0).reg.total() * es;
    EXPECT_DOUBLE_EQ(res.comm_dp.bytes[CommCounters::AllReduce], shard * (2.0 * (l.dp - 1) / l.dp)) << layout_name(l);
  }
}

// A training step waits for its backend twice, however many micro-batches:
// one read of loss and gradient norm together, one synchronisation at its
// end (the loss stays on the device between micro-batches). 8 micro-batches
// per rank, in one process and in dp 2 x pp 2 x tp 2; before, every
// micro-batch's loss was read on its own (10 waits in one process).
TEST(HostSyncs, TwoPerTrainingStepInEveryLayout) {
  for (const Layout& l : {Layout{Arch::Llama, 1, 1, false}, Layout{Arch::GPT2, 2, 2, true, 2}}) {
    Recipe r = recipe(l);
    r.training.global_batch = 8 * r.training.micro_batch * l.dp;  // 8 micro-batches per rank
    r.training.steps = 3;
    LayoutGroup g(r, MPI_COMM_WORLD);
    const std::unique_ptr<RankStep> loop = g.rank_step();
    for (int s = 0; s < r.training.steps; s++) {
      const uint64_t before = g.be.host_syncs();
      const StepStats st = loop->step();  // on every rank of the layout
      EXPECT_EQ(st.host_syncs, 2u) << layout_name(l) << " step " << s + 1;
      EXPECT_EQ(g.be.host_syncs() - before, st.host_syncs) << layout_name(l) << " step " << s + 1;
      EXPECT_TRUE(std::isfinite(st.loss) && st.loss > 0) << st.loss;
    }
  }
}

// Stages with neither the embedding nor the head read no data and build no
// loader; every stage still knows where the data stream is (what a
// checkpoint saves and a rollback counts from): before, a middle stage's
// unread loader stayed at the start.
TEST(DataCursor, EveryPipelineStageFollowsTheSteps) {
  Recipe r = recipe(Layout{Arch::Llama, 1, 1, false, 4});
  r.training.steps = 3;
  LayoutGroup g(r, MPI_COMM_WORLD);
  const std::unique_ptr<RankStep> loop = g.rank_step();
  for (int s = 0; s < r.training.steps; s++) loop->step();
  EXPECT_EQ(loop->data_cursor(), (uint64_t)r.training.steps * r.training.global_batch)
      << "stage " << g.grid.coords().pp;
}

TEST(TensorParallelMemory, SplitTensorsShrinkAsOneOverTp) {
  ModelConfig c = recipe({Arch::Llama, 1, 1, false}).model;
  c.d_model = 256, c.n_heads = 8, c.d_ff = 1024, c.vocab_size = 1024, c.n_layers = 4;
  const ModelParams whole = build_params(c, 1, 0);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  for (int tp : {2, 4}) {
    const ModelParams piece = build_params(c, tp, 0);
    size_t split = 0, split_global = 0, replicated = 0;
    for (const ParamInfo& p : piece.reg.all()) {
      size_t global = 1;
      for (int x : p.global_shape) global *= x;
      if (p.sharding == Sharding::Replicated) replicated += p.numel;
      else split += p.numel, split_global += global;
    }
    EXPECT_EQ(split * tp, split_global);
    EXPECT_EQ(split_global + replicated, whole.reg.total());
    if (rank == 0)
      std::printf("  llama d=256 L=4: tp=%d holds %zu of %zu parameters per rank (%.3f; split part 1/%d, %zu replicated)\n",
                  tp, piece.reg.total(), whole.reg.total(), (double)piece.reg.total() / whole.reg.total(), tp, replicated);
  }
}

}  // namespace

int main(int argc, char** argv) {
  // 30000 tokens spread over the whole 256-byte vocabulary
  return trainer::testing::run_mpi_tests(argc, argv, 8, 30000, 256, 0, &g_data);
}
