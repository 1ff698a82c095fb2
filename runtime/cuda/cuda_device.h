#pragma once
// Which GPU a rank uses, what it is, and what the CUDA libraries are. Only
// the functions named so touch the driver; none runs at static
// initialisation (gtest runs test binaries at discovery, where a machine
// without a driver must still load them).
#include <string>

namespace trainer::cuda {

// GPUs this process can use; 0 on any error (no driver, no device: without
// a GPU the runtime reports cudaErrorInsufficientDriver, not a count of 0).
int device_count();
// Why there is no GPU, in a sentence, or "" when there is one.
std::string no_device_reason();

// The device for node-local rank `local_rank` of `ranks_on_node` ranks, with
// `devices` GPUs: local_rank % devices. `shared` says whether more ranks
// than GPUs run on the node (then NCCL cannot be used; see parallel/).
struct DeviceChoice {
  int device = 0;
  bool shared = false;
};
DeviceChoice choose_device(int local_rank, int ranks_on_node, int devices);
// This rank's choice among the GPUs present (local_rank: the launcher's,
// app/environment.h; < 0: a single process, device 0).
DeviceChoice device_for_rank(int local_rank, int ranks_on_node);

struct DeviceInfo {
  std::string name;
  int sm_major = 0, sm_minor = 0, sms = 0;
  size_t free_bytes = 0, total_bytes = 0;
};
DeviceInfo device_info(int device);

// Dense peak of known GPUs in GFLOP/s for bf16 tensor-core math (fp32 runs
// on CUDA cores: the fp32 figure), from the vendors' data sheets; 0 when the
// name is not in the table.
// How fp32-typed products run: fp32 (exact), TF32 (runtime.allow_tf32), or bf16.
enum class MathMode { Fp32, Tf32, Bf16 };
double known_peak_gflops(const std::string& device_name, MathMode mode);

// "CUDA runtime 13.0, cuBLASLt 13.1.0, cuDNN 9.19.0 (frontend 1.32.0), NCCL 2.28.9".
std::string library_versions();

}  // namespace trainer::cuda
