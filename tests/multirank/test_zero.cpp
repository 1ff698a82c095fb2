// ZeRO under mpirun -np 4 (parallel.zero_stage; engine/grad_reduce.h,
// engine/unit_shards.h): every stage trains as ZeRO-0 does in the same
// layout, for GPT-2 (tied embeddings) and Llama (grouped-query attention),
// at dp 1, 2 and 4 with 1 and 4 micro-batches per step: the losses of 20
// steps and every weight after them (gathered from their owners) equal,
// to the bit where the sums are taken in the same order, else within 1e-6
// relative; the communication each stage does per step, counted by the
// recording communicator, is its formula's; each stage's memory is the
// plan's; and ZeRO-3's prefetch depth changes only the windows that take turns.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "app/recipe.h"
#include "engine/layout.h"
#include "model/adamw.h"
#include "model/memory_plan.h"
#include "tests/multirank/layout_runs.h"
#include "tests/multirank/mpi_test_main.h"

using namespace trainer;
using namespace trainer::testing;

namespace {

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

class ZeroEquivalence : public ::testing::TestWithParam<Arch> {};

// Which sums keep ZeRO-0's order: with two weight replicas (dp x cp) a sum is one addition
// (commutative, so any algorithm gives the same bits); ZeRO-1 sums the same
// step gradients as ZeRO-0, only cut differently; ZeRO-2 sums each
// micro-batch over the replicas and then the micro-batches (ZeRO-0: the
// other way round), so with several micro-batches it rounds differently.
bool same_order(int replicas, int zero, int accum) { return replicas <= 2 && (zero < 2 || accum == 1); }

TEST_P(ZeroEquivalence, EveryStageTrainsAsZeroZero) {
  g_shapes.clear();
  run({GetParam(), 1, 1, false}, MPI_COMM_SELF);  // the one-process model defines the tensor names
  for (int accum : {1, 4})
    for (int dp : {1, 2, 4}) {
      Layout l{GetParam(), 1, dp, false};
      l.steps = 20, l.accum = accum;
      const MPI_Comm comm = dp == 1 ? MPI_COMM_SELF : MPI_COMM_WORLD;
      const Result ref = run(l, comm);
      for (int zero : {1, 2, 3}) {
        if (dp == 1 && zero < 3) continue;  // one replica: every stage is ZeRO-3 with nothing to cut
        l.zero_stage = zero;
        expect_same_training(run(l, comm), ref, layout_name(l), same_order(dp, zero, accum));
      }
    }
}

// ZeRO-2 and ZeRO-3 in the layouts four ranks make with two replicas:
// pipeline (1F1B, interleaved; ZeRO-3 also keeping the gathered weights for
// the step), tensor with sequence parallelism, context parallelism; bf16
// (gathering bf16 copies of the fp32 master slices); and full recomputation
// still bit-identical to none under them.
TEST_P(ZeroEquivalence, ZeroTwoAndThreeInEveryLayout) {
  g_shapes.clear();
  run({GetParam(), 1, 1, false}, MPI_COMM_SELF);
  const Arch a = GetParam();
  Layout cp{a, 1, 2, false};
  cp.cp = 2;
  std::vector<Layout> layouts = {{a, 1, 2, false, 2, 1}, {a, 1, 2, false, 2, 2}, {a, 2, 2, true}, cp};
  for (Layout l : layouts)
    for (int accum : {1, 4}) {
      if (l.virtual_stages > 1 && accum % l.pp) continue;  // the interleaved schedule needs whole rounds
      l.steps = 6, l.accum = accum, l.zero_stage = 0;
      const Result ref = run(l, MPI_COMM_WORLD);
      for (int zero : {2, 3})
        for (bool reshard : {true, false}) {
          if (!reshard && (zero < 3 || l.pp == 1)) continue;
          l.zero_stage = zero, l.reshard = reshard;
          expect_same_training(run(l, MPI_COMM_WORLD), ref, layout_name(l), same_order(l.dp * l.cp, zero, accum));
        }
      l.reshard = true;
    }
  // bf16: the same bf16 gradients on the wire and bf16 weights gathered
  // (one micro-batch: summed as ZeRO-0 sums them).
  Layout bf16{a, 1, 2, false};
  bf16.precision = DType::BF16, bf16.steps = 6, bf16.accum = 1;
  const Result ref = run(bf16, MPI_COMM_WORLD);
  for (int zero : {2, 3}) {
    bf16.zero_stage = zero;
    expect_same_training(run(bf16, MPI_COMM_WORLD), ref, layout_name(bf16), true);
  }
  // Recomputation (selective and full) reruns the same products on the
  // same gathered weights.
  for (int zero : {2, 3}) {
    Layout rc{a, 1, 2, false, 2, 1};
    rc.steps = 5, rc.accum = 4, rc.zero_stage = zero;
    const Result none = run(rc, MPI_COMM_WORLD);
    for (RecomputeMode mode : {RecomputeMode::Selective, RecomputeMode::Full}) {
      rc.recompute = {mode, -1};
      expect_same_bits(run(rc, MPI_COMM_WORLD), none, layout_name(rc));
    }
  }
}

// How often full sharding moves a unit a step: a tied embedding's units
// (summed over both ends of the pass and the pipeline first) are reduced
// and gathered once; the others are reduced every micro-batch and, under
// ZeRO-3 dropping gathered weights after the forward, gathered for every
// pass that reads them: each layer for both, an untied embedding for its
// forward only (its backward reads token ids), an untied head once (it
// stays in its window from its forward to its backward, which follows at
// once here); ZeRO-2 and kept weights: gathered once.
struct UnitTraffic {
  int reduced, gathered;
};
UnitTraffic unit_traffic(const ParamUnits& units, int u, const Layout& l) {
  const bool tied_unit = units.tied && (u == units.embed || u == units.head);
  if (tied_unit) return {1, 1};
  const int passes = u == units.embed || u == units.head ? 1 : 2;
  return {l.accum, l.zero_stage == 3 && l.reshard ? passes * l.accum : 1};
}

// What ZeRO-2 and ZeRO-3 move over the weight replicas in a step, counted
// by the recording communicator, each collective (dp - 1) padded slices of
// a unit, as often as unit_traffic says; Llama (untied) and GPT-2 (tied).
TEST(ZeroStages, CommunicationIsTheFormula) {
  for (Arch a : {Arch::Llama, Arch::GPT2}) {
    g_shapes.clear();
    run({a, 1, 1, false}, MPI_COMM_SELF);
    for (int zero : {2, 3})
      for (bool reshard : {true, false}) {
        if (zero == 2 && !reshard) continue;
        Layout l{a, 1, 4, false};
        l.steps = 2, l.accum = 4, l.zero_stage = zero, l.reshard = reshard;
        const Result got = run(l, MPI_COMM_WORLD);
        const ParamUnits units = param_units(build_params(recipe(l).model));
        const int D = 4;
        double rs = 0, ag = 0;
        long rs_calls = 0, ag_calls = 0;
        for (int u = 0; u < (int)units.all.size(); u++) {
          const double slice_bytes = (double)((units.all[u].size() + D - 1) / D) * sizeof(float);
          const auto [reduced, gathered] = unit_traffic(units, u, l);
          rs += reduced * (D - 1) * slice_bytes, rs_calls += reduced;
          ag += gathered * (D - 1) * slice_bytes, ag_calls += gathered;
        }
        const std::string what = layout_name(l);
        EXPECT_EQ(got.comm_dp.calls[CommCounters::ReduceScatter], rs_calls) << what;
        EXPECT_EQ(got.comm_dp.calls[CommCounters::AllGather], ag_calls) << what;
        EXPECT_EQ(got.comm_dp.calls[CommCounters::AllReduce], 0) << what;
        EXPECT_DOUBLE_EQ(got.comm_dp.bytes[CommCounters::ReduceScatter], rs) << what;
        EXPECT_DOUBLE_EQ(got.comm_dp.bytes[CommCounters::AllGather], ag) << what;
        if (world_rank() == 0)
          std::printf("  %-32s %ld reduce-scatters (%.1f KB), %ld all-gathers (%.1f KB) a step\n", what.c_str(),
                      rs_calls, rs / 1024, ag_calls, ag / 1024);
      }
  }
}

// ZeRO-3's prefetch depth (parallel.zero_prefetch) only moves when a
// layer's gather starts: the same bits and the same collectives, in one
// process, with the pipeline's interleaved schedule (chunks taking turns
// in the windows) and in a pipeline keeping its gathered layers
// (prefetched into their own windows); each more layer gathered ahead holds
// one more turn-taking window, as `trainer plan` says, and no more kept.
TEST(ZeroStages, PrefetchDepthChangesOnlyTheWindowsHeld) {
  g_shapes.clear();
  run({Arch::Llama, 1, 1, false}, MPI_COMM_SELF);
  Layout kept{Arch::Llama, 1, 2, false, 2, 1};
  kept.reshard = false;
  for (Layout l : {Layout{Arch::Llama, 1, 4, false}, Layout{Arch::Llama, 1, 2, false, 2, 2}, kept}) {
    l.steps = 3, l.accum = 4, l.zero_stage = 3, l.prefetch = 1;
    const Result ref = run(l, MPI_COMM_WORLD);
    for (int prefetch : {0, 2, 3}) {
      l.prefetch = prefetch;
      const Result got = run(l, MPI_COMM_WORLD);
      const std::string what = layout_name(l);
      expect_same_bits(got, ref, what);
      for (int op = 0; op < CommCounters::kKinds; op++) EXPECT_EQ(got.comm_dp.calls[op], ref.comm_dp.calls[op]) << what;
      const Recipe r = recipe(l);
      const MemoryPlan plan = plan_memory(r.model, rank_layout(r, got.stage), l.recompute);
      const double have = (double)got.memory.peak[(int)Mem::Params], want = plan.bytes[(int)Mem::Params];
      EXPECT_NEAR(have, want, 0.02 * want) << what;
      // A turn-taking window: the largest unit of this rank's chunks that is not held.
      double window = 0;
      for (const ChunkLayout& ch : rank_layout(r, got.stage).chunks) {
        const ParamUnits pu = param_units(build_params(r.model, 1, 0, ch.spec));
        for (int u = 0; u < (int)pu.all.size() && l.reshard; u++)
          if (!pu.held(u)) window = std::max(window, (double)unit_slice(pu.all[u].size(), l.dp) * l.dp * 4);
      }
      // (each buffer rounded up to 64-byte blocks, plus one)
      EXPECT_NEAR(have - (double)ref.memory.peak[(int)Mem::Params], (prefetch - 1) * window,
                  128.0 * std::abs(prefetch - 1)) << what;
    }
  }
}

// ZeRO-3 with parallel.zero_persist_below above every norm weight and bias:
// each layer's vectors are gathered once a step and their gradients
// reduce-scattered once a step (summed over the micro-batches first, as
// ZeRO-0 sums), its matrices as before; the training is ZeRO-0's within
// 1e-6, also in a pipeline keeping the gathered layers, and the memory the
// plan's.
TEST(ZeroStages, PersistingVectorsAreGatheredOnceAStep) {
  for (Arch a : {Arch::GPT2, Arch::Llama}) {
    g_shapes.clear();
    run({a, 1, 1, false}, MPI_COMM_SELF);
    Layout l{a, 1, 4, false};
    l.steps = 5, l.accum = 4;
    const Result ref = run(l, MPI_COMM_WORLD);
    l.zero_stage = 3, l.persist = 1000;  // every vector here holds at most 64 elements
    const Result got = run(l, MPI_COMM_WORLD);
    const std::string what = layout_name(l);
    expect_same_training(got, ref, what, false);
    // The collectives, from the registry's tensors by name and shape: a
    // layer's vectors and its matrices are one unit each; the embedding's
    // and head's units as without persisting (CommunicationIsTheFormula).
    const Recipe r = recipe(l);
    const ModelParams mp = build_params(r.model);
    const ParamUnits plain = param_units(mp);
    const int D = 4;
    const auto slice_bytes = [&](size_t n) { return (double)((n + D - 1) / D) * sizeof(float) * (D - 1); };
    double rs = 0, ag = 0;
    long rs_calls = 0, ag_calls = 0;
    for (int u : {plain.embed, plain.head}) {
      const auto [reduced, gathered] = unit_traffic(plain, u, l);
      rs += reduced * slice_bytes(plain.all[u].size()), rs_calls += reduced;
      ag += gathered * slice_bytes(plain.all[u].size()), ag_calls += gathered;
    }
    for (int i = 0; i < l.n_layers; i++) {
      size_t vectors = 0, matrices = 0;
      for (const ParamInfo& p : mp.reg.all())
        if (p.name.rfind("layers." + std::to_string(i) + ".", 0) == 0)
          (p.global_shape.size() == 1 ? vectors : matrices) += p.numel;
      rs += slice_bytes(vectors) + l.accum * slice_bytes(matrices), rs_calls += 1 + l.accum;
      ag += slice_bytes(vectors) + 2 * l.accum * slice_bytes(matrices), ag_calls += 1 + 2 * l.accum;
    }
    EXPECT_EQ(got.comm_dp.calls[CommCounters::ReduceScatter], rs_calls) << what;
    EXPECT_EQ(got.comm_dp.calls[CommCounters::AllGather], ag_calls) << what;
    EXPECT_DOUBLE_EQ(got.comm_dp.bytes[CommCounters::ReduceScatter], rs) << what;
    EXPECT_DOUBLE_EQ(got.comm_dp.bytes[CommCounters::AllGather], ag) << what;
    const MemoryPlan plan = plan_memory(r.model, rank_layout(r, 0), l.recompute);
    for (Mem m : {Mem::Params, Mem::Grads, Mem::Optimizer})
      EXPECT_NEAR((double)got.memory.peak[(int)m], plan.bytes[(int)m], 0.02 * plan.bytes[(int)m]) << what << " " << mem_name(m);
    // A pipeline keeping its gathered layers, the vectors persisting too.
    Layout pipe{a, 1, 2, false, 2, 1};
    pipe.steps = 5, pipe.accum = 4;
    const Result pipe_ref = run(pipe, MPI_COMM_WORLD);
    pipe.zero_stage = 3, pipe.persist = 1000, pipe.reshard = false;
    expect_same_training(run(pipe, MPI_COMM_WORLD), pipe_ref, layout_name(pipe), false);
  }
}

// The weight replicas' communicator with every wait taking `ms` longer,
// and test() never saying done: each wait is one the step must sit through.
class SlowWaits final : public DataComm {
 public:
  SlowWaits(DataComm& inner, double ms) : c_(inner), ms_(ms) {}
  int rank() const override { return c_.rank(); }
  int size() const override { return c_.size(); }
  Handle start_allreduce(Ref x, size_t n, ReduceOp op) override { return c_.start_allreduce(x, n, op); }
  Handle start_reduce_scatter(CRef in, Ref out, size_t n) override { return c_.start_reduce_scatter(in, out, n); }
  Handle start_allgather(CRef in, Ref out, size_t n) override { return c_.start_allgather(in, out, n); }
  Handle start_alltoall(CRef in, Ref out, size_t n) override { return c_.start_alltoall(in, out, n); }
  Handle start_alltoallv(CRef in, const size_t* s, Ref out, const size_t* r, size_t row) override {
    return c_.start_alltoallv(in, s, out, r, row);
  }
  Handle isend(CRef data, size_t n, int peer, int tag) override { return c_.isend(data, n, peer, tag); }
  Handle irecv(Ref data, size_t n, int peer, int tag) override { return c_.irecv(data, n, peer, tag); }
  void wait(Handle h) override {
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(ms_));
    c_.wait(h);
  }
  bool test(Handle h) override {
    c_.test(h);  // (moves MPI on)
    return false;
  }

 private:
  DataComm& c_;
  double ms_;
};

// comm_dp_exposed_ms counts every wait on the weight replicas that the step
// sits through: ZeRO-1's reduce-scatter and its updated weights' all-gather;
// ZeRO-2's and 3's backward waiting for a gradient window still in flight,
// the reductions after the schedule, ZeRO-2's all-gather after the update
// and ZeRO-3's waits on gathers. With every wait 5 ms longer and none
// completing early, the exposed time is at least 5 ms per collective.
TEST(ZeroStages, ExposedTimeCountsEveryWaitTheStepSitsThrough) {
  const double ms = 5;
  for (int zero : {1, 2, 3}) {
    Layout l{Arch::Llama, 1, 4, false};
    l.accum = 2, l.zero_stage = zero;
    LayoutGroup g(recipe(l), MPI_COMM_WORLD);
    ParallelGroups groups = groups_of(g.grid);
    SlowWaits slow(*groups["dp"].data, ms);
    groups["dp"].data = &slow;
    RankStep step(g.be, groups, g.r, Blend::single(g.ds));
    const StepStats st = step.step();
    long calls = 0;
    for (int k = 0; k < CommCounters::kKinds; k++) calls += st.comm_of("dp").calls[k];
    EXPECT_GT(calls, 0);
    EXPECT_GE(st.dp_exposed_ms, 0.95 * ms * calls) << "zero " << zero;
    if (world_rank() == 0)
      std::printf("  zero %d: %ld collectives on the replicas, each waited %.0f ms longer: exposed %.1f ms\n", zero,
                  calls, ms, st.dp_exposed_ms);
  }
}

// Each stage's memory per rank, measured on rank 0 (which keeps the most)
// of a 24-layer Llama at dp 4: weights, gradients, optimizer state and
// communication buffers within 10% of `trainer plan`'s; and under ZeRO-3 the
// weights, gradients and optimizer state together at most 0.35 of ZeRO-0's.
TEST(ZeroStages, MemoryIsThePlanAndZeroThreeKeepsAQuarter) {
  g_shapes.clear();
  Layout one{Arch::Llama, 1, 1, false};
  one.n_layers = 24;
  run(one, MPI_COMM_SELF);
  double state[4] = {};
  for (int zero : {0, 1, 2, 3}) {
    Layout l{Arch::Llama, 1, 4, false};
    l.n_layers = 24, l.steps = 2, l.accum = 1, l.zero_stage = zero;
    const Result got = run(l, MPI_COMM_WORLD);
    if (world_rank() != 0) continue;
    const Recipe r = recipe(l);
    const MemoryPlan plan = plan_memory(r.model, rank_layout(r, 0), l.recompute);
    for (Mem m : {Mem::Params, Mem::Grads, Mem::Optimizer, Mem::Comm}) {
      const double want = plan.bytes[(int)m], have = (double)got.memory.peak[(int)m];
      EXPECT_NEAR(have, want, 0.10 * want) << "zero " << zero << " " << mem_name(m);
      std::printf("  zero %d dp 4 rank 0 %-10s measured %8.1f KB, planned %8.1f KB (%+.1f%%)\n", zero, mem_name(m),
                  have / 1024, want / 1024, want > 0 ? 100 * (have - want) / want : 0.0);
      if (m != Mem::Comm) state[zero] += have;
    }
  }
  if (world_rank() == 0) {
    EXPECT_LE(state[3], 0.35 * state[0]);
    std::printf("  weights + gradients + optimizer state per rank: %.0f, %.0f, %.0f, %.0f KB at zero 0-3 "
                "(zero 3: %.2f of zero 0's)\n",
                state[0] / 1024, state[1] / 1024, state[2] / 1024, state[3] / 1024, state[3] / state[0]);
  }
}

INSTANTIATE_TEST_SUITE_P(Archs, ZeroEquivalence, ::testing::Values(Arch::GPT2, Arch::Llama),
                         [](const auto& info) { return std::string(arch_name(info.param)); });

}  // namespace

int main(int argc, char** argv) {
  return trainer::testing::run_mpi_tests(argc, argv, 4, 30000, 256, 0, &g_data);
}
