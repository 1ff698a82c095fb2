#pragma once
// The CUDA backend: one GPU per rank. GEMMs through cuBLASLt, bf16 attention
// through cuDNN's fused SDPA, everything else through the kernels in
// runtime/cuda/*.cu. Work is queued on a compute stream and a communication
// stream (non-blocking: nothing runs on the legacy default stream, so no
// call orders against the whole device); events order one against the other.
// Pointers handed in as float*/int32_t* (statistics, gradients, token ids,
// logits) are device pointers from this backend's Buffers.
#include <cuda_runtime.h>

#include <atomic>
#include <memory>
#include <vector>

#include "runtime/backend.h"
#include "runtime/cuda/caching_allocator.h"
#include "runtime/cuda/cublaslt_gemm.h"
#include "runtime/cuda/cudnn_sdpa.h"
#include "runtime/cuda/cuda_device.h"

namespace trainer {

struct CudaOptions {
  int device = 0;
  bool allow_tf32 = false;  // fp32 GEMMs in TF32 (runtime.allow_tf32)
  bool deterministic_attention = true;  // runtime.deterministic_attention
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(const CudaOptions& opt);
  ~CudaBackend() override;
  std::string name() const override { return "cuda"; }
  std::string device_name() const override { return info_.name; }
  double known_peak_gflops(DType dt) const override {
    using cuda::MathMode;
    return cuda::known_peak_gflops(info_.name, dt == DType::BF16 ? MathMode::Bf16
                                               : allow_tf32_     ? MathMode::Tf32
                                                                 : MathMode::Fp32);
  }
  int device() const { return device_; }
  const cuda::DeviceInfo& info() const { return info_; }
  cudaStream_t stream(Stream s) const { return s == kCommStream ? comm_ : compute_; }

  const MemoryStats& memory() const override { return mem_.stats(); }
  void reset_memory_peaks() override { mem_.reset_peaks(); }
  // Every operation of runtime/backend_ops.inc.
#define TRAINER_BACKEND_OP TRAINER_BACKEND_OVERRIDE
#include "runtime/backend_ops.inc"
  void to_host_async(void* host, CRef src, size_t n, Stream s) override;
  void from_host_async(Ref dst, const void* host, size_t n) override;

  Event record_event(Stream s) override;
  void wait_event(Stream waiter, const Event& e) override;
  void synchronize_event(const Event& e) override;
  bool event_done(const Event& e);  // without waiting
  void synchronize() override;

  CRef product_operand(CRef x, size_t n, DType dt) override;

 protected:
  void* allocate(size_t bytes, Mem kind, Space space) override;
  void release(void* p) override;

 private:
  // Scratch device memory kept between calls, grown on demand (temporaries).
  void* scratch(int slot, size_t bytes);
  float* scratch_f32(int slot, size_t n) { return static_cast<float*>(scratch(slot, n * sizeof(float))); }
  cudaEvent_t event_slot(const Event& e);
  cuda::CudnnSdpa& sdpa();

  int device_;
  bool allow_tf32_, deterministic_attention_;
  cuda::DeviceInfo info_;
  MemoryTracker mem_;
  cuda::CachingAllocator alloc_{mem_};
  cudaStream_t compute_ = nullptr, comm_ = nullptr;
  // One ring of events per stream: an Event's stream picks the ring, its id
  // the slot. A slot is re-recorded kEventRing events later on the same
  // stream, so a handle that old names a later point of its own stream
  // (waiting for it waits longer, never less); it can never alias an event
  // of the other stream, which could complete before the one it stood for.
  std::vector<cudaEvent_t> events_[2];
  std::atomic<uint64_t> next_event_[2] = {};  // an async checkpoint's writer thread reads them
  // One slot per use that can be live at once.
  enum Slot { kReduce, kEmbedSort, kAttnRows, kAttnWorkspace, kAttnBlock, kGemmOperand, kProductOperand, kRopeTable, kScratchSlots };
  // The rope table in kRopeTable is for this (T, head size, frequencies).
  struct RopeKey {
    int T = 0, hd = 0;
    RopeFreqs freqs{0.f, {}};
  } rope_key_;
  Buffer scratch_[kScratchSlots];
  Buffer gemm_workspace_;
  std::unique_ptr<cuda::LtGemm> gemm_;
  std::unique_ptr<cuda::CudnnSdpa> sdpa_;
  // sumsq_groups: a piece table and its partial sums per set of spans.
  struct SumTable {
    std::vector<SumSpan> spans;
    Buffer pieces, partials;
    int count;
  };
  static constexpr size_t kSumTables = 8;
  SumTable& sum_table(const std::vector<SumSpan>& spans);
  std::vector<SumTable> sums_;
  Buffer sum_out_, sum_host_;
};

}  // namespace trainer
