// What makes a node's GPUs unfit (runtime/gpu_state.h), on states made up
// here as the driver would report them; the verdicts written out by hand.
#include <gtest/gtest.h>

#include "runtime/gpu_state.h"

using namespace trainer;

// The GPUs' state (runtime/gpu_state.h), as the driver would report it,
// judged by rules written out here: wrong results fail a node, held-back
// clocks and a narrow link make it slow, the normal reasons say nothing.
TEST(GpuState, WrongResultsFailAHeldBackGpuIsSlowAndTheNormalIsSilent) {
  GpuState ok;
  ok.index = 0, ok.bus_id = "00000000:1B:00.0", ok.ecc_uncorrected = 0, ok.pcie_width = 16, ok.max_pcie_width = 16;
  ok.temperature_c = 45, ok.slowdown_temperature_c = 90;
  EXPECT_EQ(gpu_fault({ok}).text, "");
  EXPECT_FALSE(gpu_fault({ok}).fails);
  GpuState no_ecc = ok;  // ECC off or not offered: -1, not a fault
  no_ecc.ecc_uncorrected = -1;
  EXPECT_EQ(gpu_fault({no_ecc}).text, "");

  GpuState ecc = ok;
  ecc.index = 3, ecc.ecc_uncorrected = 2;
  const GpuFault f = gpu_fault({ok, ecc});
  EXPECT_TRUE(f.fails);
  EXPECT_EQ(f.text, "GPU 3 (00000000:1B:00.0): 2 uncorrected ECC error(s) since the driver loaded");
  GpuState remap = ok;
  remap.remap_failed = true;
  EXPECT_TRUE(gpu_fault({remap}).fails);

  GpuState hot = ok;
  hot.thermal_slowdown = true, hot.power_brake = true, hot.temperature_c = 93;
  const GpuFault h = gpu_fault({hot});
  EXPECT_FALSE(h.fails);
  EXPECT_EQ(h.text, "GPU 0 (00000000:1B:00.0): clocks held down (thermal slowdown, power brake) at 93 C (slowdown at 90 C)");
  GpuState narrow = ok;
  narrow.pcie_width = 8;
  EXPECT_EQ(gpu_fault({narrow}).text, "GPU 0 (00000000:1B:00.0): PCIe link x8 of x16");
  GpuState pending = ok;
  pending.remap_pending = true;
  EXPECT_FALSE(gpu_fault({pending}).fails);
  EXPECT_NE(gpu_fault({pending}).text, "");
}

TEST(GpuState, CudaAndNvmlPciAddressesCompareEqual) {
  EXPECT_EQ(normal_bus_id("0000:3B:00.0"), normal_bus_id("00000000:3b:00.0"));
  EXPECT_EQ(normal_bus_id("00000000:3B:00.0"), "0:3b:00.0");
  EXPECT_NE(normal_bus_id("0000:3B:00.0"), normal_bus_id("0000:3C:00.0"));
  EXPECT_EQ(normal_bus_id("not an address"), "not an address");
}

// A GPU the driver cannot reach fails the node, whatever else it says.
TEST(GpuState, AGpuTheDriverCannotReachFailsTheNode) {
  GpuState lost;
  lost.index = 5, lost.bus_id = "00000000:9A:00.0", lost.error = "NVML: GPU is lost";
  const GpuFault f = gpu_fault({lost});
  EXPECT_TRUE(f.fails);
  EXPECT_EQ(f.text, "GPU 5 (00000000:9A:00.0): the driver cannot reach it (NVML: GPU is lost)");
}

// Three readings while the product runs, as one: the highest clock, a
// slowdown only when every reading shows it, the worst of the rest.
TEST(GpuState, ReadingsMergeToTheHighestClockAndSlowdownsSeenEveryTime) {
  auto reading = [](double clock, bool hw, bool thermal, long long ecc, int temp) {
    GpuState g;
    g.index = 0, g.sm_clock_mhz = clock, g.max_sm_clock_mhz = 1980, g.hw_slowdown = hw, g.thermal_slowdown = thermal;
    g.ecc_uncorrected = ecc, g.temperature_c = temp, g.ran_product = true;
    GpuState other;  // an idle second GPU, the same in every reading
    other.index = 1, other.sm_clock_mhz = 345;
    return NodeGpus{{g, other}, ""};
  };
  const NodeGpus m = merge_readings({reading(1200, true, true, 0, 70), reading(1980, false, true, 0, 74),
                                     reading(1755, true, true, 1, 72)});
  ASSERT_EQ(m.gpus.size(), 2u);
  EXPECT_EQ(m.gpus[0].sm_clock_mhz, 1980);
  EXPECT_FALSE(m.gpus[0].hw_slowdown) << "not in the second reading: a clock change";
  EXPECT_TRUE(m.gpus[0].thermal_slowdown) << "in every reading";
  EXPECT_EQ(m.gpus[0].ecc_uncorrected, 1);
  EXPECT_EQ(m.gpus[0].temperature_c, 74);
  EXPECT_TRUE(m.gpus[0].ran_product);
  EXPECT_EQ(m.gpus[1].sm_clock_mhz, 345);
  EXPECT_TRUE(merge_readings({}).gpus.empty());
  EXPECT_EQ(merge_readings({NodeGpus{{}, "no NVML: x"}}).missing, "no NVML: x");
}
