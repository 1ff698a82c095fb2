#pragma once
// Device memory for the CUDA backend. cudaMalloc and cudaFree synchronise the
// device and are slow, so freed blocks are kept and reused for requests of
// up to their size (within 2x, rounded to 512 bytes); they go back to the
// driver only when a request would otherwise fail (both streams are
// synchronised first) and at the end. Nothing here runs on the legacy
// default stream, whose implicit device-wide ordering deadlocks against
// NCCL kernels waiting for a peer: a block is zeroed on the compute stream,
// and a block freed after work queued on the communication stream is handed
// out again only behind an event recorded there at its release. The MemoryTracker counts
// what callers asked for, under their category, so the metrics and `trainer
// plan` read the same on both backends. Pinned host memory (Space::Staging)
// is not device memory and is not counted, as on the CPU backend.
#include <cstddef>
#include <cuda_runtime.h>

#include <map>
#include <unordered_map>
#include <vector>

#include "runtime/memory.h"

namespace trainer::cuda {

class CachingAllocator {
 public:
  explicit CachingAllocator(MemoryTracker& tracker) : tracker_(tracker) {}
  ~CachingAllocator();
  // Before the first allocation: where blocks are zeroed, and the stream
  // whose queued work a released block waits for before reuse.
  void set_streams(cudaStream_t compute, cudaStream_t comm) { compute_ = compute, comm_ = comm; }
  // Throws std::runtime_error when the device is out of memory, naming the
  // category, the request and the device's free and total memory.
  void* allocate(size_t bytes, Mem kind);
  void* allocate_pinned(size_t bytes);
  void release(void* p);
  void free_cached();  // returns every cached block to the driver

 private:
  struct Cached {
    void* p;
    cudaEvent_t released;  // recorded on the communication stream at release
  };
  cudaEvent_t take_event();

  MemoryTracker& tracker_;
  cudaStream_t compute_ = nullptr, comm_ = nullptr;
  std::multimap<size_t, Cached> free_;             // cached device blocks by size
  std::vector<cudaEvent_t> spare_events_;
  std::unordered_map<void*, size_t> live_;         // device block -> its size
  std::unordered_map<void*, bool> pinned_;         // pinned host blocks
  size_t cached_ = 0;
};

}  // namespace trainer::cuda
