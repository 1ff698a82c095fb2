// Mixture-of-Experts models (recipe section [moe]; model/layer/moe_mlp.cpp)
// trained through the engine in every layout four ranks make, against one
// process on the same global batch: 20 steps give the same losses, router
// losses and weights (the routing is a discrete choice: rounding that moved
// a token to another expert would show at once). Recomputation (selective
// and full) gives the run without it bit for bit, since a micro-batch's
// routing is decided once and kept. (Training on text through the binary:
// tests/e2e/moe_check.py.)
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <filesystem>
#include <algorithm>
#include <cstdio>

#include "engine/layout.h"
#include "model/memory_plan.h"
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

// A layout against one process. The routing is a discrete choice: a
// token whose k-th and (k+1)-th best experts score within rounding of each
// other (seen: 2e-6 apart, sigmoid scores) may go to the other expert once
// the runs' weights differ by rounding, and from then on they differ by
// more than rounding, rightly. So: the first step's gradients (every
// tensor within 1e-5, expect_equivalent); then, over the steps routed the
// same (every expert's selections in every layer equal; at least the first
// half of the steps must be), the losses and the routers' losses (summed over the layers,
// means over the global batch: no split of the batch over ranks or
// micro-batches changes them) within 1e-6; and when all were, the weights
// after them: the model within 1e-5 (relative norm of the difference), its
// most affected tensor within 1e-3. (AdamW's first step divides each
// gradient by its own size plus eps = 1e-8, so an element whose gradient
// is of that size is moved by an amount its rounding decides. Seen with
// sigmoid scores: layers.3.attn.wo's element 485 has a first gradient of
// 7.28e-9 (3e-7 of the tensor's largest, i.e. cancellation) in one process
// and 7.19e-9 in the same process with 8 micro-batches; its step differs by
// 1.5e-6, the tensor by 6.3e-6 relative, set at step 1 and not growing.
// Other layouts' sums round differently: that tensor to 9e-5 under tp
// (softmax layouts: every tensor within 2e-6); the model within 2e-6. A wrong gradient of one
// expert moves its tensor by far more.)
void expect_same_moe_training(const Result& got, const Result& ref, const std::string& what) {
  expect_equivalent(got, ref, what, 1e-3);  // (its losses: below, while the routing agrees)
  ASSERT_EQ(got.moe_selections.size(), ref.moe_selections.size()) << what;
  size_t same = 0;
  while (same < ref.moe_selections.size() && got.moe_selections[same] == ref.moe_selections[same]) same++;
  // (a near tie flips by chance, late: drift grows from one ulp; a wrong
  // update would flip tokens early)
  ASSERT_GE(2 * same, ref.moe_selections.size()) << what << ": routed differently from step " << same + 1;
  double worst = 0;
  for (size_t i = 0; i < same; i++) {
    ASSERT_GT(ref.moe_aux[i], 0) << what;
    ASSERT_GT(ref.moe_z[i], 0) << what;
    worst = std::max({worst, std::fabs(got.losses[i] / ref.losses[i] - 1), std::fabs(got.moe_aux[i] / ref.moe_aux[i] - 1),
                      std::fabs(got.moe_z[i] / ref.moe_z[i] - 1)});
  }
  EXPECT_LE(worst, 1e-6) << what << ": losses or router losses while routed alike";
  TrainingGap g;
  if (same == ref.moe_selections.size()) {
    g = training_gap(got, ref, what, false);
    EXPECT_LE(g.model, 1e-5) << what << ": weights";
    EXPECT_LE(g.tensor, 1e-3) << what << ": " << g.worst;
  }
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0)
    std::printf("  %-36s routed alike %zu of %zu steps: losses (aux %.7f, z %.7f) within %.1e; weights %.1e (%s %.1e)\n",
                what.c_str(), same, ref.moe_selections.size(), got.moe_aux[same - 1], got.moe_z[same - 1], worst,
                g.model, g.worst.empty() ? "-" : g.worst.c_str(), g.tensor);
}

// Tensor (with sequence parallelism: each rank routes its own rows),
// pipeline (1F1B, interleaved), context (ring, all-to-all) and data
// parallelism, ZeRO-1 and gradient accumulation, each beside dp 2 (dp 4
// alone), for softmax and sigmoid scores, and with a dense first layer and
// a shared expert (tp splits it as the dense MLP) and a selection bias.
TEST(Moe, EveryLayoutMatchesOneProcess) {
  // softmax; sigmoid; softmax with a dense first layer, a shared expert and
  // a selection bias
  for (int variant : {0, 1, 2}) {
    const bool sigmoid = variant == 1;
    Layout one{Arch::Llama, 1, 1, false};
    one.moe = experts(4, 2, sigmoid), one.steps = 20, one.lr = 1e-3f;
    if (variant == 2) one.moe.dense_layers = 1, one.moe.shared_expert_ffn = 32, one.moe.bias_rate = 1e-3;
    g_shapes.clear();
    const Result ref = run(one, MPI_COMM_WORLD);
    std::vector<Layout> layouts;
    const auto add = [&](Layout l) {
      l.moe = one.moe, l.steps = one.steps, l.lr = one.lr;
      layouts.push_back(l);
    };
    add({Arch::Llama, 2, 2, true});
    add({Arch::Llama, 1, 2, false, 2});
    if (variant == 0) {
      Layout buckets{Arch::Llama, 1, 4, false};
      buckets.bucket_mb = 0.004;  // buckets of a few tensors, started as the backward leaves them
      add(buckets);
      add({Arch::Llama, 1, 2, false, 2, 2});
      Layout cp{Arch::Llama, 1, 2, false};
      cp.cp = 2;
      add(cp);
      Layout zero{Arch::Llama, 1, 4, false};
      zero.zero_stage = 1;
      add(zero);
      Layout accum{Arch::Llama, 1, 2, false};
      accum.accum = 4;
      add(accum);
    } else if (variant == 2) {
      Layout zero{Arch::Llama, 1, 4, false};
      zero.zero_stage = 1;
      add(zero);
    } else {
      Layout cp{Arch::Llama, 2, 1, true};
      cp.cp = 2, cp.cp_comm = CpComm::A2a;
      add(cp);
    }
    for (const Layout& l : layouts) {
      const Result got = run(l, MPI_COMM_WORLD);
      const std::string what = layout_name(l) + (sigmoid ? "_sigmoid" : "") + (variant == 2 ? "_dense1_shared_bias" : "");
      expect_same_moe_training(got, ref, what);
    }
  }
}

// Expert parallelism: the experts split over ep of the replicas, tokens to
// their experts' ranks and back by all-to-all, the experts' gradients
// summed over the replicas holding the same ones: ep 2 and ep 4 (with dp 2,
// 4), ep 2 beside dp 4 (two replicas of each part), both with ZeRO-1 too,
// tp 2 (sp), pp 2 (1F1B, interleaved) and cp 2, against one process as above; softmax and sigmoid scores, and with
// a dense first layer, a shared expert and a selection bias.
TEST(Moe, ExpertParallelMatchesOneProcess) {
  for (int variant : {0, 1, 2}) {
    Layout one{Arch::Llama, 1, 1, false};
    one.moe = experts(4, 2, variant == 1), one.steps = 20, one.lr = 1e-3f;
    if (variant == 2) one.moe.dense_layers = 1, one.moe.shared_expert_ffn = 32, one.moe.bias_rate = 1e-3;
    g_shapes.clear();
    const Result ref = run(one, MPI_COMM_WORLD);
    std::vector<Layout> layouts;
    const auto add = [&](Layout l, int ep) {
      l.moe = one.moe, l.steps = one.steps, l.lr = one.lr, l.ep = ep;
      layouts.push_back(l);
    };
    add({Arch::Llama, 1, 2, false}, 2);
    add({Arch::Llama, 1, 4, false}, 4);
    if (variant == 0) {
      add({Arch::Llama, 1, 4, false}, 2);
      Layout zero{Arch::Llama, 1, 4, false};
      zero.zero_stage = 1;  // (the experts' blocks over the 2 replicas holding them)
      add(zero, 2);
      add(zero, 4);
      add({Arch::Llama, 2, 2, true}, 2);
      add({Arch::Llama, 1, 2, false, 2}, 2);
      add({Arch::Llama, 1, 2, false, 2, 2}, 2);
      Layout cp{Arch::Llama, 1, 1, false};
      cp.cp = 2;
      add(cp, 2);
    }
    for (const Layout& l : layouts) {
      const std::string what = layout_name(l) + (variant == 1 ? "_sigmoid" : variant == 2 ? "_dense1_shared_bias" : "");
      const Result got = run(l, MPI_COMM_WORLD);
      expect_same_moe_training(got, ref, what);
      if (l.tp == 1 && l.pp == 1) EXPECT_LT(got.params_per_rank, ref.params_per_rank) << what << ": experts not split";
      // The memory plan counts this rank's experts and (ZeRO-1) its blocks.
      const Recipe r = recipe(l);
      const MemoryPlan plan = plan_memory(r.model, rank_layout(r, got.stage), l.recompute);
      for (Mem m : {Mem::Params, Mem::Grads, Mem::Optimizer}) {
        const double have = (double)got.memory.peak[(int)m], want = plan.bytes[(int)m];
        EXPECT_NEAR(have, want, 0.02 * want) << what << " " << mem_name(m);
      }
    }
  }
}

// No hang, whatever the routing: every token's experts forced (a router
// bias of 100 on them, moved by 1e-9 a step) to expert 0 alone (top 1), or
// to experts 0 and 1 (top 2, of 4): the ep ranks holding the others receive
// no rows, yet join every exchange; the steps finish and equal one process.
TEST(Moe, ExpertsWithoutTokensNeitherHangNorDiffer) {
  for (int k : {1, 2}) {
    Layout one{Arch::Llama, 1, 1, false};
    one.moe = experts(4, k), one.moe.bias_rate = 1e-9, one.steps = 6, one.lr = 1e-3f;
    one.init = [k](Backend& be, Transformer& m) {
      const std::vector<float> bias = {100.f, k == 2 ? 100.f : 0.f, 0.f, 0.f};
      for (int l = m.chunk().first_layer; l < m.chunk().last_layer; l++)
        be.from_host(m.params().ref(m.registry().at("layers." + std::to_string(l) + ".mlp.router.bias").offset),
                     bias.data(), bias.size());
    };
    g_shapes.clear();
    const Result ref = run(one, MPI_COMM_WORLD);
    for (const std::vector<double>& sel : ref.moe_selections)
      for (size_t i = 0; i < sel.size(); i++) ASSERT_EQ(sel[i] > 0, i % 4 < (size_t)k) << "expert " << i % 4;
    for (int ep : {2, 4}) {
      Layout l{Arch::Llama, 1, ep, false};
      l.moe = one.moe, l.steps = one.steps, l.lr = one.lr, l.init = one.init, l.ep = ep;
      expect_same_moe_training(run(l, MPI_COMM_WORLD), ref, layout_name(l) + "_forced_top" + std::to_string(k));
    }
  }
}

// Layout l on groups of its size cut from world: loads `from` if given and
// checks every weight equals `want` bit for bit, trains `steps` steps, and
// saves into dir/group<k> if dir is given (world rank 0's step directory
// into *saved, and the weights saved into *weights).
std::vector<double> train(const Layout& l, MPI_Comm world, int steps, const std::string& from,
                          const std::map<std::string, std::vector<float>>* want = nullptr, const std::string& dir = "",
                          std::string* saved = nullptr, std::map<std::string, std::vector<float>>* weights = nullptr) {
  std::vector<double> losses;
  std::string step_dir;
  {
    LayoutGroup g(recipe(l), world);
    const std::unique_ptr<RankStep> loop = g.rank_step();
    if (!from.empty()) loop->load_checkpoint(from);
    if (want) {
      const auto got = model_weights(g, *loop);
      for (const auto& [name, w] : *want) EXPECT_EQ(got.at(name), w) << layout_name(l) << " loaded " << name;
    }
    for (int s = 0; s < steps; s++) losses.push_back(loop->step().loss);
    if (!dir.empty()) {
      if (weights) *weights = model_weights(g, *loop);
      MpiControlComm control(g.comm());
      step_dir = loop->save_checkpoint(dir + "/group" + std::to_string(g.index()), 1, control);
    }
  }
  if (saved) *saved = shared_path(step_dir, world);
  return losses;
}

// Resume: an ep 4 checkpoint (10 steps; ZeRO-1: each rank saves its blocks)
// loads as ep 2 (ZeRO-1 too), ep 1 with dp 4, tp 2 x pp 2 and one process,
// and an ep 2 one (ZeRO-0) as ep 4 and the same,
// every tensor (the experts, the routers' selection bias, the rest) equal
// to what was saved bit for bit, and the 10 steps after it within 1e-6 of
// the run that never stopped.
TEST(Moe, Ep4CheckpointResumesAtAnyEp) {
  Layout one{Arch::Llama, 1, 1, false};
  one.moe = experts(4, 2), one.moe.bias_rate = 1e-3, one.lr = 1e-3f, one.steps = 20;
  g_shapes.clear();
  run(one, MPI_COMM_SELF);  // (the names)
  const std::vector<double> ref = train(one, MPI_COMM_SELF, 20, "");
  const std::string dir = std::filesystem::path(g_data).parent_path().string() + "/ep4_resume";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);  // a save makes its checkpoint directory, never the parents
  // Saved by ep 4 with ZeRO-1 (each rank its blocks), and by ep 2 without
  // (each part's first replica its experts, in a file of its own).
  Layout ep4{Arch::Llama, 1, 4, false}, ep2{Arch::Llama, 1, 4, false};
  ep4.ep = 4, ep4.zero_stage = 1, ep2.ep = 2;
  for (Layout saver : {ep4, ep2}) {
    saver.moe = one.moe, saver.lr = one.lr, saver.steps = one.steps;
    std::string step_dir;
    std::map<std::string, std::vector<float>> saved;
    const std::string at = dir + "/" + layout_name(saver);
    std::filesystem::create_directories(at, ec);
    const std::vector<double> first = train(saver, MPI_COMM_WORLD, 10, "", nullptr, at, &step_dir, &saved);
    for (int s = 0; s < 10; s++) EXPECT_NEAR(first[s], ref[s], 1e-6 * ref[s]) << layout_name(saver) << ", step " << s + 1;
    std::vector<Layout> as;
    for (Layout l : {Layout{Arch::Llama, 1, 4, false}, Layout{Arch::Llama, 1, 4, false},
                     Layout{Arch::Llama, 1, 4, false}, Layout{Arch::Llama, 2, 1, true, 2}, one}) {
      l.moe = one.moe, l.lr = one.lr, l.steps = one.steps;
      as.push_back(l);
    }
    as[0].ep = saver.ep == 4 ? 2 : 4, as[1].ep = 2, as[1].zero_stage = 1;
    for (const Layout& l : as) {
      const std::vector<double> rest = train(l, l.ranks() == 1 ? MPI_COMM_SELF : MPI_COMM_WORLD, 10, step_dir, &saved);
      for (int s = 0; s < 10; s++)
        EXPECT_NEAR(rest[s], ref[10 + s], 1e-6 * ref[10 + s])
            << layout_name(saver) << " resumed as " << layout_name(l) << ", step " << 11 + s;
    }
  }
}

// bf16 against one process. Where the rounding happens at other points
// (tp's sums), the router's inputs move by bf16's precision, enough to send
// a token whose best experts nearly tie to the other one: that changes
// those experts' gradients by the token's part (measured at tp 2: 12% of
// one expert's) and, through the token's output, its layer's others (7% of
// a norm's). There the losses stay within 1e-2 and the model's gradient as
// a whole within 0.08 (relative Frobenius); where only the order of sums
// differs (pp, dp), every tensor's as for dense layouts.
void expect_close_bf16_moe(const Result& got, const Result& ref, const std::string& what, bool same_inputs) {
  if (same_inputs) return expect_close_bf16(got, ref, what);
  ASSERT_EQ(got.losses.size(), ref.losses.size());
  for (size_t i = 0; i < ref.losses.size(); i++)
    EXPECT_NEAR(got.losses[i], ref.losses[i], 1e-2 * ref.losses[i]) << what << " step " << i + 1;
  double diff = 0, norm = 0;
  for (const auto& [name, want] : ref.grads) {
    const std::vector<float>& g = got.grads.at(name);
    for (size_t i = 0; i < want.size(); i++) diff += std::pow((double)g[i] - want[i], 2), norm += std::pow((double)want[i], 2);
  }
  const double rel = std::sqrt(diff / norm);
  EXPECT_LT(rel, 0.08) << what << ": the gradient";
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0)
    std::printf("  %-28s loss step %zu %.5f vs %.5f, the gradient's rel Frobenius err %.2e\n", what.c_str(),
                got.losses.size(), got.losses.back(), ref.losses.back(), rel);
}

// bf16 (products of bf16 copies, the router's logits and softmax in fp32):
// tp 2 (sequence parallel) x dp 2, pp 2 x dp 2 and ep 2 x dp 2 against one
// process, and recomputation still exact.
TEST(Moe, Bf16IsCloseToOneProcessAndRecomputesExactly) {
  Layout one{Arch::Llama, 1, 1, false};
  one.moe = experts(4, 2), one.precision = DType::BF16, one.lr = 1e-3f;
  g_shapes.clear();
  const Result ref = run(one, MPI_COMM_WORLD);
  Layout ep{Arch::Llama, 1, 2, false};
  ep.ep = 2;
  for (Layout l : {Layout{Arch::Llama, 2, 2, true}, Layout{Arch::Llama, 1, 2, false, 2}, ep}) {
    l.moe = one.moe, l.precision = one.precision, l.lr = one.lr;
    const Result got = run(l, MPI_COMM_WORLD);
    expect_close_bf16_moe(got, ref, layout_name(l), l.tp == 1);
    l.recompute = {RecomputeMode::Full, -1};
    expect_same_bits(run(l, MPI_COMM_WORLD), got, layout_name(l));
  }
}

// Auxiliary-loss-free balancing: after each step every router's bias has
// moved by the rate toward its experts' mean load over the step's global
// batch (a plain loop over the reported selections here), and by nothing
// else (AdamW leaves it: no gradient, no decay).
TEST(Moe, SelectionBiasMovesTowardTheMeanLoad) {
  Layout l{Arch::Llama, 1, 1, false};
  l.moe = experts(4, 2), l.moe.bias_rate = 0.01, l.steps = 3;
  g_shapes.clear();
  const Result got = run(l, MPI_COMM_SELF);
  for (int layer = 0; layer < l.n_layers; layer++) {
    std::vector<float> want(4, 0.f);
    for (const std::vector<double>& sel : got.moe_selections) {
      const double* load = &sel[(size_t)layer * 4];
      const double mean = (load[0] + load[1] + load[2] + load[3]) / 4;
      for (int e = 0; e < 4; e++) want[e] += load[e] < mean ? 0.01f : load[e] > mean ? -0.01f : 0.f;
    }
    EXPECT_EQ(got.weights.at("layers." + std::to_string(layer) + ".mlp.router.bias"), want) << "layer " << layer;
  }
}

// A capacity that drops nothing (factor E / k) trains as dropless, bit for
// bit; one that drops trains too, and reports what it dropped.
TEST(Moe, CapacityThatDropsNothingIsDropless) {
  Layout l{Arch::Llama, 1, 1, false};
  l.moe = experts(4, 2);
  g_shapes.clear();
  const Result dropless = run(l, MPI_COMM_SELF);
  l.moe.capacity_factor = 2;
  expect_same_bits(run(l, MPI_COMM_SELF), dropless, "capacity_factor 2");
  l.moe.capacity_factor = 0.5;
  const Result dropping = run(l, MPI_COMM_SELF);
  EXPECT_NE(dropping.losses, dropless.losses);
  for (double d : dropping.moe_dropped) EXPECT_GT(d, 0);
  for (double d : dropless.moe_dropped) EXPECT_EQ(d, 0);
}

// Selective and full recomputation keep the routing (and rerun the expert
// exchanges): tp 2 (sequence parallel) x dp 2, pp 2, ep 2 x dp 2, bit for bit.
TEST(Moe, RecomputationGivesTheSameBits) {
  Layout ep{Arch::Llama, 1, 2, false};
  ep.ep = 2;
  for (Layout l : {Layout{Arch::Llama, 2, 2, true}, Layout{Arch::Llama, 1, 1, false, 2}, ep}) {
    l.moe = experts(4, 2, l.tp == 1);
    Layout one{Arch::Llama, 1, 1, false};
    one.moe = l.moe;
    g_shapes.clear();
    run(one, MPI_COMM_SELF);  // (the names)
    const Result none = run(l, MPI_COMM_WORLD);
    for (RecomputeMode mode : {RecomputeMode::Selective, RecomputeMode::Full}) {
      l.recompute = {mode, -1};
      expect_same_bits(run(l, MPI_COMM_WORLD), none, layout_name(l));
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  return trainer::testing::run_mpi_tests(argc, argv, 4, 30000, 256, 0, &g_data);
}
