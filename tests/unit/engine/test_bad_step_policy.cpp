// training.on_nan / on_spike's decisions (engine/bad_step_policy.h) alone,
// on scripted steps: the spike limit is the median of the last spike_window
// applied losses (counted by hand here), a run of kInARow skipped or rolled
// back bad steps ends the run, a checkpoint every rollback to which meets a
// bad step at once is named unusable, and good steps and saves start the
// runs again.
#include <gtest/gtest.h>

#include <string>

#include "engine/bad_step_policy.h"

namespace trainer {
namespace {

using BadStep = TrainingSection::BadStep;

TrainingSection training(BadStep on_nan, BadStep on_spike = BadStep::Stop) {
  TrainingSection t;
  t.on_nan = on_nan, t.on_spike = on_spike, t.spike_factor = 3, t.spike_window = 4;
  return t;
}

// "ckpt/step_00000007" -> 7, as ckpt/checkpoint.h's checkpoint_step reads a step directory.
long step_of(const std::string& dir) { return std::stol(dir.substr(dir.rfind('_') + 1)); }

TEST(BadStepPolicy, TheSpikeLimitIsTheMedianOfTheLastAppliedLosses) {
  const TrainingSection t = training(BadStep::Stop);
  BadStepPolicy p(t);
  for (double loss : {5.0, 1.0, 3.0}) {
    p.applied(loss);
    EXPECT_EQ(p.spike_median(), 0);  // fewer than spike_window = 4
  }
  p.applied(2.0);
  EXPECT_DOUBLE_EQ(p.spike_median(), 2.5);  // 1 2 3 5
  p.applied(9.0);                            // 5 falls out: 1 2 3 9
  EXPECT_DOUBLE_EQ(p.spike_median(), 2.5);
  p.applied(10.0);  // 2 3 9 10
  EXPECT_DOUBLE_EQ(p.spike_median(), 6);
  TrainingSection off = t;
  off.spike_factor = 0;
  BadStepPolicy q(off);
  for (double loss : {1.0, 1.0, 1.0, 1.0, 1.0}) q.applied(loss);
  EXPECT_EQ(q.spike_median(), 0);
}

TEST(BadStepPolicy, EachKindOfBadStepHasItsOwnKey) {
  const TrainingSection t = training(BadStep::Skip, BadStep::Rollback);
  const BadStepPolicy p(t);
  EXPECT_EQ(p.policy(true), BadStep::Skip);
  EXPECT_EQ(p.policy(false), BadStep::Rollback);
  EXPECT_STREQ(p.key(true), "training.on_nan");
  EXPECT_STREQ(p.key(false), "training.on_spike");
}

TEST(BadStepPolicy, SkippingStopsAfterThreeNonfiniteStepsInARowOrOnBadWeights) {
  const TrainingSection t = training(BadStep::Skip, BadStep::Skip);
  BadStepPolicy p(t);
  for (int i = 1; i <= 3; i++) EXPECT_EQ(p.on_skip(true, true), BadStepPolicy::Skip::Skip) << i;
  EXPECT_EQ(p.on_skip(true, true), BadStepPolicy::Skip::StopInARow);
  EXPECT_EQ(p.skipped_in_a_row(), 4);
  // A good step between them starts the count again; spikes are not counted.
  BadStepPolicy q(t);
  for (int i = 0; i < 3; i++) q.on_skip(true, true);
  q.applied(1.0);
  for (int i = 0; i < 3; i++) EXPECT_EQ(q.on_skip(true, true), BadStepPolicy::Skip::Skip);
  for (int i = 0; i < 5; i++) EXPECT_EQ(q.on_skip(false, true), BadStepPolicy::Skip::Skip);
  // Weights that are not finite: no skipping recovers.
  EXPECT_EQ(BadStepPolicy(t).on_skip(true, false), BadStepPolicy::Skip::StopWeights);
}

TEST(BadStepPolicy, RollbacksStopAfterThreeInARowUnlessASaveCameBetween) {
  const TrainingSection t = training(BadStep::Rollback);
  BadStepPolicy p(t);
  EXPECT_EQ(p.on_rollback(true, ""), BadStepPolicy::Rollback::StopNoCheckpoint);
  for (int i = 1; i <= 3; i++) EXPECT_EQ(p.on_rollback(true, "c/step_00000010"), BadStepPolicy::Rollback::Rollback) << i;
  EXPECT_EQ(p.on_rollback(true, "c/step_00000010"), BadStepPolicy::Rollback::StopInARow);
  BadStepPolicy q(t);
  for (int i = 0; i < 3; i++) q.on_rollback(true, "c/step_00000010");
  q.saved();
  EXPECT_EQ(q.on_rollback(true, "c/step_00000020"), BadStepPolicy::Rollback::Rollback);
  // on_spike = "stop": no rollback.
  EXPECT_EQ(q.on_rollback(false, "c/step_00000020"), BadStepPolicy::Rollback::StopAsked);
}

TEST(BadStepPolicy, ACheckpointEveryRollbackToWhichMeetsABadStepAtOnceIsUnusable) {
  const TrainingSection t = training(BadStep::Rollback);
  BadStepPolicy p(t);
  const std::string c10 = "c/step_00000010";
  // Rolled back to step 10; step 11 is bad at once, three times.
  EXPECT_EQ(p.unusable_target(true, 11, step_of), "");  // nothing rolled back to yet
  ASSERT_EQ(p.on_rollback(true, c10), BadStepPolicy::Rollback::Rollback);
  EXPECT_EQ(p.unusable_target(true, 11, step_of), "");
  ASSERT_EQ(p.on_rollback(true, c10), BadStepPolicy::Rollback::Rollback);
  EXPECT_EQ(p.unusable_target(true, 11, step_of), "");
  ASSERT_EQ(p.on_rollback(true, c10), BadStepPolicy::Rollback::Rollback);
  EXPECT_EQ(p.unusable_target(true, 11, step_of), c10);
  // Set aside: the rollbacks in a row start again (to an older checkpoint).
  EXPECT_EQ(p.on_rollback(true, "c/step_00000005"), BadStepPolicy::Rollback::Rollback);
  // A bad step later than the one right after it, or a spike, is not this.
  BadStepPolicy q(t);
  q.on_rollback(true, c10);
  for (int i = 0; i < 5; i++) {
    EXPECT_EQ(q.unusable_target(true, 14, step_of), "");
    EXPECT_EQ(q.unusable_target(false, 11, step_of), "");
  }
  // A good step between the rollbacks starts the count again.
  BadStepPolicy g(t);
  g.on_rollback(true, c10);
  g.unusable_target(true, 11, step_of);
  g.unusable_target(true, 11, step_of);
  g.applied(1.0);
  EXPECT_EQ(g.unusable_target(true, 11, step_of), "");
  EXPECT_EQ(g.unusable_target(true, 11, step_of), "");
  EXPECT_EQ(g.unusable_target(true, 11, step_of), c10);
}

}  // namespace
}  // namespace trainer
