// The supervisor swaps a host the straggler reports name `windows` reports in
// a row (supervisor.on_straggler = "replace"): runs are counted by hand here.
#include <gtest/gtest.h>

#include "cluster/straggler_streak.h"

using namespace trainer;

namespace {
StragglerWindow report(long step, std::vector<std::string> hosts, double ratio = 2.0) {
  StragglerWindow w;
  w.step = step, w.window_steps = 10, w.hosts = hosts;
  for (size_t i = 0; i < hosts.size(); i++) w.ratios.push_back(ratio + i), w.compute_ms.push_back(100 * (ratio + i));
  return w;
}
}  // namespace

TEST(StragglerStreaks, AHostNamedInThatManyReportsInARowIsReturnedOnce) {
  StragglerStreaks s(3);
  EXPECT_FALSE(s.add(report(10, {"h1"})));
  EXPECT_FALSE(s.add(report(20, {"h1"})));
  const auto run = s.add(report(30, {"h1"}, 3.0));
  ASSERT_TRUE(run);
  EXPECT_EQ(run->host, "h1");
  EXPECT_EQ(run->steps, (std::vector<long>{10, 20, 30}));
  EXPECT_EQ(run->ratios, (std::vector<double>{2.0, 2.0, 3.0}));
  EXPECT_EQ(run->compute_ms.back(), 300.0);
  // Still named: the run goes on (the last three windows are returned).
  const auto longer = s.add(report(40, {"h1"}));
  ASSERT_TRUE(longer);
  EXPECT_EQ(longer->steps, (std::vector<long>{20, 30, 40}));
}

TEST(StragglerStreaks, AQuietWindowOrAnotherHostEndsTheRun) {
  StragglerStreaks s(3);
  EXPECT_FALSE(s.add(report(10, {"h1"})));
  EXPECT_FALSE(s.add(report(20, {"h1"})));
  // No report at 30 (quiet windows are not written): the run starts again.
  EXPECT_FALSE(s.add(report(40, {"h1"})));
  EXPECT_FALSE(s.add(report(50, {"h2"})));  // h1 not named at 50
  EXPECT_FALSE(s.add(report(60, {"h1"})));
  EXPECT_FALSE(s.add(report(70, {"h1", "h2"})));
  const auto run = s.add(report(80, {"h1"}));
  ASSERT_TRUE(run);
  EXPECT_EQ(run->host, "h1");
  EXPECT_EQ(run->steps, (std::vector<long>{60, 70, 80}));
}

TEST(StragglerStreaks, SeveralSlowRanksOfOneHostAreOneWindowAtTheWorstFigure) {
  StragglerStreaks s(1);
  const auto run = s.add(report(10, {"h1", "h1"}, 2.0));  // ratios 2 and 3
  ASSERT_TRUE(run);
  EXPECT_EQ(run->steps.size(), 1u);
  EXPECT_EQ(run->ratios, (std::vector<double>{3.0}));
  EXPECT_EQ(run->compute_ms, (std::vector<double>{300.0}));
}
