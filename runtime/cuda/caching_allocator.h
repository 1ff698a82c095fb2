#pragma once
// Device memory for the CUDA backend. cudaMalloc and cudaFree synchronise the
// device and are slow, so freed blocks are kept and reused for requests of
// up to their size (within 2x, rounded to 512 bytes); they go back to the
// driver only when a request would otherwise fail. The MemoryTracker counts
// what callers asked for, under their category, so the metrics and `trainer
// plan` read the same on both backends. Pinned host memory (Space::Staging)
// is not device memory and is not counted, as on the CPU backend.
#include <cstddef>
#include <map>
#include <unordered_map>

#include "runtime/memory.h"

namespace trainer::cuda {

class CachingAllocator {
 public:
  explicit CachingAllocator(MemoryTracker& tracker) : tracker_(tracker) {}
  ~CachingAllocator();
  // Throws std::runtime_error when the device is out of memory, naming the
  // category, the request and the device's free and total memory.
  void* allocate(size_t bytes, Mem kind);
  void* allocate_pinned(size_t bytes);
  void release(void* p);
  size_t cached_bytes() const { return cached_; }
  void free_cached();  // returns every cached block to the driver

 private:
  MemoryTracker& tracker_;
  std::multimap<size_t, void*> free_;              // cached device blocks by size
  std::unordered_map<void*, size_t> live_;         // device block -> its size
  std::unordered_map<void*, bool> pinned_;         // pinned host blocks
  size_t cached_ = 0;
};

}  // namespace trainer::cuda
