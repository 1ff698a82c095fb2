// The supervisor swaps a host the straggler reports name `windows` reports in
// a row (supervisor.on_straggler = "replace"): runs are counted by hand here.
#include <gtest/gtest.h>

#include "cluster/straggler_streak.h"

using namespace trainer;

namespace {
StragglerWindow report(long step, std::vector<std::string> hosts, double ratio = 2.0, bool first = false) {
  StragglerWindow w;
  w.step = step, w.window_steps = 10, w.first = first, w.hosts = hosts;
  for (size_t i = 0; i < hosts.size(); i++) w.ratios.push_back(ratio + i), w.compute_ms.push_back(100 * (ratio + i));
  return w;
}
}  // namespace

TEST(StragglerStreaks, AHostNamedInThatManyReportsInARowIsReturned) {
  StragglerStreaks s(3);
  EXPECT_TRUE(s.add(report(10, {"h1"})).empty());
  EXPECT_TRUE(s.add(report(20, {"h1"})).empty());
  const auto runs = s.add(report(30, {"h1"}, 3.0));
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].host, "h1");
  EXPECT_EQ(runs[0].steps, (std::vector<long>{10, 20, 30}));
  EXPECT_EQ(runs[0].ratios, (std::vector<double>{2.0, 2.0, 3.0}));
  EXPECT_EQ(runs[0].compute_ms.back(), 300.0);
  // Still named: the run goes on (the last three windows are returned).
  const auto longer = s.add(report(40, {"h1"}));
  ASSERT_EQ(longer.size(), 1u);
  EXPECT_EQ(longer[0].steps, (std::vector<long>{20, 30, 40}));
}

TEST(StragglerStreaks, AQuietWindowOrAnotherHostEndsTheRun) {
  StragglerStreaks s(3);
  EXPECT_TRUE(s.add(report(10, {"h1"})).empty());
  EXPECT_TRUE(s.add(report(20, {"h1"})).empty());
  // No report at 30 (quiet windows are not written): the run starts again.
  EXPECT_TRUE(s.add(report(40, {"h1"})).empty());
  EXPECT_TRUE(s.add(report(50, {"h2"})).empty());  // h1 not named at 50
  EXPECT_TRUE(s.add(report(60, {"h1"})).empty());
  EXPECT_TRUE(s.add(report(70, {"h1", "h2"})).empty());
  const auto runs = s.add(report(80, {"h1"}));
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].host, "h1");
  EXPECT_EQ(runs[0].steps, (std::vector<long>{60, 70, 80}));
}

TEST(StragglerStreaks, EveryHostThatGetsThereIsReturnedAndSeveralRanksOfOneAreOne) {
  StragglerStreaks s(1);
  const auto runs = s.add(report(10, {"h2", "h1", "h1"}, 2.0));  // h2 2.0; h1 3.0 and 4.0
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].host, "h1");
  EXPECT_EQ(runs[0].ratios, (std::vector<double>{4.0}));
  EXPECT_EQ(runs[0].compute_ms, (std::vector<double>{400.0}));
  EXPECT_EQ(runs[1].host, "h2");
}

TEST(StragglerStreaks, ARunFromTheLaunchsFirstWindowIsAStandingImbalanceNotADegradation) {
  StragglerStreaks s(2);
  EXPECT_TRUE(s.add(report(10, {"h1"}, 2.0, true)).empty());
  EXPECT_TRUE(s.add(report(20, {"h1", "h2"})).empty());  // h1's run began at the start; h2's now
  const auto runs = s.add(report(30, {"h1", "h2"}));
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].host, "h2");
  // h1 missed the report at 40 (a window just under the bar): the same
  // standing imbalance, not a new run (issue 66: it was swapped after it).
  EXPECT_TRUE(s.add(report(50, {"h1"})).empty());
  EXPECT_TRUE(s.add(report(60, {"h1"})).empty());
  EXPECT_TRUE(s.add(report(70, {"h1"})).empty());
  // Quiet at 80 and 90: the imbalance is over; a run from 100 on is a host degrading.
  EXPECT_TRUE(s.add(report(100, {"h1"})).empty());
  const auto later = s.add(report(110, {"h1"}));
  ASSERT_EQ(later.size(), 1u);
  EXPECT_EQ(later[0].host, "h1");
  EXPECT_EQ(later[0].steps, (std::vector<long>{100, 110}));
}
