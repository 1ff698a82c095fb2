// The flight recorder's bookkeeping and JSON (runtime/flight_recorder.h).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>

#include "runtime/flight_recorder.h"

namespace trainer {
namespace {

// A data collective queued without blocking the host stays "in flight" (the
// watchdog's measure) from its enqueue until wait() sees it complete, even
// while other calls start and finish.
TEST(FlightRecorder, AnEnqueuedCollectiveIsInFlightUntilItCompletes) {
  FlightRecorder rec(0);
  const int dp = rec.add_group("dp", {0, 1});
  const uint64_t queued = rec.begin(dp, "allreduce_sum", 1024, -1, FlightRecorder::Enqueued);
  const double enqueued_at = rec.status().call_start;
  EXPECT_TRUE(rec.status().in_call);
  usleep(2000);
  rec.end(rec.begin(dp, "allreduce_sum", 8, -1));  // a control call comes and goes meanwhile
  EXPECT_TRUE(rec.status().in_call);
  EXPECT_EQ(rec.status().call_start, enqueued_at);  // the oldest one not completed
  nlohmann::json j = nlohmann::json::parse(rec.to_json("test"));
  EXPECT_EQ(j["calls"][0]["queued"], true);
  EXPECT_TRUE(j["calls"][0]["end"].is_null());
  EXPECT_TRUE(j["calls"][0]["completed"].is_null());
  EXPECT_EQ(j["calls"][0]["enqueued"], j["calls"][0]["start"]);
  EXPECT_EQ(j["groups"][0]["started"], 2);
  EXPECT_EQ(j["groups"][0]["completed"], 1);
  rec.end(queued);
  EXPECT_FALSE(rec.status().in_call);
  j = nlohmann::json::parse(rec.to_json("test"));
  EXPECT_FALSE(j["calls"][0]["end"].is_null());
  EXPECT_EQ(j["calls"][0]["completed"], j["calls"][0]["end"]);
  EXPECT_EQ(j["groups"][0]["completed"], 2);
}

TEST(FlightRecorder, CountsCollectivesPerGroupAndKeepsTheNewest) {
  FlightRecorder rec(5, 4);
  const int tp = rec.add_group("tp", {4, 5});
  const int pp = rec.add_group("pp", {1, 5});
  for (int i = 0; i < 5; i++) rec.end(rec.begin(tp, "allreduce_sum", 64, -1));
  rec.begin(pp, "irecv", 32, 1, FlightRecorder::Post);
  const uint64_t w = rec.begin(pp, "wait_recv", 32, 1, FlightRecorder::Wait);
  const auto st = rec.status();
  EXPECT_TRUE(st.in_call);
  rec.set_phase("checkpoint save", 5);
  const nlohmann::json j = nlohmann::json::parse(rec.to_json("test"));
  EXPECT_EQ(j["rank"], 5);
  EXPECT_EQ(j["phase"], "checkpoint save of step 5");
  EXPECT_EQ(j["groups"][0]["started"], 5);
  EXPECT_EQ(j["groups"][0]["completed"], 5);
  EXPECT_EQ(j["groups"][1]["started"], 0);  // point-to-point is not in the collective sequence
  ASSERT_EQ(j["calls"].size(), 4u);         // the ring's capacity: the newest four, oldest first
  EXPECT_EQ(j["calls"][0]["seq"], 4);
  EXPECT_EQ(j["calls"][1]["group_seq"], 5);
  EXPECT_EQ(j["calls"][2]["op"], "irecv");
  EXPECT_FALSE(j["calls"][2]["end"].is_null());  // posting does not block
  EXPECT_TRUE(j["calls"][3]["end"].is_null());   // the wait is in flight
  EXPECT_EQ(j["calls"][3]["peer"], 1);
  rec.end(w);
  EXPECT_FALSE(rec.status().in_call);
}

}  // namespace
}  // namespace trainer
