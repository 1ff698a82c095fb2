// `trainer health`'s judgement (planning/node_health.h), on figures made up
// here: each against the median over the nodes, written out by hand.
#include <gtest/gtest.h>

#include <cmath>

#include "planning/node_health.h"

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
