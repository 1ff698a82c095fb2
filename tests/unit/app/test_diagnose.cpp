// `trainer diagnose` on hand-written flight-recorder dumps (a rank behind, a
// collective-order mismatch, hosts cut off) and `trainer status` on a run
// directory, through the real binary. The whole chain through mpirun and
// Slurm is tests/e2e/supervise_check.py and tests/e2e/slurm_check.py.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "supervise/diagnosis.h"
#include "runtime/errors.h"
#include "tests/support/temp_dir.h"

namespace trainer {
namespace {

// `trainer diagnose` on dumps written by hand.
struct Dump {
  int rank;
  long tp_started;
  std::string calls;  // JSON array body
  std::string phase = "training of step 4";
  double stalled_s = 0;
  std::string network = "";  // the watchdog's network probe (runtime/peer_probe.h), if any
  std::string host = "";     // where the rank ran (dumps from before hosts were written lack it)
  bool stall_ended = false;  // written as the process came back from its stop
  bool ends_job = false;     // the watchdog that wrote it ends the job
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
                        << (d.network.empty() ? "" : ", \"network\": " + d.network)
                        << (d.host.empty() ? "" : ", \"host\": \"" + d.host + "\"")
                        << (d.stall_ended ? ", \"stall_ended\": true" : "")
                        << (d.ends_job ? ", \"ends_job\": true" : "") << "}\n";
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
  // Continued before the kill, rank 1 finished call #8 and began #9 before
  // its watchdog dumped (as it came back): it now seems to wait for the
  // others, which seem behind; the stop still names it. A stop earlier in
  // the job, in a dump written later for another reason, does not.
  for (const bool ended : {true, false}) {
    const std::string moved = write_dumps(
        "diag_stall_moved", {{0, 8, call(8, "reduce_scatter_sum", 4096, "null")},
                             {1, 9, call(9, "reduce_scatter_sum", 4096, "null"), "training of step 4", 8.0, "", "", ended},
                             {2, 8, call(8, "reduce_scatter_sum", 4096, "null")}});
    const auto [code2, out2] = diagnose(moved);
    EXPECT_EQ(code2, 0) << out2;
    EXPECT_NE(out2.find(ended ? "verdict: rank 1 is behind." : "verdict: rank 0, 2 are behind."), std::string::npos)
        << out2;
    std::filesystem::remove_all(moved);
  }
}

// A network probe's finding, as runtime/peer_probe.h writes it.
std::string probe(const char* down, const char* reached, const char* unreached, const char* here) {
  return std::string("{\"links_down\": [") + down + "], \"reached\": [" + reached + "], \"unreached\": [" +
         unreached + "], \"host_ranks\": [" + here + "]}";
}

// Three ranks inside the same tp call, each dump with its network probe:
// `trainer diagnose`'s exit code and output.
std::pair<int, std::string> diagnose_probes(const char* name, const std::vector<std::string>& probes,
                                            const std::vector<std::string>& hosts = {"", "", ""}) {
  const std::string c = call(8, "reduce_scatter_sum", 4096, "null");
  std::vector<Dump> dumps;
  for (int r = 0; r < (int)probes.size(); r++) dumps.push_back({r, 8, c, "training of step 4", 0, probes[r], hosts[r]});
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

TEST(Diagnose, AJobEndedOnAHostCutOffIsSaidSo) {
  // What `supervise` reads to stop a launcher that outlives its job: a dump
  // that ends the job, and whether a probe found a host cut off.
  const std::string c = call(8, "reduce_scatter_sum", 4096, "null");
  Dump ends{0, 8, c}, probed{1, 8, c};
  ends.ends_job = true;
  probed.network = probe("", "", "0", "1");
  const std::string running = write_dumps("ended_running", {{0, 8, c}, probed});
  const std::string ended = write_dumps("ended_plain", {ends, {1, 8, c}});
  const std::string lost = write_dumps("ended_lost", {ends, probed});
  EXPECT_EQ(watchdog_ended_job(running, 50), JobEnd::Running);
  EXPECT_EQ(watchdog_ended_job(ended, 50), JobEnd::Ended);
  EXPECT_EQ(watchdog_ended_job(lost, 50), JobEnd::EndedHostLost);
  probed.network = probe("\"eth1 (10.0.0.2)\"", "", "", "1");  // its own link down, nothing probed
  const std::string down = write_dumps("ended_down", {ends, probed});
  EXPECT_EQ(watchdog_ended_job(down, 50), JobEnd::EndedHostLost);
  EXPECT_EQ(watchdog_ended_job(lost, 150), JobEnd::Running);  // an earlier job's dumps (job_start 100)
  for (const std::string& d : {running, ended, lost, down}) std::filesystem::remove_all(d);
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

// What `trainer supervise` excludes (supervise/allocation.h): the host of the
// ranks whose link went down, also for a rank whose dump does not say where
// it ran (it is on the host of a dump that counts it among its host's ranks).
TEST(Diagnose, NamesTheHostOfTheRanksThatLostTheirLink) {
  const char* down = "\"eth1 (10.0.0.2)\"";
  const auto [code, out] = diagnose_probes(
      "diag_host_link", {probe("", "", "1, 2", "0"), probe(down, "", "0", "1, 2"), probe(down, "", "0", "1, 2")},
      {"nodeA.cluster", "nodeB.cluster", ""});
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("host at fault: nodeB.cluster: link eth1 (10.0.0.2) down (the watchdogs' network probes)"),
            std::string::npos) << out;
  EXPECT_EQ(out.find("host at fault: nodeA"), std::string::npos) << out;
  const auto [code2, out2] = diagnose_probes(
      "diag_host_reach", {probe("", "1", "2", "0"), probe("", "0", "2", "1"), probe("", "", "0, 1", "2")},
      {"a", "b", "c"});
  EXPECT_NE(out2.find("host at fault: c: no other host reaches it"), std::string::npos) << out2;
  EXPECT_EQ(out2.find("host at fault: a"), std::string::npos) << out2;
  // Two hosts that lost each other: no host is named.
  const auto [code3, out3] = diagnose_probes(
      "diag_host_pair", {probe("", "", "1, 2", "0"), probe("", "", "0", "1, 2"), probe("", "", "0", "1, 2")},
      {"a", "b", "b"});
  EXPECT_EQ(out3.find("host at fault"), std::string::npos) << out3;
}

// A rank whose link went down mid-call seems behind (the others finished a
// call its data reached, it never heard back): the cut is the verdict, and
// its host is named. (A CI run under Slurm blamed "rank 1 is behind" and
// restarted on the cut host until its restarts ran out.)
TEST(Diagnose, ARankBehindBecauseItsLinkWentDownNamesTheLink) {
  const char* down = "\"eth1 (10.0.0.2)\"";
  const std::string done = call(7, "allreduce_max", 8, "160"), waiting = call(8, "allreduce_max", 8, "null");
  const std::string dir = write_dumps(
      "diag_behind_cut", {{0, 8, done + "," + waiting, "training of step 4", 0, probe("", "1", "2", "0, 1"), "a"},
                          {1, 8, done + "," + waiting, "training of step 4", 0, probe("", "0", "2", "0, 1"), "a"},
                          {2, 7, call(7, "allreduce_max", 8, "null"), "training of step 4", 0,
                           probe(down, "", "0, 1", "2"), "b"}});
  const auto [code, out] = diagnose(dir);
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("rank 2 is behind, cut off"), std::string::npos) << out;
  EXPECT_NE(out.find("verdict: the network: rank 2 lost its link (eth1 (10.0.0.2) down)"), std::string::npos) << out;
  EXPECT_NE(out.find("host at fault: b: link eth1 (10.0.0.2) down"), std::string::npos) << out;
  EXPECT_EQ(out.find("host at fault: a"), std::string::npos) << out;
  std::filesystem::remove_all(dir);
}

// A host cut off for good cannot write its ranks' dumps either: the ranks
// that wait for them name it from the probe's records (its host name), when
// every probe that tried could not reach it. A rank without a dump whose host
// answered (a crashed process: the port is closed, the host is there) names
// no host.
TEST(Diagnose, NamesTheHostOfRanksThatLeftNoDumpAndAnswerNoProbe) {
  const std::string c = call(8, "reduce_scatter_sum", 4096, "null");
  const std::string hosts = ", \"hosts\": {\"2\": \"nodeC\"}}";
  const auto with_hosts = [&](std::string p) { return p.substr(0, p.size() - 1) + hosts; };
  for (bool answered : {false, true}) {
    const std::string a = answered ? with_hosts(probe("", "2", "", "0")) : with_hosts(probe("", "", "2", "0"));
    const std::string b = answered ? with_hosts(probe("", "2", "", "1")) : with_hosts(probe("", "", "2", "1"));
    const std::string dir = write_dumps("diag_silent", {{0, 8, c, "training of step 4", 0, a, "nodeA"},
                                                        {1, 8, c, "training of step 4", 0, b, "nodeB"}});
    const auto [code, out] = diagnose(dir);
    EXPECT_EQ(code, 0) << out;
    EXPECT_NE(out.find("verdict: rank 2 is behind."), std::string::npos) << out;
    if (answered)
      EXPECT_EQ(out.find("host at fault"), std::string::npos) << out;
    else
      EXPECT_NE(out.find("host at fault: nodeC: no other host reaches it and its ranks left no flight recorder"),
                std::string::npos) << out;
    std::filesystem::remove_all(dir);
  }
}

// Crashes name a host only when every crash of the job was on that host,
// and only crashes of the machine's kind (SIGBUS, SIGILL): a segfault or an
// abort is the program's, wherever it runs.
TEST(Diagnose, NamesTheHostEveryCrashWasOn) {
  for (bool one_host : {true, false}) {
    const std::string dir = temp_dir("diag_crash_host");
    std::filesystem::create_directories(dir + "/flight");
    std::ofstream(dir + "/flight/crash_rank_00002.txt")
        << "rank 2 (pid 77) died of signal 7 (SIGBUS, bus error) in training of step 40\njob_start_us 300000000\n"
           "host gpu17\nbacktrace:\n./trainer(main+0x1)[0x1]\n";
    std::ofstream(dir + "/flight/crash_rank_00003.txt")
        << "rank 3 (pid 78) died of signal 7 (SIGBUS, bus error) in training of step 40\njob_start_us 300000000\n"
        << "host " << (one_host ? "gpu17" : "gpu18") << "\nbacktrace:\n";
    const auto [code, out] = diagnose(dir);
    EXPECT_EQ(code, 0) << out;
    if (one_host)
      EXPECT_NE(out.find("host at fault: gpu17: rank 2 (pid 77) died of signal 7 (SIGBUS, bus error) in training of "
                         "step 40 (its crash report)"),
                std::string::npos) << out;
    else
      EXPECT_EQ(out.find("host at fault"), std::string::npos) << out;
    std::filesystem::remove_all(dir);
  }
  const std::string dir = temp_dir("diag_crash_bug");
  std::filesystem::create_directories(dir + "/flight");
  std::ofstream(dir + "/flight/crash_rank_00002.txt")
      << "rank 2 (pid 77) died of signal 11 (SIGSEGV, invalid memory access) in training of step 40\n"
         "job_start_us 300000000\nhost gpu17\nbacktrace:\n";
  const auto [code, out] = diagnose(dir);
  EXPECT_NE(out.find("crash: rank 2 (pid 77) died of signal 11"), std::string::npos) << out;
  EXPECT_EQ(out.find("host at fault"), std::string::npos) << "a segfault is the program's:\n" << out;
  std::filesystem::remove_all(dir);
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

}  // namespace
}  // namespace trainer
