// events.jsonl's records (runtime/run_events.h): what record() writes is the
// JSON a reader written by hand expects (field names and values spelled out
// here, not taken from the declarations), and read<E>() takes records apart
// as the supervisor, `trainer status` and `trainer report` need: another
// kind is not read as E, a field of the wrong type makes the record
// unreadable, a missing one keeps its default, an optional one is written
// only when set.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "runtime/run_events.h"

namespace trainer {
namespace {

using nlohmann::json;

json line_of(const JsonRecord& r) { return json::parse(r.str()); }

TEST(RunEvents, ARecordHasTheHeadAndTheKindsFields) {
  const json j = line_of(events::record(events::Exit{.code = 137, .seconds = 2.5, .meaning = "hang"}, 3, "launch 3 hung"));
  EXPECT_EQ(j.at("event"), "exit");
  EXPECT_EQ(j.at("launch"), 3);
  EXPECT_EQ(j.at("message"), "launch 3 hung");
  EXPECT_EQ(j.at("code"), 137);
  EXPECT_EQ(j.at("seconds"), 2.5);
  EXPECT_EQ(j.at("meaning"), "hang");
  // The time: ISO 8601 UTC, "2026-12-08T01:02:03.456Z" or the like.
  const std::string t = j.at("time");
  ASSERT_GE(t.size(), 20u);
  EXPECT_EQ(t[4], '-');
  EXPECT_EQ(t[10], 'T');
  EXPECT_EQ(t.back(), 'Z');
  EXPECT_EQ(j.size(), 7u);  // nothing else
}

TEST(RunEvents, AnOptionalFieldIsWrittenOnlyWhenSet) {
  events::DiskFull d{.reason = "No space left on device"};
  json j = line_of(events::record(d, 0, "full"));
  EXPECT_EQ(j.at("reason"), "No space left on device");
  EXPECT_FALSE(j.contains("code"));
  j = line_of(events::record(events::DiskFull{.code = 8}, 0, "full"));
  EXPECT_EQ(j.at("code"), 8);
  EXPECT_FALSE(j.contains("reason"));
  // A swap whose relaunch ended before its first step: only the head.
  EXPECT_EQ(line_of(events::record(events::SwapDone{}, 2, "no cost measured")).size(), 4u);
}

TEST(RunEvents, AReaderGetsBackWhatAWriterWrote) {
  events::Straggler s{.step = 40,
                      .window_steps = 10,
                      .window = 2,
                      .ranks = {1, 3},
                      .hosts = {"a", "b"},
                      .ratios = {1.5, 2.25},
                      .compute_ms = {150, 225},
                      .median_ms = 100};
  const json j = line_of(events::record(s, 1, "slow"));
  const std::optional<events::Straggler> back = events::read<events::Straggler>(j);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->step, 40);
  EXPECT_EQ(back->window, 2);
  EXPECT_EQ(back->hosts, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(back->ratios, (std::vector<double>{1.5, 2.25}));
  EXPECT_EQ(back->ranks, (std::vector<double>{1, 3}));
  EXPECT_EQ(events::head(j).launch, 1);
  EXPECT_EQ(events::head(j).message, "slow");
}

TEST(RunEvents, AnotherKindOrAFieldOfAnotherTypeIsNotRead) {
  const json restart = json::parse(R"({"time":"t","event":"restart","launch":2,"message":"m","restart":1,)"
                                   R"("delay_s":4,"on_spares":0})");
  EXPECT_FALSE(events::read<events::Exit>(restart));
  EXPECT_TRUE(events::is<events::Restart>(restart));
  ASSERT_TRUE(events::read<events::Restart>(restart));
  EXPECT_EQ(events::read<events::Restart>(restart)->delay_s, 4);
  const json damaged = json::parse(R"({"event":"straggler","launch":0,"hosts":"a","ratios":[1]})");
  EXPECT_FALSE(events::read<events::Straggler>(damaged));
}

TEST(RunEvents, AMissingFieldKeepsItsDefault) {
  // A record from an older trainer, without on_spares.
  const json old = json::parse(R"({"event":"restart","launch":1,"message":"m","restart":2,"delay_s":1})");
  const auto r = events::read<events::Restart>(old);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->restart, 2);
  EXPECT_EQ(r->on_spares, 0);
  EXPECT_EQ(events::head(old).time, "");
}

TEST(RunEvents, KindsWithTheSameFieldsKeepTheirOwnNames) {
  events::HostsExcludedFields x{.excluded = {"b"}, .why = "link down", .spares_in = {"c"}, .hosts = {"a", "c"}};
  EXPECT_EQ(line_of(events::record(events::Replace{x}, 1, "m")).at("event"), "replace");
  EXPECT_EQ(line_of(events::record(events::NoSpare{x}, 1, "m")).at("event"), "no_spare");
  EXPECT_EQ(line_of(events::record(events::ShrinkEvent{x}, 1, "m")).at("event"), "shrink");
  const json kept = line_of(events::record(events::StragglerKept{{.host = "h"}}, 0, "m"));
  EXPECT_EQ(kept.at("event"), "straggler_kept");
  EXPECT_FALSE(kept.contains("swapped_host"));
  EXPECT_TRUE(events::read<events::StragglerKept>(kept));
  EXPECT_FALSE(events::read<events::StragglerSwap>(kept));
}

}  // namespace
}  // namespace trainer
