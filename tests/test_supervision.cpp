// Supervision pieces on their own: fault specs, the flight recorder's
// bookkeeping and JSON, the watchdog's exit, and `trainer diagnose` on
// hand-written dumps (a rank behind, a collective-order mismatch). The whole
// chain through mpirun and Slurm is tests/supervise_check.py and
// tests/slurm_check.py.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "recipe/fault.h"
#include "engine/throughput_watch.h"
#include "runtime/crash_report.h"
#include "runtime/errors.h"
#include "runtime/flight_recorder.h"
#include "runtime/metrics.h"
#include "engine/step_loop.h"
#include "model/flops.h"
#include "runtime/peer_probe.h"
#include "runtime/watchdog.h"

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

std::string temp_dir(const char* name) {
  const std::string d = std::filesystem::temp_directory_path() / (std::string(name) + std::to_string(getpid()));
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

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

// A local port that answers no one: a listener that never accepts, its
// queue filled (Linux then drops new connection requests unanswered).
int silent_port(std::vector<int>& fds) {
  const int l = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = inet_addr("127.0.0.2");
  socklen_t len = sizeof a;
  bind(l, reinterpret_cast<sockaddr*>(&a), sizeof a);
  listen(l, 0);
  getsockname(l, reinterpret_cast<sockaddr*>(&a), &len);
  fds.push_back(l);
  for (int i = 0; i < 3; i++) {
    const int c = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    connect(c, reinterpret_cast<sockaddr*>(&a), sizeof a);
    fds.push_back(c);
  }
  usleep(100000);
  return ntohs(a.sin_port);
}

TEST(PeerProbe, ReachesAListeningHostNotASilentOne) {
  // Rank 1 listens on 127.0.0.1 (another probe's port); rank 2's address
  // answers nothing; rank 3 shares rank 0's host.
  PeerProbe a, b;
  std::vector<int> fds;
  const std::string port = b.record().substr(0, b.record().find(' '));
  a.set_peers({a.record(), port + " lo=127.0.0.1", std::to_string(silent_port(fds)) + " lo=127.0.0.2", a.record()}, 0);
  const auto t0 = std::chrono::steady_clock::now();
  const nlohmann::json j = nlohmann::json::parse("{" + a.check({1, 2, 3}, 1.0) + "}").at("network");
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(j.at("reached"), nlohmann::json::array({1})) << j;
  EXPECT_EQ(j.at("unreached"), nlohmann::json::array({2})) << j;
  EXPECT_EQ(j.at("host_ranks"), nlohmann::json::array({0, 3})) << j;
  EXPECT_TRUE(j.at("links_down").empty()) << j;
  EXPECT_LT(took, 3.0);  // the 1 s probe timeout, not the kernel's SYN retries (3 s, 7 s, ...)
  for (int fd : fds) close(fd);
}

// `trainer diagnose` on dumps written by hand.
struct Dump {
  int rank;
  long tp_started;
  std::string calls;  // JSON array body
  std::string phase = "training of step 4";
  double stalled_s = 0;
  std::string network = "";  // the watchdog's network probe (runtime/peer_probe.h), if any
};

std::string write_dumps(const char* name, const std::vector<Dump>& dumps) {
  const std::string dir = temp_dir(name);
  std::filesystem::create_directories(dir + "/flight");
  for (const Dump& d : dumps) {
    char path[256];
    std::snprintf(path, sizeof path, "%s/flight/rank_%05d.json", dir.c_str(), d.rank);
    std::ofstream(path) << "{\"rank\": " << d.rank << ", \"job_start\": 100, \"launch\": 0, \"time\": 200, "
                        << "\"step\": 3, \"reason\": \"t\", \"phase\": \"" << d.phase
                        << "\", \"process_stalled_s\": " << d.stalled_s
                        << ", \"stopped_by_fault_injection\": false, \"groups\": ["
                        << "{\"name\": \"world\", \"members\": [0, 1, 2], \"started\": 0, \"completed\": 0}, "
                        << "{\"name\": \"tp\", \"members\": [0, 1, 2], \"started\": " << d.tp_started
                        << ", \"completed\": 0}], \"calls\": [" << d.calls << "]"
                        << (d.network.empty() ? "" : ", \"network\": " + d.network) << "}\n";
  }
  return dir;
}

std::string call(long gseq, const char* op, long bytes, const char* end) {
  return "{\"seq\": " + std::to_string(gseq) + ", \"group\": 1, \"group_seq\": " + std::to_string(gseq) +
         ", \"op\": \"" + op + "\", \"bytes\": " + std::to_string(bytes) + ", \"peer\": -1, \"start\": 150, \"end\": " +
         end + "}";
}

// `trainer COMMAND DIR`: exit code and output.
std::pair<int, std::string> trainer_on(const char* command, const std::string& dir) {
  FILE* p = popen((std::string(TRAINER_BIN) + " " + command + " " + dir + " 2>&1").c_str(), "r");
  std::string out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  const int st = pclose(p);
  return {WEXITSTATUS(st), out};
}
std::pair<int, std::string> diagnose(const std::string& dir) { return trainer_on("diagnose", dir); }
std::pair<int, std::string> status(const std::string& dir) { return trainer_on("status", dir); }

TEST(Diagnose, NamesTheRankBehindAndTheCall) {
  // Ranks 0 and 2 wait in tp call #8; rank 1 finished #7 and never joined.
  const std::string dir = write_dumps(
      "diag_behind", {{0, 8, call(7, "allgather", 64, "160") + "," + call(8, "reduce_scatter_sum", 4096, "null")},
                      {1, 7, call(7, "allgather", 64, "160")},
                      {2, 8, call(7, "allgather", 64, "160") + "," + call(8, "reduce_scatter_sum", 4096, "null")}});
  const auto [code, out] = diagnose(dir);
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("verdict: rank 1 is behind."), std::string::npos) << out;
  EXPECT_NE(out.find("rank 0 waits in tp reduce_scatter_sum #8 (4096 bytes) (training of step 4), which rank 1 "
                     "has not joined"),
            std::string::npos) << out;
  std::filesystem::remove_all(dir);
}

TEST(Diagnose, SaysWhatTheRankBehindWasDoing) {
  // Ranks 0 and 1 wait in call #8 (a checkpoint commit's agreement); rank 2
  // never reached it: it was writing its checkpoint file.
  const std::string dir = write_dumps(
      "diag_phase", {{0, 8, call(7, "allgather", 64, "160") + "," + call(8, "allreduce_max", 8, "null"),
                      "checkpoint save of step 5"},
                     {1, 8, call(7, "allgather", 64, "160") + "," + call(8, "allreduce_max", 8, "null"),
                      "checkpoint save of step 5"},
                     {2, 7, call(7, "allgather", 64, "160"), "checkpoint save of step 5"}});
  const auto [code, out] = diagnose(dir);
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("verdict: rank 2 is behind."), std::string::npos) << out;
  EXPECT_NE(out.find("rank 2 is not in any communication call: in checkpoint save of step 5"), std::string::npos)
      << out;
  std::filesystem::remove_all(dir);
}

TEST(Diagnose, NamesTheRankWhoseProcessWasStoppedInsideACall) {
  // All three are inside tp call #8, so the waits point at no one; rank 1's
  // watchdog saw its own polls stop for 8 s: its process was frozen.
  const std::string dir = write_dumps(
      "diag_stall", {{0, 8, call(8, "reduce_scatter_sum", 4096, "null")},
                     {1, 8, call(8, "reduce_scatter_sum", 4096, "null"), "training of step 4", 8.0},
                     {2, 8, call(8, "reduce_scatter_sum", 4096, "null")}});
  const auto [code, out] = diagnose(dir);
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("verdict: rank 1 is behind."), std::string::npos) << out;
  EXPECT_NE(out.find("rank 1's process was stopped for 8.0 s"), std::string::npos) << out;
  std::filesystem::remove_all(dir);
}

// A network probe's finding, as runtime/peer_probe.h writes it.
std::string probe(const char* down, const char* reached, const char* unreached, const char* here) {
  return std::string("{\"links_down\": [") + down + "], \"reached\": [" + reached + "], \"unreached\": [" +
         unreached + "], \"host_ranks\": [" + here + "]}";
}

// Three ranks inside the same tp call, each dump with its network probe:
// `trainer diagnose`'s exit code and output.
std::pair<int, std::string> diagnose_probes(const char* name, const std::vector<std::string>& probes) {
  const std::string c = call(8, "reduce_scatter_sum", 4096, "null");
  std::vector<Dump> dumps;
  for (int r = 0; r < 3; r++) dumps.push_back({r, 8, c, "training of step 4", 0, probes[r]});
  const std::string dir = write_dumps(name, dumps);
  auto result = diagnose(dir);
  std::filesystem::remove_all(dir);
  return result;
}

TEST(Diagnose, NamesTheRanksWhoseHostsLinkIsDown) {
  // Ranks 1 and 2 share a host whose link went down; rank 0 (elsewhere, its
  // links up) could not reach them.
  const char* down = "\"eth1 (10.0.0.2)\"";
  const auto [code, out] = diagnose_probes(
      "diag_link", {probe("", "", "1, 2", "0"), probe(down, "", "0", "1, 2"), probe(down, "", "0", "1, 2")});
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("verdict: the network: ranks 1, 2 lost their link (eth1 (10.0.0.2) down); rank 0 could not "
                     "reach them."),
            std::string::npos) << out;
}

TEST(Diagnose, NamesTheHostNoOtherHostReaches) {
  // Three hosts, no link seen down: 0 and 1 reach each other, not 2.
  const auto [code, out] = diagnose_probes(
      "diag_reach", {probe("", "1", "2", "0"), probe("", "0", "2", "1"), probe("", "", "0, 1", "2")});
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("verdict: the network: no other host reaches rank 2."), std::string::npos) << out;
}

TEST(Diagnose, TwoHostsThatLostEachOtherNameNoOne) {
  // Each reaches none of the others and saw no link of its own go down:
  // nothing tells which side was cut.
  const auto [code, out] = diagnose_probes(
      "diag_pair", {probe("", "", "1, 2", "0"), probe("", "", "0", "1, 2"), probe("", "", "0", "1, 2")});
  EXPECT_EQ(code, 1) << out;
  EXPECT_NE(out.find("verdict: no single rank is behind"), std::string::npos) << out;
  EXPECT_NE(out.find("network: rank 0: its links are up; reached rank(s) [], could not reach [1, 2]"),
            std::string::npos) << out;
}

TEST(Diagnose, ReportsACrashOfTheNewestJob) {
  const std::string dir = temp_dir("diag_crash");
  std::filesystem::create_directories(dir + "/flight");
  std::ofstream(dir + "/flight/crash_rank_00002.txt")
      << "rank 2 (pid 77) died of signal 6 (SIGABRT, abort) in evaluation of step 40\njob_start_us 300000000\n"
         "backtrace:\n./trainer(main+0x1)[0x1]\n";
  std::ofstream(dir + "/flight/crash_rank_00005.txt")  // an earlier launch's
      << "rank 5 (pid 12) died of signal 11 (SIGSEGV) in training of step 3\njob_start_us 100000000\n";
  const auto [code, out] = diagnose(dir);
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("crash: rank 2 (pid 77) died of signal 6"), std::string::npos) << out;
  EXPECT_NE(out.find("verdict: rank 2 (pid 77) died"), std::string::npos) << out;
  EXPECT_EQ(out.find("rank 5"), std::string::npos) << out;
  std::filesystem::remove_all(dir);
}

TEST(Status, ProgressTimeToGoAndTheLastFailure) {
  const std::string dir = temp_dir("status");
  std::ofstream(dir + "/recipe.resolved.toml") << "[training]\nsteps = 1000\n\n[checkpoint]\nevery = 0\n";
  std::ofstream(dir + "/metrics.jsonl")
      << "{\"step\": 90, \"loss\": 3.5, \"step_ms\": 200, \"tokens_per_s\": 1000, \"val_loss\": 3.75}\n"
      << "{\"step\": 100, \"loss\": 3.25, \"step_ms\": 400, \"tokens_per_s\": 900}\n";
  std::ofstream(dir + "/events.jsonl")
      << "{\"time\": \"t0\", \"event\": \"start\", \"launch\": 0, \"message\": \"launch 0: mpirun\"}\n"
      << "{\"time\": \"t1\", \"event\": \"exit\", \"launch\": 0, \"message\": \"launch 0 exited with code 139\", "
         "\"code\": 139}\n"
      << "{\"time\": \"t1\", \"event\": \"crash\", \"launch\": 0, \"message\": \"launch 0: rank 3 died\"}\n"
      << "{\"time\": \"t2\", \"event\": \"restart\", \"launch\": 1, \"message\": \"restart 1 of 3\"}\n"
      << "{\"time\": \"t3\", \"event\": \"start\", \"launch\": 1, \"message\": \"launch 1: mpirun\"}\n";
  const auto [code, out] = status(dir);
  EXPECT_EQ(code, 0) << out;
  for (const std::string& want : std::vector<std::string>{"step 100 of 1000 (10%), loss 3.2500, val loss 3.7500 (step 90)",
                           // 900 steps left x mean(200, 400) ms = 270 s
                           "900 steps, about 4.5 min at 300 ms per step", "checkpoint: off",
                           "2 launch(es), 1 restart(s); last event: start", "last failure: launch 0 exited with code 139",
                           "crash: launch 0: rank 3 died", "report:     trainer report " + dir})
    EXPECT_NE(out.find(want), std::string::npos) << "missing \"" << want << "\" in:\n" << out;
  std::filesystem::remove_all(dir);
  EXPECT_EQ(status(dir).first, kExitUsage);
}

TEST(Diagnose, ReportsCollectivesMadeInADifferentOrder) {
  // Every rank is in call #8, but rank 2's #8 is another operation.
  const std::string dir = write_dumps(
      "diag_order", {{0, 8, call(8, "allreduce_sum", 64, "null")},
                     {1, 8, call(8, "allreduce_sum", 64, "null")},
                     {2, 8, call(8, "allgather", 64, "null")}});
  const auto [code, out] = diagnose(dir);
  EXPECT_NE(out.find("disagree on call #8"), std::string::npos) << out;
  EXPECT_NE(out.find("no single rank is behind"), std::string::npos) << out;
  std::filesystem::remove_all(dir);
}

TEST(Diagnose, WithoutDumpsSaysWhere) {
  const std::string dir = temp_dir("diag_none");
  const auto [code, out] = diagnose(dir);
  EXPECT_EQ(code, kExitUsage);
  EXPECT_NE(out.find("no flight recorder dumps"), std::string::npos) << out;
  std::filesystem::remove_all(dir);
}


// A metrics log whose last line was cut off by a kill: the next record starts
// a line of its own (before, it was appended to the fragment and both were
// lost to every JSON reader); the fragment stays as its own line.
TEST(MetricsLog, ReopeningStartsANewLineAfterAPartialOne) {
  const std::string path = testing::TempDir() + "/metrics_partial.jsonl";
  for (const std::string& tail : {std::string("{\"step\": 3, \"lo"), std::string(9000, 'x'), std::string()}) {
    std::ofstream(path) << "{\"step\": 1}\n{\"step\": 2}\n" << tail;
    {
      MetricsLog log(path, false);
      JsonRecord r;
      r.add("step", 4L);
      log.write(r);
    }
    std::ifstream in(path);
    std::vector<std::string> lines;
    for (std::string l; std::getline(in, l);) lines.push_back(l);
    ASSERT_EQ(lines.size(), tail.empty() ? 3u : 4u) << "tail of " << tail.size() << " bytes";
    for (size_t i : {(size_t)0, (size_t)1, lines.size() - 1}) EXPECT_NO_THROW((void)nlohmann::json::parse(lines[i]));
    if (!tail.empty()) EXPECT_EQ(lines[2], tail);
    EXPECT_EQ(lines.back(), "{\"step\": 4}");
  }
}

// Stragglers: the last pipeline stage holds the LM head and is slower by
// design; with one rank per stage it was named on every run. Each stage is
// now held to its predicted share of the work at the fastest stage's rate, so
// a whole slow stage is named too, and one slow rank against its peers.
TEST(Stragglers, TheHeadsStageIsNotNamedForItsHeadAndASlowStageIs) {
  ModelConfig m;  // the demo's shape: 256-token vocabulary, 4 layers of width 128
  const std::vector<double> work = stage_work(m, 4);
  ASSERT_GT(work[3], 1.05 * work[0]) << "the head's stage predicted to be the slowest";
  const GridShape pp4{1, 4, 1};
  const float unit = 50.f;
  std::vector<float> ms;
  for (double w : work) ms.push_back(unit * (float)w);
  EXPECT_TRUE(judge_stragglers(ms, pp4, 1.05, work).ranks.empty()) << "each stage at its predicted time";
  std::vector<float> plain = {unit, unit, unit, unit * 1.4f};  // what the old median-of-all rule judged
  const std::vector<double> even(4, 1.0);
  EXPECT_EQ(judge_stragglers(plain, pp4, 1.3, even).ranks, std::vector<double>{3}) << "the check can fail";
  ms[1] *= 2.f;
  const StragglerReport slow = judge_stragglers(ms, pp4, 1.5, work);
  ASSERT_EQ(slow.ranks, std::vector<double>{1});
  EXPECT_NEAR(slow.ratios[0], 2.0, 0.01);
  // dp 3 x pp 2: one slow rank is named against the two others of its stage;
  // a stage slow as a whole (every rank alike) against the other stage's rate.
  const GridShape dp3pp2{3, 2, 1};
  const std::vector<double> work2 = stage_work(m, 2);
  std::vector<float> six(6);
  for (int k = 0; k < 6; k++) six[k] = unit * (float)work2[grid_coords(dp3pp2, k).pp];
  EXPECT_TRUE(judge_stragglers(six, dp3pp2, 1.5, work2).ranks.empty()) << "each stage at its predicted time";
  std::vector<float> one = six;
  for (int k = 0; k < 6; k++)
    if (grid_coords(dp3pp2, k).pp == 0 && grid_coords(dp3pp2, k).dp == 2) one[k] *= 2.f;
  const StragglerReport peer = judge_stragglers(one, dp3pp2, 1.5, work2);
  ASSERT_EQ(peer.ranks.size(), 1u);
  EXPECT_EQ(grid_coords(dp3pp2, (int)peer.ranks[0]).dp, 2);
  EXPECT_NEAR(peer.ratios[0], 2.0, 0.01);
  std::vector<float> stage = six;
  for (int k = 0; k < 6; k++)
    if (grid_coords(dp3pp2, k).pp == 1) stage[k] *= 1.8f;
  const StragglerReport whole = judge_stragglers(stage, dp3pp2, 1.5, work2);
  ASSERT_EQ(whole.ranks.size(), 3u) << "the whole slow stage, though its ranks agree with each other";
  for (double r : whole.ranks) EXPECT_EQ(grid_coords(dp3pp2, (int)r).pp, 1);
  EXPECT_NEAR(whole.ratios[0], 1.8, 0.01);
}

}  // namespace
}  // namespace trainer
