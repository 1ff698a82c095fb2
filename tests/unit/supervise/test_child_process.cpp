// The supervisor's children (supervise/child_process.h): waited for with a limit,
// and ended early when the caller says the work is over though the launcher
// lingers (a health check's verdict recorded while mpirun waits for a host
// it lost).
#include <gtest/gtest.h>

#include <chrono>

#include "supervise/child_process.h"

namespace trainer {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST(ChildProcess, AChildThatEndsGivesItsCode) {
  const ChildEnd end = wait_children({spawn({"sh", "-c", "exit 10"}, {})}, 30, "mpirun", [] { return false; })[0];
  EXPECT_EQ(end.code, 10);
  EXPECT_FALSE(end.over || end.timed_out || end.stopped);
}

TEST(ChildProcess, OverEndsTheWaitOnALingeringChild) {
  const auto t0 = std::chrono::steady_clock::now();
  const ChildEnd end =
      wait_children({spawn({"sleep", "60"}, {})}, 60, "mpirun", [&] { return seconds_since(t0) > 0.5; })[0];
  EXPECT_TRUE(end.over);
  EXPECT_FALSE(end.timed_out);
  EXPECT_EQ(end.code, 128 + 9);
  EXPECT_LT(seconds_since(t0), 5.0);  // asked about once a second, not at the limit
}

TEST(ChildProcess, TheLimitStillEndsAChildWithoutOver) {
  const auto t0 = std::chrono::steady_clock::now();
  const ChildEnd end = wait_children({spawn({"sleep", "60"}, {})}, 0.5, "mpirun")[0];
  EXPECT_TRUE(end.timed_out);
  EXPECT_FALSE(end.over);
  EXPECT_LT(seconds_since(t0), 5.0);
}

}  // namespace
}  // namespace trainer
