// The watchdog's dump and exit (runtime/watchdog.h) and the crash report a
// signal leaves (runtime/crash_report.h), in forked children.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>

#include "runtime/crash_report.h"
#include "runtime/errors.h"
#include "runtime/flight_recorder.h"
#include "runtime/watchdog.h"
#include "tests/support/temp_dir.h"

namespace trainer {
namespace {

TEST(Watchdog, DumpsAndExitsWhenACallIsStuck) {
  const std::string dir = temp_dir("watchdog");
  EXPECT_EXIT(
      {
        FlightRecorder rec(0);
        rec.begin(rec.add_group("world", {0, 1}), "barrier", 0, -1);  // never ends
        Watchdog dog(rec, 0.3, dir + "/rank_00000.json", 0.0);
        sleep(10);
      },
      testing::ExitedWithCode(kExitCommTimeout), "watchdog: a communication call has not returned");
  const nlohmann::json j = nlohmann::json::parse(std::ifstream(dir + "/rank_00000.json"));
  EXPECT_EQ(j["calls"][0]["op"], "barrier");
  std::filesystem::remove_all(dir);
}

TEST(Watchdog, DumpsOnRequestAndCarriesOn) {
  // The SIGUSR2 path: each new request writes the recorder; the process lives on.
  const std::string dir = temp_dir("watchdog_req");
  std::atomic<int> requests{0};
  FlightRecorder rec(3);
  rec.end(rec.begin(rec.add_group("world", {0, 1, 2, 3}), "allreduce_max", 8, -1));
  rec.set_phase("training", 2);
  Watchdog dog(rec, 0, dir + "/rank_00003.json", 0.0, [&] { return requests.load(); });
  usleep(300000);
  EXPECT_FALSE(std::filesystem::exists(dir + "/rank_00003.json"));  // no request, no timeout: nothing
  requests++;
  for (int i = 0; i < 50 && !std::filesystem::exists(dir + "/rank_00003.json"); i++) usleep(20000);
  const nlohmann::json j = nlohmann::json::parse(std::ifstream(dir + "/rank_00003.json"));
  EXPECT_EQ(j["rank"], 3);
  EXPECT_EQ(j["phase"], "training of step 2");
  EXPECT_NE(j["reason"].get<std::string>().find("dump requested"), std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(CrashReport, ASignalLeavesTheReportAndStillKills) {
  const std::string dir = temp_dir("crash");
  const std::string path = dir + "/flight/crash_rank_00004.txt";  // flight/ does not exist yet
  EXPECT_EXIT(
      {
        install_crash_report(path, 4, 1234.5);
        crash_note("checkpoint save", 9);
        std::raise(SIGSEGV);
      },
      testing::KilledBySignal(SIGSEGV), "rank 4\\): died of signal 11");
  std::ifstream in(path);
  std::string summary, key;
  long long us = 0;
  std::getline(in, summary);
  in >> key >> us;
  EXPECT_NE(summary.find("rank 4 (pid "), std::string::npos) << summary;
  EXPECT_NE(summary.find("died of signal 11 (SIGSEGV"), std::string::npos) << summary;
  EXPECT_NE(summary.find("in checkpoint save of step 9"), std::string::npos) << summary;
  EXPECT_EQ(key, "job_start_us");
  EXPECT_EQ(us, 1234500000LL);
  const std::string rest((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(rest.find("backtrace:"), std::string::npos) << rest;
  std::filesystem::remove_all(dir);
}

TEST(Watchdog, QuietWhileCallsComeAndGo) {
  FlightRecorder rec(0);
  const int g = rec.add_group("world", {0});
  // 2 s of calls, twice the timeout (a watchdog blind to finished calls
  // would fire), each 50 ms gap far under it (a stall of 0.9 s on a loaded
  // machine is no hang).
  Watchdog dog(rec, 1.0, "/nonexistent/never_written.json", 0.0);
  for (int i = 0; i < 40; i++) {
    rec.end(rec.begin(g, "allreduce_sum", 8, -1));
    usleep(50000);
  }
  SUCCEED();
}

}  // namespace
}  // namespace trainer
