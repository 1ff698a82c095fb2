#pragma once
// What the driver (NVML) says of a node's GPUs, for `trainer health` (issue
// 49): the figures a GPU that still computes can be failing or held back
// by. Read by runtime/cuda/nvml_state.cpp (CUDA builds); judged here, where
// no CUDA header is needed, so that the rules run in every build's tests.
#include <string>
#include <vector>

namespace trainer {

struct GpuState {
  int index = 0;            // NVML's index on the node (all of its GPUs, whatever CUDA_VISIBLE_DEVICES says)
  std::string name, bus_id;
  bool ran_product = false;  // this node's health check ran its product on it: its clock is under load
  double sm_clock_mhz = 0, max_sm_clock_mhz = 0;  // 0: not offered
  int temperature_c = -1, slowdown_temperature_c = -1;  // -1: not offered
  long long ecc_uncorrected = -1;  // volatile (since the driver loaded); -1: ECC off or not offered
  bool remap_failed = false;       // a row remapping failed (A100 and later): the memory needs service
  bool remap_pending = false;      // rows wait to be remapped at the next GPU reset
  // Why the clocks are held down (NVML's clocks event reasons), the ones that
  // say something is wrong; a power cap or an idle GPU is normal.
  bool hw_slowdown = false, thermal_slowdown = false, power_brake = false;
  int pcie_width = 0, max_pcie_width = 0;  // lanes; 0: not offered
  std::string error;  // the driver cannot reach it ("GPU is lost"): the other figures are not read
};

struct NodeGpus {
  std::vector<GpuState> gpus;
  std::string missing;  // why there are none: no NVML (no driver), or its error
};

// Readings taken one after another while the GPUs work, as one: per GPU
// (by index) the highest clock, a slowdown only where every reading shows
// it (a clock change may show one for an instant), the most ECC errors,
// the hottest temperature, a remapping or an error in any reading. Pure.
NodeGpus merge_readings(const std::vector<NodeGpus>& readings);

// What makes the node's GPUs unfit, in one line ("" when nothing does), and
// whether it fails the node (the driver cannot reach a GPU, uncorrected ECC
// errors, a failed row remapping: its results can be wrong) or only makes
// it slow (clocks held
// down by the hardware, rows waiting for a reset, a PCIe link trained
// narrower than it can be). Pure.
struct GpuFault {
  std::string text;
  bool fails = false;
};
GpuFault gpu_fault(const std::vector<GpuState>& gpus);

// The PCI address as domain:bus:device.function in lower-case hex with the
// domain's leading zeros dropped, so that CUDA's "0000:3B:00.0" and NVML's
// "00000000:3B:00.0" compare equal; the text as it is when it is not one.
std::string normal_bus_id(const std::string& bus_id);

}  // namespace trainer
