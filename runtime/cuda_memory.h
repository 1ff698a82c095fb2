#pragma once
// What the CUDA backend holds on the device beyond the model's own buffers,
// as formulas the memory plan (model/memory_plan.cpp) and the backend
// (runtime/cuda/cuda_backend.cpp) both read, so `trainer plan` and the
// pre-flight count it for runtime.backend = "cuda" (it is nothing on the CPU
// backend, which is why it has no allocation category of its own: on a GPU
// the backend files these buffers under temporaries).
#include <cstddef>

namespace trainer::cuda_memory {

// cuBLASLt's workspace (its recommendation for Hopper), allocated once.
constexpr size_t kGemmWorkspaceBytes = 32u << 20;

// cuDNN's fused attention, bf16: the backward's workspace. The deterministic
// algorithm (runtime.deterministic_attention = true, the default) keeps dP in
// fp32 for every (batch, head) pair: B x H x T^2 x 4 bytes, quadratic in T;
// the non-deterministic one accumulates dQ with atomics (reruns differ in
// the last bits), in an fp32 buffer of B x H x T x hd, which is counted.
inline double attention_workspace_bytes(double B, double H, double T, double hd, bool deterministic) {
  return deterministic ? B * H * T * T * 4 : B * H * T * hd * 4;
}

// NCCL's buffers per communicator: NCCL_BUFFSIZE (4 MiB by default) per
// channel and direction, with 16 channels assumed (NCCL picks 8 to 32 by
// topology): an estimate, not a measurement.
constexpr double kNcclBytesPerCommunicator = 2.0 * 16 * 4 * 1048576;

}  // namespace trainer::cuda_memory
