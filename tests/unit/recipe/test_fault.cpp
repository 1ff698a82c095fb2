// Fault specs (recipe/fault.h): every kind parsed with its keys, bad specs
// refused naming the item, and a plan keeping to its rank and launch.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "recipe/fault.h"
#include "runtime/errors.h"

namespace trainer {
namespace {

TEST(Faults, ParsesEveryKindAndItsKeys) {
  const auto f = parse_faults("crash rank=3 step=7; hang rank=1 step=4 launch=all;slow rank=2 ms=150 step=3;"
                              " nan step=5; ckpt_kill point=renamed step=10 launch=2; ckpt_hang rank=2 step=5;"
                              "freeze rank=1 step=3; segv rank=4 step=2",
                              "test");
  ASSERT_EQ(f.size(), 8u);
  EXPECT_EQ(f[0].kind, Fault::Crash);
  EXPECT_EQ(f[0].rank, 3);
  EXPECT_EQ(f[0].step, 7);
  EXPECT_EQ(f[0].launch, 0);
  EXPECT_EQ(f[1].kind, Fault::Hang);
  EXPECT_EQ(f[1].launch, -1);
  EXPECT_EQ(f[2].kind, Fault::Slow);
  EXPECT_EQ(f[2].ms, 150);
  EXPECT_EQ(f[3].kind, Fault::Nan);
  EXPECT_EQ(f[3].rank, 0);
  EXPECT_EQ(f[4].point, "renamed");
  EXPECT_EQ(f[4].launch, 2);
  EXPECT_EQ(f[5].kind, Fault::CkptHang);
  EXPECT_EQ(f[5].rank, 2);
  EXPECT_EQ(f[6].kind, Fault::Freeze);
  EXPECT_EQ(f[6].step, 3);
  EXPECT_EQ(f[7].kind, Fault::Segv);
  EXPECT_EQ(f[7].rank, 4);
}

TEST(Faults, RejectsBadSpecsWithTheItem) {
  for (const char* bad : {"crash step=3", "explode rank=1", "hang rank=1 step=x", "slow rank=1",
                          "ckpt_kill point=nowhere step=1", "nan step=0", "ckpt_hang step=5", "freeze rank=1", "crash rank=1 step=2 colour=red"}) {
    try {
      parse_faults(bad, "TRAINER_FAULT");
      ADD_FAILURE() << "accepted: " << bad;
    } catch (const RecipeError& e) {
      EXPECT_NE(std::string(e.what()).find("TRAINER_FAULT"), std::string::npos) << e.what();
    }
  }
}

TEST(Faults, PlanKeepsThisRankAndLaunch) {
  auto f = parse_faults("crash rank=3 step=7; crash rank=1 step=2; slow rank=3 ms=10 step=4; "
                        "slow rank=3 ms=5; hang rank=3 step=9 launch=1; ckpt_kill point=renamed step=5",
                        "t");
  const FaultPlan p(f, 3, 0);
  EXPECT_EQ(p.at(Fault::Crash, 7).size(), 1u);
  EXPECT_TRUE(p.at(Fault::Crash, 2).empty());        // rank 1's
  EXPECT_TRUE(p.at(Fault::Hang, 9).empty());         // launch 1's
  EXPECT_EQ(p.at(Fault::CkptKill, 5).size(), 1u);    // every rank
  EXPECT_EQ(p.slow_ms(3), 5);
  EXPECT_EQ(p.slow_ms(4), 15);
  EXPECT_EQ(FaultPlan(f, 3, 1).at(Fault::Hang, 9).size(), 1u);
  EXPECT_TRUE(FaultPlan(f, 3, 1).at(Fault::Crash, 7).empty());
}

// setup_fail names a step of set-up: each of kSetupSteps, nothing else.
TEST(Faults, SetupFailNamesAStepOfSetUp) {
  for (const char* step : kSetupSteps) {
    const auto f = parse_faults(std::string("setup_fail rank=1 point=") + step, "test");
    ASSERT_EQ(f.size(), 1u);
    EXPECT_EQ(f[0].kind, Fault::SetupFail);
    EXPECT_EQ(f[0].point, step);
    EXPECT_EQ(f[0].rank, 1);
  }
  EXPECT_THROW(parse_faults("setup_fail rank=1 point=nowhere", "test"), RecipeError);
  EXPECT_THROW(parse_faults("setup_fail point=grid", "test"), RecipeError);  // which rank
  EXPECT_EQ(FaultPlan(parse_faults("setup_fail rank=1 point=grid", "test"), 0, 0).at(Fault::SetupFail, 0).size(), 0u);
  EXPECT_EQ(FaultPlan(parse_faults("setup_fail rank=1 point=grid", "test"), 1, 0).at(Fault::SetupFail, 0).size(), 1u);
}

}  // namespace
}  // namespace trainer
