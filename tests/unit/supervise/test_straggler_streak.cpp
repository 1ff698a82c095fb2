// The supervisor swaps a host the straggler reports name `windows` reports in
// a row (supervisor.on_straggler = "replace"): runs are counted by hand here.
// A run on ranks an earlier swap moved follows them (issue 66 item 10).
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "supervise/straggler_streak.h"

using namespace trainer;

namespace {
StragglerWindow report(long step, std::vector<std::string> hosts, double ratio = 2.0, bool first = false) {
  StragglerWindow w;
  w.step = step, w.window_steps = 10, w.first = first, w.hosts = hosts;
  for (size_t i = 0; i < hosts.size(); i++) w.ratios.push_back(ratio + i), w.compute_ms.push_back(100 * (ratio + i));
  return w;
}

// A report naming (host, world rank) pairs, each 2x its stage.
StragglerWindow ranked(long step, std::vector<std::pair<std::string, int>> named, bool first = false) {
  StragglerWindow w;
  w.step = step, w.window_steps = 10, w.first = first;
  for (const auto& [h, k] : named)
    w.hosts.push_back(h), w.ranks.push_back(k), w.ratios.push_back(2.0), w.compute_ms.push_back(200.0);
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

// Issue 66 item 10: launch 0 swaps h2 off rank 1; in the relaunch rank 1,
// now on h3, is named again: the slowness is the rank's, not a host to swap.
TEST(StragglerStreaks, ARankSlowAgainOnAnotherHostAfterItsSwapFollowsTheRank) {
  StragglerStreaks before(2);
  EXPECT_TRUE(before.add(ranked(10, {{"h2", 1}})).empty());
  const auto swapped = before.add(ranked(20, {{"h2", 1}}));
  ASSERT_EQ(swapped.size(), 1u);
  EXPECT_FALSE(swapped[0].follows) << "no earlier swap: a host to swap";
  EXPECT_EQ(swapped[0].ranks, std::set<int>{1});
  const StragglerSwap swap = StragglerStreaks::swap_of(swapped[0], 0);
  EXPECT_EQ(swap.host, "h2");
  EXPECT_EQ(swap.launch, 0);
  EXPECT_EQ(swap.step, 20);
  EXPECT_EQ(swap.ranks, std::set<int>{1});
  // The relaunch: rank 1 on h3 (the spare), named two reports in a row, not from the first window.
  StragglerStreaks after(2, {swap});
  EXPECT_TRUE(after.add(ranked(30, {{"h3", 1}})).empty());
  const auto again = after.add(ranked(40, {{"h3", 1}}));
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].host, "h3");
  EXPECT_FALSE(again[0].standing);
  ASSERT_TRUE(again[0].follows) << "the slowness followed rank 1: not a host to swap";
  EXPECT_EQ(again[0].follows->host, "h2");
  EXPECT_EQ(again[0].follows->launch, 0);
  EXPECT_EQ(again[0].follows->step, 20);
}

TEST(StragglerStreaks, ARankSlowFromTheRelaunchsFirstWindowAfterItsSwapIsReported) {
  StragglerStreaks s(2, {StragglerSwap{"h2", 0, 20, {1}}});
  EXPECT_TRUE(s.add(ranked(10, {{"h3", 1}}, true)).empty());
  const auto runs = s.add(ranked(20, {{"h3", 1}}));
  ASSERT_EQ(runs.size(), 1u) << "standing, but on the swapped rank: returned to be reported";
  EXPECT_TRUE(runs[0].standing);
  ASSERT_TRUE(runs[0].follows);
  EXPECT_EQ(runs[0].follows->host, "h2");
  // A standing run on another rank is still never returned.
  StragglerStreaks t(2, {StragglerSwap{"h2", 0, 20, {1}}});
  EXPECT_TRUE(t.add(ranked(10, {{"h3", 0}}, true)).empty());
  EXPECT_TRUE(t.add(ranked(20, {{"h3", 0}})).empty());
}

TEST(StragglerStreaks, AnotherRankTheOldHostOrAReportWithoutRanksIsAHostToSwap) {
  const StragglerSwap swap{"h2", 0, 20, {1}};
  auto second = [&](const StragglerWindow& a, const StragglerWindow& b) {
    StragglerStreaks s(2, {swap});
    s.add(a);
    return s.add(b);
  };
  auto plain = [](const std::vector<StragglerRun>& r) { return r.size() == 1 && !r[0].follows; };
  EXPECT_TRUE(plain(second(ranked(10, {{"h3", 0}}), ranked(20, {{"h3", 0}})))) << "another rank";
  EXPECT_TRUE(plain(second(ranked(10, {{"h2", 1}}), ranked(20, {{"h2", 1}})))) << "its old host (readmitted)";
  EXPECT_TRUE(plain(second(ranked(10, {{"h3", 1}, {"h3", 2}}), ranked(20, {{"h3", 1}}))))
      << "the new host also slows a rank the swap did not move";
  EXPECT_TRUE(plain(second(report(10, {"h3"}), report(20, {"h3"})))) << "no ranks in the reports: cannot tell";
  // A report whose ranks do not match its hosts (one per named rank) gives none either.
  StragglerWindow odd = ranked(20, {{"h3", 1}});
  odd.ranks.push_back(1);
  EXPECT_TRUE(plain(second(ranked(10, {{"h3", 1}}), odd))) << "ranks and hosts of different lengths: cannot tell";
}
