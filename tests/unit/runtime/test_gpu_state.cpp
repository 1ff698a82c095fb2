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
