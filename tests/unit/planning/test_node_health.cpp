// `trainer health`'s judgement (planning/node_health.h), on figures made up
// here: each against the median over the nodes, written out by hand.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "planning/calibrate.h"
#include "planning/node_health.h"
#include "tests/support/temp_dir.h"

using namespace trainer;

namespace {
NodeFigures node(const char* host, double gemm, double disk = 500, double p2p = 1.0) {
  NodeFigures n;
  n.host = host;
  n.gemm_gflops = gemm, n.memory_gbps = 10, n.free_gb = 20, n.disk_mbps = disk, n.allreduce_gbps = 2, n.p2p_gbps = p2p;
  return n;
}
}  // namespace

TEST(NodeHealth, AFigureBelowTheBarOfTheMedianIsSlow) {
  // gemm median of {100, 90, 30, 110} = 95: 30 / 95 = 0.316; p2p median of {1, 1, 1, 0.7} = 1.
  const std::vector<NodeFigures> nodes = {node("a", 100), node("b", 90), node("c", 30), node("d", 110, 500, 0.7)};
  const std::vector<NodeVerdict> v = judge_nodes(nodes, 0.8);
  ASSERT_EQ(v.size(), 4u);
  EXPECT_EQ(v[0].health, Health::Ok);
  EXPECT_EQ(v[1].health, Health::Ok);  // 90 / 95 = 0.947
  EXPECT_EQ(v[2].health, Health::Slow);
  EXPECT_NEAR(v[2].ratios[0], 30.0 / 95.0, 1e-12);
  ASSERT_EQ(v[2].reasons.size(), 1u);
  EXPECT_EQ(v[2].reasons[0], "gemm 0.32 x the median");
  EXPECT_EQ(v[3].health, Health::Slow);  // its links: 0.7 of the median
  EXPECT_EQ(v[3].reasons[0], "p2p 0.70 x the median");
  EXPECT_NEAR(v[0].ratios[0], 100.0 / 95.0, 1e-12);
}

TEST(NodeHealth, AFailedMeasurementFailsTheNodeAndStaysOutOfTheMedian) {
  std::vector<NodeFigures> nodes = {node("a", 100, 400), node("b", 100, 0), node("c", 100, 600)};
  nodes[1].failed = "cannot write and fsync a file in /ckpt";
  const std::vector<NodeVerdict> v = judge_nodes(nodes, 0.8);
  EXPECT_EQ(v[1].health, Health::Failed);
  EXPECT_EQ(v[1].reasons[0], "cannot write and fsync a file in /ckpt");
  // disk median over the nodes that measured it: (400 + 600) / 2 = 500.
  EXPECT_NEAR(v[0].ratios[3], 0.8, 1e-12);
  EXPECT_EQ(v[0].health, Health::Ok);  // 0.8 is not below 0.8
  EXPECT_EQ(v[2].health, Health::Ok);
}

TEST(NodeHealth, OneNodeHasNoNetworkToJudge) {
  NodeFigures one = node("a", 100);
  one.allreduce_gbps = one.p2p_gbps = -1;
  const std::vector<NodeVerdict> v = judge_nodes({one}, 0.8);
  EXPECT_EQ(v[0].health, Health::Ok);
  EXPECT_TRUE(std::isnan(v[0].ratios[4]) && std::isnan(v[0].ratios[5]));
  EXPECT_EQ(v[0].ratios[0], 1.0);
}

TEST(NodeHealth, AGpuFaultFailsOrSlowsItsNodeAndASlowClockIsJudgedLikeAFigure) {
  // gpu clock median of {1980, 1980, 1200} = 1980: 1200 / 1980 = 0.61.
  std::vector<NodeFigures> nodes = {node("a", 100), node("b", 100), node("c", 100), node("d", 100)};
  nodes[0].gpu_clock_mhz = nodes[1].gpu_clock_mhz = 1980, nodes[2].gpu_clock_mhz = 1200;
  nodes[1].gpu_fault = "GPU 3 (x): 2 uncorrected ECC error(s) since the driver loaded", nodes[1].gpu_fails = true;
  nodes[3].gpu_fault = "GPU 0 (y): PCIe link x8 of x16";  // and no clock read (no NVML): not judged
  const std::vector<NodeVerdict> v = judge_nodes(nodes, 0.8);
  EXPECT_EQ(v[0].health, Health::Ok);
  EXPECT_EQ(v[1].health, Health::Failed);
  EXPECT_EQ(v[1].reasons[0], nodes[1].gpu_fault);
  EXPECT_EQ(v[2].health, Health::Slow);
  EXPECT_EQ(v[2].reasons[0], "gpu clock 0.61 x the median");
  EXPECT_EQ(v[3].health, Health::Slow);
  EXPECT_EQ(v[3].reasons[0], nodes[3].gpu_fault);
  EXPECT_TRUE(std::isnan(v[3].ratios[6]));
}

// The disk probe of `trainer health` and `trainer calibrate` writes into the
// checkpoint (or output) directory. Whatever already sits there, under any
// name it could pick (its old fixed name, links to a user's file, a FIFO), is
// never opened: the probe makes a new regular file of its own and removes it.
TEST(NodeHealth, TheDiskProbeNeverOpensWhatIsAlreadyInTheDirectory) {
  namespace fs = std::filesystem;
  const std::string dir = temp_dir("disk_probe"), user = dir + "/user_file", outside = temp_dir("disk_probe_out");
  { std::ofstream(user) << "precious"; }
  const std::string victim = outside + "/victim";
  { std::ofstream(victim) << "also precious"; }
  for (const char* name : {".calibrate_disk_probe", ".disk_probe", ".disk_probe.XXXXXX"})
    fs::create_symlink(victim, dir + "/" + name);
  fs::create_symlink(user, dir + "/.probe_link");
  ASSERT_EQ(mkfifo((dir + "/.fifo_probe").c_str(), 0644), 0);
  std::set<std::string> before;
  for (const auto& e : fs::directory_iterator(dir)) before.insert(e.path().filename());
  const double mbps = measure_disk(dir, 2);  // a FIFO opened for writing would block here
  EXPECT_GT(mbps, 0);
  std::set<std::string> after;
  for (const auto& e : fs::directory_iterator(dir)) after.insert(e.path().filename());
  EXPECT_EQ(before, after);  // nothing left behind, nothing removed
  std::string text;
  std::getline(std::ifstream(victim), text);
  EXPECT_EQ(text, "also precious");
  std::getline(std::ifstream(user), text);
  EXPECT_EQ(text, "precious");
  EXPECT_EQ(fs::file_size(victim), 13u);
  fs::remove_all(dir);
  fs::remove_all(outside);
}

// A node is unfit only when a second measurement agrees (issue 66: one noisy
// p2p figure excluded a healthy host in 1 of 3 runs); the verdicts say what
// each measurement found.
TEST(NodeHealth, ANodeIsUnfitOnlyWhenASecondMeasurementAgrees) {
  const std::vector<NodeFigures> noisy = {node("a", 100), node("b", 100, 500, 0.71), node("c", 100)};
  const std::vector<NodeFigures> calm = {node("a", 100), node("b", 100), node("c", 100)};
  const std::vector<NodeFigures> capped = {node("a", 100), node("b", 100), node("c", 41)};
  const auto first = judge_nodes(noisy, 0.8);
  ASSERT_TRUE(any_unfit(first));
  EXPECT_EQ(first[1].health, Health::Slow);
  const auto passed = confirm_verdicts(first, judge_nodes(calm, 0.8));
  EXPECT_FALSE(any_unfit(passed));
  ASSERT_EQ(passed[1].reasons.size(), 1u);
  EXPECT_EQ(passed[1].reasons[0], "re-measured: p2p 0.71 x the median the first time, ok the second");
  EXPECT_TRUE(passed[0].reasons.empty());
  // Another node unfit only the second time: not confirmed either.
  const auto other = confirm_verdicts(first, judge_nodes(capped, 0.8));
  EXPECT_FALSE(any_unfit(other));
  EXPECT_EQ(other[2].reasons[0], "re-measured: ok the first time (gemm 0.41 x the median the second)");
  // Unfit both times: the second's verdict, confirmed.
  const auto slow_twice = confirm_verdicts(judge_nodes(capped, 0.8), judge_nodes(capped, 0.8));
  EXPECT_EQ(slow_twice[2].health, Health::Slow);
  EXPECT_EQ(slow_twice[2].reasons, (std::vector<std::string>{"gemm 0.41 x the median", "confirmed by a second measurement"}));
  // Slow both times, but in another figure each time (p2p, then the product): noise, not confirmed.
  const auto moved = confirm_verdicts(first, judge_nodes({node("a", 100), node("b", 41), node("c", 100)}, 0.8));
  EXPECT_FALSE(any_unfit(moved));
  EXPECT_EQ(moved[1].reasons, (std::vector<std::string>{"re-measured: p2p 0.71 x the median the first time, gemm "
                                                        "0.41 x the median the second (not the same figure: noise)"}));
  EXPECT_THROW(confirm_verdicts(first, judge_nodes({node("a", 1)}, 0.8)), std::logic_error);
}
