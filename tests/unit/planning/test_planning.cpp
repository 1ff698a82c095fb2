// The cost model's parts against independent references: the traced model's
// product FLOPs against the closed-form count, the shared-units pipeline
// simulation against the unit-time simulator of the schedule tests and
// against closed forms, the profile's interpolation against hand-computed
// values.
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <map>

#include "app/recipe.h"
#include "model/flops.h"
#include "parallel/pipeline_schedule.h"
#include "planning/real_steps.h"
#include "planning/chunk_trace.h"
#include "planning/machine_profile.h"
#include "planning/pipeline_sim.h"
#include "planning/step_model.h"
#include "runtime/errors.h"

using namespace trainer;

namespace {

// One rank's shard of B sequences per micro-batch over tp ranks, fp32.
ShardShape shard(int B, int tp = 1, RecomputeConfig recompute = {}) {
  RankLayout l = single_rank_layout(B);
  l.tp = tp;
  return shard_shape_of(l, recompute);
}

ModelConfig small_model(Arch arch) {
  ModelConfig c;
  c.arch = arch;
  c.vocab_size = 512;
  c.d_model = 128;
  c.n_layers = 3;
  c.n_heads = 4;
  c.n_kv_heads = arch == Arch::Llama ? 2 : 4;
  c.d_ff = 384;
  c.seq_len = 64;
  c.tie_embeddings = arch == Arch::GPT2;
  return c;
}

double matmul_flops(const ChunkTrace& t, OpPhase phase) {
  double f = 0;
  for (const OpCall& op : t.ops)
    if (op.phase == phase && std::string(op.name) == "matmul") f += op.flops;
  return f;
}

// Uniform stages without sharing or message time.
std::vector<StageWork> uniform(const PipelineSpec& p, double f, double b, double ranks = 1) {
  StageWork w;
  w.fwd.assign(p.virtual_stages, f), w.bwd.assign(p.virtual_stages, b);
  w.fwd_comm.assign(p.virtual_stages, 0), w.bwd_comm.assign(p.virtual_stages, 0);
  w.ranks = ranks;
  return std::vector<StageWork>(p.stages, w);
}

double makespan(const std::vector<StageTimes>& t) {
  double m = 0;
  for (const StageTimes& s : t) m = std::max(m, s.end);
  return m;
}

}  // namespace

// A trace of the whole model (no compute) issues the products the closed
// form counts: 2 x matmul parameters x tokens forward, twice that backward
// (input and weight gradients); tensor parallelism halves each rank's share.
TEST(ChunkTrace, ProductFlopsMatchTheClosedFormCount) {
  for (Arch arch : {Arch::GPT2, Arch::Llama})
    for (int tp : {1, 2}) {
      const ModelConfig c = small_model(arch);
      const int B = 2;
      const ChunkTrace t = trace_chunk(c, ChunkSpec{}, shard(B, tp));
      const double fwd = 2.0 * matmul_params(c) * B * c.seq_len / tp;
      EXPECT_NEAR(matmul_flops(t, OpPhase::Forward), fwd, 1e-9 * fwd) << arch_name(arch) << " tp " << tp;
      EXPECT_NEAR(matmul_flops(t, OpPhase::Backward), 2 * fwd, 1e-9 * fwd) << arch_name(arch) << " tp " << tp;
      if (tp > 1) EXPECT_FALSE(t.tp_comm.empty());
    }
}

// A Mixture-of-Experts trace: its products count the active parameters
// (the router's and top_k experts' per token), with the experts split over
// ep = 2 as without (the trace's router spreads the tokens over the
// experts; each rank's experts then get their share from every ep rank).
TEST(ChunkTrace, MixtureOfExpertsCountsTheActiveParameters) {
  ModelConfig c = small_model(Arch::Llama);
  c.moe.experts = 8, c.moe.top_k = 2, c.moe.expert_ffn = 64;
  const int B = 4;
  const double fwd = 2.0 * matmul_params(c) * B * c.seq_len;
  for (int ep : {1, 2}) {
    ShardShape s = shard(B);
    s.layout.ep = ep, s.layout.dp = ep;
    const double got = matmul_flops(trace_chunk(c, ChunkSpec{}, s), OpPhase::Forward);
    EXPECT_NEAR(got, fwd, 0.05 * fwd) << "ep " << ep;  // (the split over ep ranks is even only on average)
  }
}

// Full recomputation redoes each layer's forward except its last product
// inside the backward: more than the plain backward's FLOPs, less than
// plain plus a whole forward.
TEST(ChunkTrace, FullRecomputeAddsTheForwardToTheBackward) {
  const ModelConfig c = small_model(Arch::GPT2);
  const ChunkSpec layers{0, 3, false, false};
  const double plain = matmul_flops(trace_chunk(c, layers, shard(2)), OpPhase::Backward);
  const ChunkTrace t = trace_chunk(c, layers, shard(2, 1, {RecomputeMode::Full, -1}));
  const double fwd = matmul_flops(t, OpPhase::Forward);
  EXPECT_GT(matmul_flops(t, OpPhase::Backward), plain);
  EXPECT_LT(matmul_flops(t, OpPhase::Backward), plain + fwd);
}

// Context parallelism's trace issues what the design moves, per layer and
// micro-batch (closed forms, not the code's own counts): the ring sends
// cp - 1 k|v blocks of its rows forward, and in the backward cp - 1 again
// with cp dK|dV sums in fp32; the all-to-all exchanges q|k|v and the output
// forward, and q|k|v, the output, its gradient and dq|dk|dv backward, each
// the rank's whole rows. A rank's products are 1/cp of the sequence's.
TEST(ChunkTrace, ContextParallelMovesWhatTheDesignSays) {
  for (Arch arch : {Arch::GPT2, Arch::Llama})
    for (int cp : {2, 4}) {
      const ModelConfig c = small_model(arch);
      const int B = 2, L = c.n_layers, hd = c.d_model / c.n_heads;
      const double rows = (double)B * c.seq_len / cp;
      const std::string what = std::string(arch_name(arch)) + " cp " + std::to_string(cp);
      ShardShape s = shard(B);
      s.layout.cp = cp;
      const ChunkTrace ring = trace_chunk(c, ChunkSpec{}, s);
      const double fwd = 2.0 * matmul_params(c) * B * c.seq_len / cp;
      EXPECT_NEAR(matmul_flops(ring, OpPhase::Forward), fwd, 1e-9 * fwd) << what;
      const double kv = rows * 2 * c.n_kv_heads * hd * 4;
      std::map<std::pair<OpPhase, double>, int> sends;
      for (const CommCall& cc : ring.cp_comm)
        if (cc.op == "send") sends[{cc.phase, cc.bytes}]++;
        else EXPECT_EQ(cc.op, "recv") << what;
      EXPECT_EQ(sends.size(), 2u) << what;  // fp32: k|v blocks and dK|dV sums are the same size
      EXPECT_EQ((sends[{OpPhase::Forward, kv}]), L * (cp - 1)) << what;
      EXPECT_EQ((sends[{OpPhase::Backward, kv}]), L * (2 * cp - 1)) << what;
      // Overlapped, a k|v block travels while the attention runs: ops lie
      // between its start and its wait.
      for (const CommCall& cc : ring.cp_comm) {
        EXPECT_LE(cc.started, cc.waited) << what;
        if (cc.phase == OpPhase::Forward) EXPECT_GT(cc.waited, cc.started) << what;
      }
      if (c.n_heads % cp || c.n_kv_heads % cp) continue;
      s.layout.cp_comm = CpComm::A2a;
      const ChunkTrace a2a = trace_chunk(c, ChunkSpec{}, s);
      const double qkv = rows * (c.n_heads + 2 * c.n_kv_heads) * hd * 4, out = rows * c.n_heads * hd * 4;
      std::map<std::pair<OpPhase, double>, int> all;
      for (const CommCall& cc : a2a.cp_comm) {
        EXPECT_EQ(cc.op, "alltoall") << what;
        EXPECT_EQ(cc.waited, cc.started) << what << ": the all-to-all is waited for at once";
        all[{cc.phase, cc.bytes}]++;
      }
      EXPECT_EQ((all[{OpPhase::Forward, qkv}]), L) << what;
      EXPECT_EQ((all[{OpPhase::Forward, out}]), L) << what;
      EXPECT_EQ((all[{OpPhase::Backward, qkv}]), 2 * L) << what;
      EXPECT_EQ((all[{OpPhase::Backward, out}]), 2 * L) << what;
    }
}

// Without shared units the event simulation gives the makespans of the
// schedule tests' own unit-time simulator, for both schedules.
TEST(PipelineSim, MatchesTheScheduleSimulatorWithoutSharing) {
  for (PipelineSpec p : {PipelineSpec{2, 1, 4, ScheduleKind::OneFOneB}, PipelineSpec{4, 1, 8, ScheduleKind::OneFOneB},
                         PipelineSpec{2, 2, 4, ScheduleKind::Interleaved},
                         PipelineSpec{4, 2, 8, ScheduleKind::Interleaved}}) {
    const SimResult ref = simulate(p, build_schedule(p), 1, 2);
    ASSERT_FALSE(ref.deadlock);
    const std::vector<StageTimes> t = simulate_shared(p, uniform(p, 1, 2), 0);
    EXPECT_DOUBLE_EQ(makespan(t), (double)ref.makespan) << p.stages << " stages x " << p.virtual_stages;
  }
  // The closed form of 1F1B: (m + P - 1) x (F + B).
  const PipelineSpec p{4, 1, 8, ScheduleKind::OneFOneB};
  EXPECT_DOUBLE_EQ(makespan(simulate_shared(p, uniform(p, 1, 2), 0)), (8 + 4 - 1) * 3.0);
}

// Two one-rank stages on one core. Waiting ranks that take nothing (the
// slowdown is the busy count) leave the core busy whenever either stage
// computes, so the step is all the work done one piece at a time; waiting
// ranks that keep a full share (a slowdown of 2 whoever computes) make the
// step twice the unshared one.
TEST(PipelineSim, SharingOneUnitSerialisesTheWork) {
  const PipelineSpec p{2, 1, 6, ScheduleKind::OneFOneB};
  const double work = 2 * 6 * (1.0 + 2.0);
  const Slowdown busy_count = [](double busy) { return std::max(1.0, busy); };
  EXPECT_NEAR(makespan(simulate_shared(p, uniform(p, 1, 2), 0, busy_count)), work, 1e-9);
  const double alone = makespan(simulate_shared(p, uniform(p, 1, 2), 0));
  EXPECT_NEAR(makespan(simulate_shared(p, uniform(p, 1, 2), 0, [](double) { return 2.0; })), 2 * alone, 1e-9);
  // A message delay adds to every hand-over on the critical path: with one
  // micro-batch, the forward goes 0 -> 1 and the gradient 1 -> 0.
  const PipelineSpec one{2, 1, 1, ScheduleKind::OneFOneB};
  EXPECT_NEAR(makespan(simulate_shared(one, uniform(one, 1, 2), 0.5)), 2 * 3.0 + 2 * 0.5, 1e-9);
}

// The clock in ms runs past 2^14 and a phase's remainder is below half a unit
// in its last place: the remainder can no longer move the clock, and the
// simulation must still end that phase (it looped for ever: plan --search at
// long sequences). Every clock from 1 s to 10^9 ms, remainders from 1e-15 to
// 1e-9 ms; SIGALRM fails the test instead of a hang.
TEST(PipelineSim, EndsEveryPhaseWhateverTheClockReads) {
  alarm(60);
  const PipelineSpec one{1, 1, 1, ScheduleKind::OneFOneB};
  for (double clock = 1e3; clock < 1e9; clock *= 1.37)
    for (double rest : {1e-15, 1.5e-12, 3e-12, 1e-11, 1e-9}) {
      StageWork w;
      w.fwd = {clock}, w.bwd = {1}, w.fwd_comm = {rest}, w.bwd_comm = {rest}, w.ranks = 1;
      EXPECT_NEAR(makespan(simulate_shared(one, {w}, 0)), clock + 1 + 2 * rest, 1e-12 * clock) << clock << " " << rest;
      const PipelineSpec two{2, 1, 3, ScheduleKind::OneFOneB};  // messages and a slowdown as well
      std::vector<StageWork> ws(2, w);
      ws[1].fwd = {clock / 3};
      const double m = makespan(simulate_shared(two, ws, rest, [](double busy) { return std::max(1.0, busy); }));
      EXPECT_TRUE(std::isfinite(m) && m > 3 * clock) << clock << " " << rest;
    }
  alarm(0);
}

// plan --search prices a Llama calibrated at seq_len 128 at any length: each
// prediction ends (in well under a second each) with a step time that grows
// with the length. Ops are priced at 1e-6 ms per unit of work, so long
// sequences' steps reach far past 2^14 ms of simulated time.
TEST(StepModel, PricesAnyLengthFromAProfileOfAShortOne) {
  auto recipe = [](int seq_len) {
    return load_recipe("configs/demo.toml", {"model.arch=\"llama\"", "model.d_model=128", "model.n_layers=4",
                                             "model.n_heads=4", "model.n_kv_heads=2", "parallel.dp=1",
                                             "parallel.pp=2", "parallel.tp=2", "training.micro_batch=1",
                                             "training.global_batch=8", "model.seq_len=" + std::to_string(seq_len)},
                       0, false);
  };
  MachineProfile p;
  p.compute_units = 2;
  p.busy_slowdown = {1.0, 1.1, 1.6, 2.2};
  for (const OpCall& op : trace_chunk(recipe(128).model, ChunkSpec{}, shard(1)).ops)
    p.ops[op.key] = {(op.flops > 0 ? op.flops : op.bytes) * 1e-6, op.flops > 0 ? op.flops : op.bytes};
  alarm(120);
  double last = 0;
  for (int T : {128, 1024, 4096, 6144, 8192, 12288, 16384, 32768}) {
    const auto t0 = std::chrono::steady_clock::now();
    const StepPrediction s = StepModel(p, 8).predict(recipe(T));
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_TRUE(std::isfinite(s.step_ms) && s.step_ms > last) << T << ": " << s.step_ms << " after " << last;
    EXPECT_LT(took, 5.0) << T;
    last = s.step_ms;
  }
  EXPECT_GT(last, 1 << 14);
  alarm(0);
}

// Collective times: piecewise linear between measured sizes, the smallest
// measurement below them, the last slope beyond; an unmeasured group size
// scaled from the nearest by the ring factor (g - 1) / g.
TEST(MachineProfile, InterpolatesCollectivesAndScalesOps) {
  MachineProfile p;
  p.collectives["allreduce/2"] = {{1000, 1.0}, {2000, 3.0}};
  EXPECT_DOUBLE_EQ(p.comm_time("allreduce", 2, 1500), 2.0);
  EXPECT_DOUBLE_EQ(p.comm_time("allreduce", 2, 500), 1.0);
  EXPECT_DOUBLE_EQ(p.comm_time("allreduce", 2, 3000), 5.0);
  EXPECT_DOUBLE_EQ(p.comm_time("allreduce", 4, 1500), 2.0 * (3.0 / 4) / (1.0 / 2));
  EXPECT_DOUBLE_EQ(p.comm_time("allreduce", 1, 1500), 0.0);
  EXPECT_LT(p.comm_time("allgather", 2, 1500), 0);  // never measured
  p.ops["matmul NN 64x64x64 f32"] = {0.5, 2.0 * 64 * 64 * 64};
  p.ops["matmul NN 512x512x512 f32"] = {100, 2.0 * 512 * 512 * 512};
  int unpriced = 0;
  OpCall near{"matmul NN 128x64x64 f32", "matmul", 2.0 * 128 * 64 * 64, 0};
  EXPECT_DOUBLE_EQ(p.op_time(near, &unpriced), 1.0);  // twice the 64-cube's work, from it
  OpCall known{"matmul NN 64x64x64 f32", "matmul", 1, 0};
  EXPECT_DOUBLE_EQ(p.op_time(known, &unpriced), 0.5);
  OpCall other{"gelu_fwd 100 f32", "gelu_fwd", 0, 800};
  EXPECT_DOUBLE_EQ(p.op_time(other, &unpriced), 0.0);
  EXPECT_EQ(unpriced, 1);
}

// The slowdown by busy ranks: the measured figures at whole counts, linear
// between them (and from 1 at none), beyond the table the last figure times
// the growth of ranks per unit; without a table, ranks over units.
TEST(MachineProfile, SlowdownFollowsTheMeasuredTable) {
  MachineProfile p;
  p.compute_units = 2;
  EXPECT_DOUBLE_EQ(p.slowdown(1), 1.0);
  EXPECT_DOUBLE_EQ(p.slowdown(6), 3.0);
  p.busy_slowdown = {1.1, 1.3, 1.9, 2.5};
  EXPECT_DOUBLE_EQ(p.slowdown(0), 1.0);
  EXPECT_DOUBLE_EQ(p.slowdown(0.5), 1.05);
  EXPECT_DOUBLE_EQ(p.slowdown(2), 1.3);
  EXPECT_DOUBLE_EQ(p.slowdown(2.5), 1.6);
  EXPECT_DOUBLE_EQ(p.slowdown(4), 2.5);
  EXPECT_DOUBLE_EQ(p.slowdown(8), 5.0);  // twice the ranks on the same two cores
  p.busy_slowdown = {1.0};               // calibrated with one rank on two cores
  EXPECT_DOUBLE_EQ(p.slowdown(2), 1.0);
  EXPECT_DOUBLE_EQ(p.slowdown(4), 2.0);
}

// A tensor-parallel collective's wait, against values worked by hand: held
// at the measured ends, linear between them, the nearest measured group
// size for another, none for one rank or without measurements (a GPU).
TEST(MachineProfile, SyncWaitFollowsTheMeasuredTable) {
  MachineProfile p;
  EXPECT_DOUBLE_EQ(p.sync_wait(2, 1.0), 0.0);
  p.tp_sync[2] = {{0.5, 0.1}, {2.0, 0.4}, {4.0, 0.5}};
  p.tp_sync[8] = {{0.5, 1.0}};
  EXPECT_DOUBLE_EQ(p.sync_wait(2, 0.25), 0.1);
  EXPECT_NEAR(p.sync_wait(2, 1.25), 0.25, 1e-12);
  EXPECT_NEAR(p.sync_wait(2, 3.0), 0.45, 1e-12);
  EXPECT_DOUBLE_EQ(p.sync_wait(2, 10.0), 0.5);
  EXPECT_NEAR(p.sync_wait(4, 1.25), 0.25, 1e-12);  // 4 is nearer 2 than 8
  EXPECT_DOUBLE_EQ(p.sync_wait(6, 3.0), 1.0);      // 6 is nearer 8
  EXPECT_DOUBLE_EQ(p.sync_wait(1, 1.0), 0.0);
}

// solve_action_cost finds a per-action cost planted in the "measured" steps:
// the many-action layout's step priced with 0.3 ms per action (and the
// anchor's factor taken with it) is what it is given, and it recovers 0.3
// ms; a measured step faster than the model with no cost gives 0, not a
// negative cost. The prediction it is checked against is the model's with
// the planted cost, not the solver's output.
TEST(ActionCost, RecoversAPlantedCostAndNeverGoesBelowZero) {
  auto recipe = [](std::vector<std::string> sets) {
    sets.insert(sets.begin(), {"model.n_layers=4", "parallel.tp=1", "recompute.mode=\"none\"", "parallel.zero_stage=0"});
    return load_recipe("configs/demo.toml", sets, 0, false);
  };
  const Recipe anchor = recipe({"parallel.dp=4", "parallel.pp=1", "training.micro_batch=2"});
  const Recipe many = recipe({"parallel.dp=2", "parallel.pp=2", "parallel.schedule=\"interleaved\"",
                              "parallel.virtual_stages=2", "training.micro_batch=1"});
  MachineProfile p;
  p.compute_units = 2;
  p.busy_slowdown = {1.0, 1.1, 1.6, 2.2};
  for (int mb : {1, 2})  // every op of the model priced by its work, 1 GFLOP or GB per ms
    for (const OpCall& op : trace_chunk(anchor.model, ChunkSpec{}, shard(mb)).ops)
      p.ops[op.key] = {(op.flops > 0 ? op.flops : op.bytes) * 1e-9, op.flops > 0 ? op.flops : op.bytes};
  MachineProfile planted = p;
  planted.action_ms = 0.3;
  const double anchor_ms = 1.2 * StepModel(planted, 4).predict(anchor).step_ms;  // the anchor's real step
  planted.anchor_measured_ms = anchor_ms;
  planted.anchor_predicted_ms = StepModel(planted, 4).predict(anchor).step_ms;
  const double many_ms = StepModel(planted, 4).predict(many).step_ms;  // factor 1.2 included
  p.anchor_measured_ms = anchor_ms;
  p.anchor_predicted_ms = StepModel(p, 4).predict(anchor).step_ms;  // as calibrate has it before the solve
  solve_action_cost(p, 4, anchor, many, many_ms);
  EXPECT_NEAR(p.action_ms, 0.3, 1e-3);
  EXPECT_NEAR(p.anchor_predicted_ms, planted.anchor_predicted_ms, 1e-3 * anchor_ms);  // solved to 0.1%
  EXPECT_NEAR(p.step_factor(), 1.2, 1e-3);
  MachineProfile none = p;  // the many-action step as priced with no cost at all
  none.action_ms = 0, none.anchor_measured_ms = 0;
  const double fastest = StepModel(none, 4).predict(many).step_ms * anchor_ms / StepModel(none, 4).predict(anchor).step_ms;
  solve_action_cost(p, 4, anchor, many, 0.8 * fastest);
  EXPECT_DOUBLE_EQ(p.action_ms, 0.0);
}

// Several profiles: a layout's prediction is the whole prediction of the
// profile with the median step time, whatever the order they are given in,
// against one plain model's step scaled by the anchors' factors planted by
// hand (x1, x2, x3: the median is x2; of two, the lower).
TEST(StepModels, TakeTheMedianProfilesWholePrediction) {
  const Recipe r = load_recipe("configs/demo.toml", {"model.n_layers=2", "parallel.dp=2", "parallel.pp=1",
                                                     "parallel.tp=1", "training.micro_batch=2"}, 0, false);
  MachineProfile base;
  base.compute_units = 2;
  for (const OpCall& op : trace_chunk(r.model, ChunkSpec{}, shard(2)).ops)
    base.ops[op.key] = {(op.flops > 0 ? op.flops : op.bytes) * 1e-9, op.flops > 0 ? op.flops : op.bytes};
  const double plain = StepModel(base, 2).predict(r).step_ms;
  ASSERT_GT(plain, 0);
  auto scaled = [&](double factor) {
    MachineProfile p = base;
    p.anchor_measured_ms = factor * 100, p.anchor_predicted_ms = 100;
    return p;
  };
  const std::vector<MachineProfile> three = {scaled(3), scaled(1), scaled(2)};
  const StepPrediction m = StepModels(three, 2).predict(r);
  EXPECT_NEAR(m.step_ms, 2 * plain, 1e-9 * plain);
  EXPECT_EQ(m.profile, 2);
  EXPECT_DOUBLE_EQ(m.step_factor, 2.0);
  EXPECT_NEAR(m.tokens_per_s, (double)r.training.global_batch * r.model.seq_len / (2 * plain / 1e3), 1e-6 * m.tokens_per_s);  // parts of one
  const std::vector<MachineProfile> two = {scaled(3), scaled(1)};
  EXPECT_NEAR(StepModels(two, 2).predict(r).step_ms, plain, 1e-9 * plain);
  EXPECT_THROW(StepModels({}, 2), std::invalid_argument);
}

// The cost model's price for context parallelism against closed forms, on a
// profile whose ops cost their work and whose transfers cost c ms a byte:
// the all-to-all and a ring that waits for each transfer at once
// (cp_overlap = false) expose every byte the design moves, an overlapped
// ring hides cheap transfers and at most the ops' own time of dear ones; the
// gradient reduction is over the dp x cp ranks that hold the weights.
TEST(StepModel, PricesContextParallelTransfersAgainstTheBytesTheyMove) {
  const std::vector<std::string> layout = {"model.n_layers=2", "parallel.dp=1", "parallel.pp=1", "parallel.tp=1",
                                           "parallel.cp=2", "training.micro_batch=2"};
  auto recipe = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), layout.begin(), layout.end());
    return load_recipe("configs/demo.toml", extra, 0, false);
  };
  const Recipe ring = recipe({}), serial = recipe({"parallel.cp_overlap=false"}), a2a = recipe({"parallel.cp_comm=\"a2a\""});
  const ModelConfig& m = ring.model;
  const int cp = 2, B = 2, L = m.n_layers, micro = ring.pipeline().micro_batches, hd = m.d_model / m.n_heads;
  const double rows = (double)B * m.seq_len / cp, block = rows * 2 * m.n_kv_heads * hd * 4;
  const double ring_bytes = micro * L * (2.0 * (cp - 1) + cp) * rows * 2 * m.n_kv_heads * hd * 4;
  const double a2a_bytes = micro * L * (3.0 * rows * (m.n_heads + 2 * m.n_kv_heads) * hd * 4 + 3.0 * rows * m.n_heads * hd * 4);
  MachineProfile base;
  base.compute_units = 2;
  double ops_ms = 0;
  for (const Recipe* r : {&ring, &a2a})
    for (const OpCall& op : trace_chunk(m, ChunkSpec{}, shard_shape_of(*r)).ops) {
      const double work = op.flops > 0 ? op.flops : op.bytes;
      base.ops[op.key] = {work * 1e-9, work};
      if (r == &ring && op.phase != OpPhase::PerStep) ops_ms += micro * work * 1e-9;
    }
  base.collectives[comm_key("allreduce", 2)] = {{1e3, 7.0}, {1e12, 7.0}};  // 7 ms whatever the size
  auto priced = [&](double c) {
    MachineProfile p = base;
    for (const char* op : {"ring", "alltoall"}) p.collectives[comm_key(op, 2)] = {{1, c}, {1e12, c * 1e12}};
    return p;
  };
  // Exposed even when cheap: each layer's last dK|dV sum, sent after the
  // last block's attention and waited for next. With cp_overlap = false
  // every transfer: each receive is waited for before the attention.
  const double last_sums = micro * L * block;
  for (double c : {1e-10, 1e-4}) {
    const MachineProfile p = priced(c);
    const StepPrediction s = StepModel(p, 2).predict(serial), o = StepModel(p, 2).predict(ring),
                         a = StepModel(p, 2).predict(a2a);
    EXPECT_NEAR(a.cp_comm_ms, c * a2a_bytes, 1e-9 * c * a2a_bytes) << c;
    EXPECT_TRUE(s.unpriced_comm.empty() && o.unpriced_comm.empty() && a.unpriced_comm.empty());
    EXPECT_NEAR(s.dp_comm_ms, 7.0, 1e-12) << "the weights' reduction spans dp x cp = 2 ranks";
    EXPECT_NEAR(s.cp_comm_ms, c * ring_bytes, 1e-9 * c * ring_bytes) << c;
    if (c * ring_bytes < 1e-3 * ops_ms) {
      EXPECT_NEAR(o.cp_comm_ms, c * last_sums, 1e-9 * c * ring_bytes);
    } else {
      EXPECT_LT(o.cp_comm_ms, s.cp_comm_ms);
      EXPECT_GE(o.cp_comm_ms, s.cp_comm_ms - ops_ms);
      EXPECT_GT(o.step_ms, StepModel(priced(1e-10), 2).predict(ring).step_ms + 0.5 * (o.cp_comm_ms - c * last_sums));
    }
    EXPECT_TRUE(s.unpriced_transfers.empty() && o.unpriced_transfers.empty() && a.unpriced_transfers.empty());
  }
  // Without the ring's figure the ring's layouts say which transfer is
  // unpriced (plan --search ranks none of them); the all-to-all's are priced.
  MachineProfile no_ring = priced(1e-4);
  no_ring.collectives.erase(comm_key("ring", 2));
  const StepPrediction o = StepModel(no_ring, 2).predict(ring), a = StepModel(no_ring, 2).predict(a2a);
  EXPECT_EQ(o.unpriced_transfers, std::vector<std::string>{comm_key("ring", 2)});
  EXPECT_EQ(o.unpriced_comm, o.unpriced_transfers);
  EXPECT_TRUE(a.unpriced_transfers.empty() && a.unpriced_comm.empty());
}

// Profiles of different jobs are refused with the files and what differs.
TEST(StepModels, ProfilesOfDifferentJobsAreRefused) {
  MachineProfile a;
  a.ranks = 4, a.backend = "cpu", a.precision = "fp32";
  MachineProfile b = a;
  b.ranks = 8;
  const std::string dir = ::testing::TempDir();
  save_profile(a, dir + "/a.json"), save_profile(b, dir + "/b.json"), save_profile(a, dir + "/c.json");
  EXPECT_EQ(load_profiles({dir + "/a.json", dir + "/c.json"}).size(), 2u);
  try {
    load_profiles({dir + "/a.json", dir + "/c.json", dir + "/b.json"});
    FAIL() << "profiles of 4 and 8 ranks were accepted together";
  } catch (const UserError& e) {
    EXPECT_EQ(e.exit_code, kExitUsage);
    EXPECT_NE(std::string(e.what()).find("differ in rank count (4, 8)"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("b.json"), std::string::npos) << e.what();
  }
}
