// The throughput watch (engine/throughput_watch.h) against a planted drop.
#include <gtest/gtest.h>

#include <vector>

#include "engine/throughput_watch.h"

namespace trainer {
namespace {

TEST(ThroughputWatch, ReportsASustainedDropOnceWithThePartThatGrew) {
  ThroughputWatch w(0.8, 10);  // warm-up 2, baseline 10, window 10
  std::vector<long> reported;
  std::string grew;
  double ratio = 0, grew_ms = 0;
  auto feed = [&](long first, long last, StepParts p) {
    for (long s = first; s <= last; s++)
      if (auto d = w.add(s, p)) reported.push_back(s), grew = d->grew, ratio = d->ratio, grew_ms = d->grew_ms;
  };
  const StepParts fast{100, 80, 15, 5}, slow_compute{200, 180, 15, 5}, slow_data{200, 80, 15, 105};
  feed(1, 2, {900, 900, 0, 0});  // warm-up steps are not the baseline
  feed(3, 29, fast);
  feed(30, 30, slow_compute);    // one slow step is no drop
  feed(31, 40, fast);
  EXPECT_TRUE(reported.empty());
  // Half the window slow: the median step is (100 + 200) / 2 = 150 ms, 67% of
  // the baseline's tokens/s, compute's median 130 ms against 80.
  feed(41, 60, slow_compute);
  ASSERT_EQ(reported, std::vector<long>{45});
  EXPECT_EQ(grew, "compute");
  EXPECT_DOUBLE_EQ(ratio, 100.0 / 150.0);
  EXPECT_DOUBLE_EQ(grew_ms, 50);
  feed(61, 70, fast);            // back above the line from step 66: a later drop is reported again
  feed(71, 80, slow_data);
  ASSERT_EQ(reported, (std::vector<long>{45, 75}));
  EXPECT_EQ(grew, "data wait");
  EXPECT_DOUBLE_EQ(grew_ms, 50);
  ThroughputWatch off(0, 10);
  for (long s = 1; s < 100; s++) EXPECT_FALSE(off.add(s, s < 50 ? fast : slow_compute));
}

}  // namespace
}  // namespace trainer
