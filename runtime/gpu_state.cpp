#include "runtime/gpu_state.h"

#include <algorithm>
#include <cstdio>

namespace trainer {

GpuFault gpu_fault(const std::vector<GpuState>& gpus) {
  GpuFault f;
  auto add = [&](const GpuState& g, const std::string& what, bool fails) {
    f.text += (f.text.empty() ? "" : "; ") + ("GPU " + std::to_string(g.index) + " (" + g.bus_id + "): ") + what;
    f.fails |= fails;
  };
  for (const GpuState& g : gpus) {
    if (!g.error.empty()) {
      add(g, "the driver cannot reach it (" + g.error + ")", true);
      continue;
    }
    if (g.ecc_uncorrected > 0)
      add(g, std::to_string(g.ecc_uncorrected) + " uncorrected ECC error(s) since the driver loaded", true);
    if (g.remap_failed) add(g, "a memory row remapping failed (the GPU needs service)", true);
    if (g.remap_pending) add(g, "memory rows wait to be remapped (reset the GPU)", false);
    std::string held;
    if (g.hw_slowdown) held += ", hardware slowdown";
    if (g.thermal_slowdown) held += ", thermal slowdown";
    if (g.power_brake) held += ", power brake";
    if (!held.empty()) {
      std::string t = "clocks held down (" + held.substr(2) + ")";
      if (g.temperature_c >= 0) {
        t += " at " + std::to_string(g.temperature_c) + " C";
        if (g.slowdown_temperature_c > 0) t += " (slowdown at " + std::to_string(g.slowdown_temperature_c) + " C)";
      }
      add(g, t, false);
    }
    if (g.pcie_width > 0 && g.max_pcie_width > 0 && g.pcie_width < g.max_pcie_width)
      add(g, "PCIe link x" + std::to_string(g.pcie_width) + " of x" + std::to_string(g.max_pcie_width), false);
  }
  return f;
}

NodeGpus merge_readings(const std::vector<NodeGpus>& readings) {
  NodeGpus out;
  if (readings.empty()) return out;
  out.missing = readings.back().missing;
  for (const NodeGpus& r : readings) {
    for (const GpuState& g : r.gpus) {
      GpuState* m = nullptr;
      for (GpuState& x : out.gpus)
        if (x.index == g.index) m = &x;
      if (!m) {
        out.gpus.push_back(g);  // its first reading
        continue;
      }
      m->ran_product |= g.ran_product;
      m->sm_clock_mhz = std::max(m->sm_clock_mhz, g.sm_clock_mhz);
      m->max_sm_clock_mhz = std::max(m->max_sm_clock_mhz, g.max_sm_clock_mhz);
      m->temperature_c = std::max(m->temperature_c, g.temperature_c);
      m->ecc_uncorrected = std::max(m->ecc_uncorrected, g.ecc_uncorrected);
      m->remap_failed |= g.remap_failed, m->remap_pending |= g.remap_pending;
      m->hw_slowdown &= g.hw_slowdown, m->thermal_slowdown &= g.thermal_slowdown, m->power_brake &= g.power_brake;
      m->pcie_width = std::max(m->pcie_width, g.pcie_width);
      if (m->error.empty()) m->error = g.error;
    }
  }
  return out;
}

std::string normal_bus_id(const std::string& bus_id) {
  unsigned domain = 0, bus = 0, device = 0, function = 0;
  char end = 0;
  if (std::sscanf(bus_id.c_str(), "%x:%x:%x.%x%c", &domain, &bus, &device, &function, &end) != 4) return bus_id;
  char b[32];
  std::snprintf(b, sizeof b, "%x:%02x:%02x.%x", domain, bus, device, function);
  return b;
}

}  // namespace trainer
