#include "runtime/cuda/cuda_device.h"

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdlib>
#include <string>

#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/cudnn_sdpa.h"

namespace trainer::cuda {

int device_count() {
  int n = 0;  // left unwritten on error
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

std::string no_device_reason() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e == cudaSuccess && n > 0) return "";
  cudaGetLastError();
  if (e == cudaSuccess) return "no CUDA device is visible (CUDA_VISIBLE_DEVICES?)";
  return std::string("no usable GPU: ") + cudaGetErrorString(e);
}

DeviceChoice choose_device(int local_rank, int ranks_on_node, int devices) {
  DeviceChoice c;
  if (devices <= 0) return c;
  c.device = (local_rank < 0 ? 0 : local_rank) % devices;
  c.shared = ranks_on_node > devices;
  return c;
}

DeviceChoice device_for_rank(int local_rank, int ranks_on_node) {
  return choose_device(local_rank, ranks_on_node, device_count());
}

DeviceInfo device_info(int device) {
  cudaDeviceProp p{};
  CUDA_CHECK(cudaGetDeviceProperties(&p, device));
  DeviceInfo d;
  d.name = p.name;
  d.sm_major = p.major, d.sm_minor = p.minor, d.sms = p.multiProcessorCount;
  int cur = 0;
  CUDA_CHECK(cudaGetDevice(&cur));
  if (cur == device) CUDA_CHECK(cudaMemGetInfo(&d.free_bytes, &d.total_bytes));
  else d.total_bytes = p.totalGlobalMem;
  return d;
}

double known_peak_gflops(const std::string& name, MathMode mode) {
  // Dense (no sparsity) data-sheet peaks; SXM parts unless named otherwise.
  // TF32 runs on the tensor cores at half the bf16 rate.
  struct Row {
    const char* match;
    double bf16, tf32, fp32;
  };
  static const Row rows[] = {
      {"H200", 989.4e3, 494.7e3, 66.9e3},    {"H100 PCIe", 756.5e3, 378e3, 51.2e3},
      {"H100 NVL", 835.5e3, 417.5e3, 59.8e3}, {"H100", 989.4e3, 494.7e3, 66.9e3},
      {"H800", 989.4e3, 494.7e3, 66.9e3},    {"GH200", 989.4e3, 494.7e3, 66.9e3},
      {"A100", 312e3, 156e3, 19.5e3},        {"A800", 312e3, 156e3, 19.5e3},
      {"L40S", 362e3, 181e3, 91.6e3},        {"A10G", 70e3, 35e3, 31.2e3},
      {"L4", 121e3, 60.5e3, 30.3e3},         {"B200", 2250e3, 1100e3, 80e3},
  };
  for (const Row& r : rows)
    if (name.find(r.match) != std::string::npos)
      return mode == MathMode::Bf16 ? r.bf16 : mode == MathMode::Tf32 ? r.tf32 : r.fp32;
  return 0;
}

std::string library_versions() {
  int rt = 0;
  cudaRuntimeGetVersion(&rt);
  const size_t lt = cublasLtGetVersion();
  int nccl = 0;
  ncclGetVersion(&nccl);
  auto dotted = [](long v, long a, long b) {
    return std::to_string(v / a) + "." + std::to_string(v / b % (a / b)) + "." + std::to_string(v % b);
  };
  return "CUDA runtime " + std::to_string(rt / 1000) + "." + std::to_string(rt / 10 % 100) + ", cuBLASLt " +
         dotted((long)lt, 10000, 100) + ", cuDNN " + CudnnSdpa::version() + ", NCCL " + dotted(nccl, 10000, 100);
}

}  // namespace trainer::cuda
