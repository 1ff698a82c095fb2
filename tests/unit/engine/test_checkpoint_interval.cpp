#include <gtest/gtest.h>

#include "engine/checkpoint_interval.h"

using namespace trainer;

// checkpoint.every = "auto": Young's sqrt(2 d M) against numbers worked by
// hand, Daly's refinement close to it when the save is short against the
// MTBF, and the interval in steps following the measured save time.
TEST(CheckpointInterval, YoungsIntervalFollowsTheMeasuredSaveTime) {
  EXPECT_NEAR(young_interval_s(60, 86400), 3219.94, 0.01);  // 1 min saves, 1 day MTBF: 53.7 min
  EXPECT_NEAR(young_interval_s(2, 3600), 120.0, 1e-9);
  EXPECT_NEAR(daly_interval_s(60, 86400) / young_interval_s(60, 86400), 1.0, 0.02);
  EXPECT_DOUBLE_EQ(daly_interval_s(10000, 3600), 3600);  // saves longer than 2 MTBF: once per MTBF
  AutoCheckpointInterval a(1.0, 2.0);                     // MTBF 1 h; 2 s assumed before a save is timed
  for (int i = 0; i < 5; i++) a.stepped(1000);           // 1 s steps
  EXPECT_NEAR(a.steps(), daly_interval_s(2, 3600), 1);    // about 120 steps
  a.saved(8000);                                          // the first save took 8 s: the interval doubles
  EXPECT_NEAR(a.steps(), daly_interval_s(8, 3600), 1);
  EXPECT_NEAR((double)a.steps() / young_interval_s(8, 3600), 1.0, 0.03);
  const ExpectedLoss l = expected_loss(240, 8, 3600);
  EXPECT_NEAR(l.saves, 8.0 / 248, 1e-12);
  EXPECT_NEAR(l.redone, 248.0 / 7200, 1e-12);
}

