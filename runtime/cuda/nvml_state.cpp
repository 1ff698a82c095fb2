#include "runtime/cuda/nvml_state.h"

#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nvml.h>

#include <string>

namespace trainer::cuda {

namespace {

// Loaded by name from the driver's library: never linked, so a machine
// without a driver still loads the binary (docs: ENVIRONMENT.md, CUDA build).
template <class F>
F symbol(void* lib, const char* name) {
  return reinterpret_cast<F>(dlsym(lib, name));
}

// The clocks event reasons that say something is wrong (nvml.h's bits; a
// power cap, an idle GPU or a clock setting are normal).
constexpr unsigned long long kHwSlowdown = nvmlClocksThrottleReasonHwSlowdown;
constexpr unsigned long long kThermal = nvmlClocksThrottleReasonHwThermalSlowdown | nvmlClocksEventReasonSwThermalSlowdown;
constexpr unsigned long long kPowerBrake = nvmlClocksThrottleReasonHwPowerBrakeSlowdown;

// The functions used, the optional ones null where the driver lacks them.
struct Nvml {
  decltype(&nvmlInit_v2) init;
  decltype(&nvmlShutdown) shutdown;
  decltype(&nvmlErrorString) error_string;
  decltype(&nvmlDeviceGetCount_v2) count;
  decltype(&nvmlDeviceGetHandleByIndex_v2) handle;
  decltype(&nvmlDeviceGetName) name;
  decltype(&nvmlDeviceGetPciInfo_v3) pci;
  decltype(&nvmlDeviceGetClockInfo) clock;
  decltype(&nvmlDeviceGetMaxClockInfo) max_clock;
  decltype(&nvmlDeviceGetTemperatureV) temperature;
  nvmlReturn_t (*temperature_legacy)(nvmlDevice_t, nvmlTemperatureSensors_t, unsigned int*);  // before TemperatureV
  decltype(&nvmlDeviceGetTemperatureThreshold) threshold;
  decltype(&nvmlDeviceGetTotalEccErrors) ecc;
  decltype(&nvmlDeviceGetRemappedRows) remapped;
  decltype(&nvmlDeviceGetCurrentClocksEventReasons) reasons;
  nvmlReturn_t (*reasons_legacy)(nvmlDevice_t, unsigned long long*);  // ...ThrottleReasons, before 12.2
  decltype(&nvmlDeviceGetCurrPcieLinkWidth) width;
  decltype(&nvmlDeviceGetMaxPcieLinkWidth) max_width;

  explicit Nvml(void* lib)
      : init(symbol<decltype(init)>(lib, "nvmlInit_v2")),
        shutdown(symbol<decltype(shutdown)>(lib, "nvmlShutdown")),
        error_string(symbol<decltype(error_string)>(lib, "nvmlErrorString")),
        count(symbol<decltype(count)>(lib, "nvmlDeviceGetCount_v2")),
        handle(symbol<decltype(handle)>(lib, "nvmlDeviceGetHandleByIndex_v2")),
        name(symbol<decltype(name)>(lib, "nvmlDeviceGetName")),
        pci(symbol<decltype(pci)>(lib, "nvmlDeviceGetPciInfo_v3")),
        clock(symbol<decltype(clock)>(lib, "nvmlDeviceGetClockInfo")),
        max_clock(symbol<decltype(max_clock)>(lib, "nvmlDeviceGetMaxClockInfo")),
        temperature(symbol<decltype(temperature)>(lib, "nvmlDeviceGetTemperatureV")),
        temperature_legacy(symbol<decltype(temperature_legacy)>(lib, "nvmlDeviceGetTemperature")),
        threshold(symbol<decltype(threshold)>(lib, "nvmlDeviceGetTemperatureThreshold")),
        ecc(symbol<decltype(ecc)>(lib, "nvmlDeviceGetTotalEccErrors")),
        remapped(symbol<decltype(remapped)>(lib, "nvmlDeviceGetRemappedRows")),
        reasons(symbol<decltype(reasons)>(lib, "nvmlDeviceGetCurrentClocksEventReasons")),
        reasons_legacy(symbol<decltype(reasons_legacy)>(lib, "nvmlDeviceGetCurrentClocksThrottleReasons")),
        width(symbol<decltype(width)>(lib, "nvmlDeviceGetCurrPcieLinkWidth")),
        max_width(symbol<decltype(max_width)>(lib, "nvmlDeviceGetMaxPcieLinkWidth")) {}
  bool usable() const { return init && shutdown && error_string && count && handle; }
};

// Errors that say the GPU itself is unreachable (not that a figure is not offered).
bool unreachable(nvmlReturn_t rc) {
  return rc == NVML_ERROR_GPU_IS_LOST || rc == NVML_ERROR_IRQ_ISSUE || rc == NVML_ERROR_INSUFFICIENT_POWER;
}

GpuState read_gpu(const Nvml& n, nvmlDevice_t h, int index) {
  GpuState g;
  g.index = index;
  char text[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = {};
  if (n.name && n.name(h, text, sizeof text) == NVML_SUCCESS) g.name = text;
  nvmlPciInfo_t pci{};
  if (n.pci && n.pci(h, &pci) == NVML_SUCCESS) g.bus_id = pci.busId;
  unsigned int u = 0;
  if (n.clock) {
    const nvmlReturn_t rc = n.clock(h, NVML_CLOCK_SM, &u);
    if (unreachable(rc)) return g.error = std::string("NVML: ") + n.error_string(rc), g;
    if (rc == NVML_SUCCESS) g.sm_clock_mhz = u;
  }
  if (n.max_clock && n.max_clock(h, NVML_CLOCK_SM, &u) == NVML_SUCCESS) g.max_sm_clock_mhz = u;
  nvmlTemperature_t t{};
  t.version = nvmlTemperature_v1;
  t.sensorType = NVML_TEMPERATURE_GPU;
  if (n.temperature && n.temperature(h, &t) == NVML_SUCCESS) g.temperature_c = t.temperature;
  else if (n.temperature_legacy && n.temperature_legacy(h, NVML_TEMPERATURE_GPU, &u) == NVML_SUCCESS) g.temperature_c = (int)u;
  if (n.threshold && n.threshold(h, NVML_TEMPERATURE_THRESHOLD_SLOWDOWN, &u) == NVML_SUCCESS) g.slowdown_temperature_c = (int)u;
  unsigned long long count = 0;
  if (n.ecc && n.ecc(h, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC, &count) == NVML_SUCCESS)
    g.ecc_uncorrected = (long long)count;
  unsigned int corrected = 0, uncorrected = 0, pending = 0, failed = 0;
  if (n.remapped && n.remapped(h, &corrected, &uncorrected, &pending, &failed) == NVML_SUCCESS)
    g.remap_pending = pending != 0, g.remap_failed = failed != 0;
  unsigned long long reasons = 0;
  if ((n.reasons && n.reasons(h, &reasons) == NVML_SUCCESS) ||
      (n.reasons_legacy && n.reasons_legacy(h, &reasons) == NVML_SUCCESS)) {
    g.hw_slowdown = reasons & kHwSlowdown;
    g.thermal_slowdown = reasons & kThermal;
    g.power_brake = reasons & kPowerBrake;
  }
  if (n.width && n.width(h, &u) == NVML_SUCCESS) g.pcie_width = (int)u;
  if (n.max_width && n.max_width(h, &u) == NVML_SUCCESS) g.max_pcie_width = (int)u;
  return g;
}

}  // namespace

NodeGpus read_node_gpus(int product_device) {
  NodeGpus out;
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* why = dlerror();
    out.missing = std::string("no NVML: ") + (why ? why : "libnvidia-ml.so.1 cannot be loaded");
    return out;
  }
  const Nvml n(lib);
  if (!n.usable()) {
    out.missing = "no NVML: libnvidia-ml.so.1 lacks nvmlInit_v2 or the device functions (a driver older than 2018?)";
    dlclose(lib);
    return out;
  }
  if (const nvmlReturn_t rc = n.init(); rc != NVML_SUCCESS) {
    out.missing = std::string("NVML: ") + n.error_string(rc);
    dlclose(lib);
    return out;
  }
  char cuda_bus[32] = {};
  if (cudaDeviceGetPCIBusId(cuda_bus, sizeof cuda_bus, product_device) != cudaSuccess) cudaGetLastError(), cuda_bus[0] = 0;
  unsigned int gpus = 0;
  if (const nvmlReturn_t rc = n.count(&gpus); rc != NVML_SUCCESS) out.missing = std::string("NVML: ") + n.error_string(rc);
  for (unsigned int i = 0; i < gpus; i++) {
    nvmlDevice_t h{};
    GpuState g;
    if (const nvmlReturn_t rc = n.handle(i, &h); rc == NVML_ERROR_NO_PERMISSION) {
      continue;  // a GPU this process may not open (another job's, hidden by cgroups)
    } else if (rc != NVML_SUCCESS) {
      g.index = (int)i, g.error = std::string("NVML: ") + n.error_string(rc);  // lost, no power, ...
      out.gpus.push_back(g);
      continue;
    }
    g = read_gpu(n, h, (int)i);
    g.ran_product = cuda_bus[0] && normal_bus_id(g.bus_id) == normal_bus_id(cuda_bus);
    out.gpus.push_back(g);
  }
  n.shutdown();
  dlclose(lib);
  return out;
}

}  // namespace trainer::cuda
