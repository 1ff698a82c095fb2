// supervisor.elastic and `plan --nodes`: a job on fewer nodes keeps the ranks
// per node, tp, pp and cp, and the global batch; dp and the micro-batches per
// replica follow by hand here.
#include <gtest/gtest.h>

#include "app/recipe.h"
#include "planning/memory_fit.h"
#include "planning/shrink.h"

using namespace trainer;

namespace {
Recipe demo(std::vector<std::string> sets) {
  sets.insert(sets.begin(), {"model.n_layers=2", "training.global_batch=16", "training.micro_batch=2"});
  return load_recipe("configs/demo.toml", sets, 0, false);
}
}  // namespace

TEST(Shrink, FewerNodesAreFewerReplicasWithTheSameGlobalBatch) {
  // 8 ranks on 4 nodes: dp 4 x tp 2, 2 micro-batches of 2 per replica.
  const Recipe r = demo({"parallel.dp=4", "parallel.tp=2", "parallel.pp=1"});
  ASSERT_EQ(r.accum_steps(), 2);
  for (const auto& [nodes, dp] : std::vector<std::pair<int, int>>{{2, 2}, {1, 1}}) {
    const Shrink s = shrink_job(r, 8, 4, nodes, false);
    ASSERT_TRUE(s.ok) << s.why;
    EXPECT_EQ(s.ranks, 2 * nodes);
    EXPECT_EQ(s.recipe.parallel.grid.dp, dp);
    EXPECT_EQ(s.recipe.parallel.grid.tp, 2);
    EXPECT_EQ(s.recipe.training.global_batch, 16);
    EXPECT_EQ(s.recipe.accum_steps(), 16 / (2 * dp));
  }
}

TEST(Shrink, ReplicasThatDoNotDivideTheBatchOrTheRanksAreRefusedWithTheReason) {
  const Recipe r = demo({"parallel.dp=4", "parallel.tp=2", "parallel.pp=1"});
  const Shrink three = shrink_job(r, 8, 4, 3, false);  // dp 3: 16 / (2 x 3) is not whole
  EXPECT_FALSE(three.ok);
  EXPECT_NE(three.why.find("global_batch"), std::string::npos) << three.why;
  EXPECT_NE(three.why.find("3 node(s) of 2 rank(s) hold 6 rank(s) at dp 3"), std::string::npos) << three.why;
  const Shrink two = shrink_job(r, 8, 4, 2, false);  // dp 2: 4 micro-batches each
  ASSERT_TRUE(two.ok) << two.why;
  EXPECT_EQ(two.ranks, 4);
  EXPECT_EQ(two.recipe.parallel.grid.dp, 2);
  EXPECT_EQ(two.recipe.accum_steps(), 4);
  // One rank per node with tp 2 across two nodes: one node holds no replica.
  const Recipe wide = demo({"parallel.dp=1", "parallel.tp=2", "parallel.pp=1"});
  const Shrink half = shrink_job(wide, 2, 2, 1, false);
  EXPECT_FALSE(half.ok);
  EXPECT_NE(half.why.find("not a multiple of one replica's pp x cp x tp = 2"), std::string::npos) << half.why;
  // launch.nodes (and launch.ranks when given) follow, for the job's own rules.
  const Recipe placed = demo({"parallel.dp=4", "parallel.tp=2", "parallel.pp=1", "launch.nodes=4"});
  const Shrink on_two = shrink_job(placed, 8, 4, 2, false);
  ASSERT_TRUE(on_two.ok) << on_two.why;
  EXPECT_EQ(on_two.recipe.launch.nodes, 2);
  EXPECT_EQ(on_two.recipe.launch.ranks, 0);
  const Shrink counted = shrink_job(demo({"parallel.dp=4", "parallel.tp=2", "parallel.pp=1", "launch.nodes=4",
                                          "launch.ranks=8"}), 8, 4, 2, false);
  ASSERT_TRUE(counted.ok) << counted.why;
  EXPECT_EQ(counted.recipe.launch.ranks, 4);
  EXPECT_FALSE(shrink_job(r, 8, 4, 0, false).ok);
  EXPECT_FALSE(shrink_job(r, 8, 4, 5, false).ok);
}

TEST(Shrink, AShrinkThatWouldNotFitMemoryIsRefusedWithThePlansReason) {
  // ZeRO-1, dp 2 on two nodes of one rank: one replica keeps all of AdamW's
  // state, twice each rank's half of it before.
  const Recipe r = demo({"parallel.dp=2", "parallel.tp=1", "parallel.pp=1", "parallel.zero_stage=1"});
  const Shrink unchecked = shrink_job(r, 2, 2, 1, false);
  ASSERT_TRUE(unchecked.ok) << unchecked.why;
  const MemoryFit before = check_memory_within(r, -1, true, 1e15);
  const MemoryFit after = check_memory_within(unchecked.recipe, -1, true, 1e15);
  const double opt_before = before.plan.bytes[(int)Mem::Optimizer], opt_after = after.plan.bytes[(int)Mem::Optimizer];
  EXPECT_NEAR(opt_after, 2 * opt_before, 1e-3 * opt_after);
  EXPECT_GT(after.need, before.need);
  EXPECT_DOUBLE_EQ(after.need, after.plan.total() + after.checkpoint + after.process);
  // A node that holds the dp 2 rank but not the dp 1 one: refused, with the plan's reason.
  const double between = (before.need + after.need) / 2;
  const Shrink refused = shrink_job(r, 2, 2, 1, true, between);
  EXPECT_FALSE(refused.ok);
  const MemoryFit fit = check_memory_within(unchecked.recipe, -1, true, between);
  EXPECT_FALSE(fit.fits);
  EXPECT_NE(refused.why.find("1 node(s) of 1 rank(s) hold 1 rank(s) at dp 1: " + fit.message), std::string::npos)
      << refused.why;
  EXPECT_NE(fit.message.find("per rank given. Try: "), std::string::npos) << fit.message;
  EXPECT_TRUE(check_memory_within(r, -1, true, between).fits);
  EXPECT_TRUE(shrink_job(r, 2, 2, 1, true, after.need).ok);
}
