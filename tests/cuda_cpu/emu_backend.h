#pragma once
// A Backend whose operations run the CUDA backend's own kernels
// (runtime/cuda/*.cu, compiled for the host against cuda_emu.h) on host
// memory, so the op tests of tests/support/kernel_cases.h hold them to the CPU
// backend exactly as they hold the CUDA backend on a GPU. What the CUDA
// backend hands to libraries is not emulated: products go to the CPU
// backend (cuBLASLt on a GPU), bf16 attention (cuDNN) is refused, and a bf16
// ring pair has the CPU backend stand in for cuDNN's part of it.
// Every allocation is followed by a guard of NaN bytes: a kernel that reads
// past a buffer reads NaN, and one that writes past it fails the check that
// follows every operation.
#include <map>

#include "runtime/cpu/cpu_backend.h"

namespace trainer {

class EmuBackend final : public Backend {
 public:
  EmuBackend() : cpu_(1) {}
  ~EmuBackend() override;
  std::string name() const override { return "cuda-kernels-on-cpu"; }
  const MemoryStats& memory() const override { return mem_.stats(); }
  void reset_memory_peaks() override { mem_.reset_peaks(); }
  // Every operation of runtime/backend_ops.inc.
#define TRAINER_BACKEND_OP TRAINER_BACKEND_OVERRIDE
#include "runtime/backend_ops.inc"

  // The cuDNN glue kernels, which have no Backend method of their own.
  void lse_to_stats(float* stats, const float* lse, size_t rows);
  void stats_to_lse(float* lse, const float* stats, size_t rows);

 protected:
  void* allocate(size_t bytes, Mem kind, Space space) override;
  void release(void* p) override;

 private:
  // Throws if an operation wrote into the guard after a buffer.
  void check_guards(const char* op) const;
  float* scratch(size_t floats);

  CpuBackend cpu_;
  MemoryTracker mem_;
  std::map<char*, size_t> live_;  // allocation -> bytes before its guard
  Buffer scratch_;
};

}  // namespace trainer
