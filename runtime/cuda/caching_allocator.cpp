#include "runtime/cuda/caching_allocator.h"

#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>

#include "runtime/cuda/cuda_check.h"
#include "runtime/units.h"

namespace trainer::cuda {

namespace {
size_t round_up(size_t b) { return b ? (b + 511) / 512 * 512 : 512; }
std::string mb(size_t b) {
  char s[32];
  std::snprintf(s, sizeof s, "%.1f MB", mib(b));
  return s;
}
}  // namespace

CachingAllocator::~CachingAllocator() {
  free_cached();
  for (cudaEvent_t e : spare_events_) cudaEventDestroy(e);
  for (auto& [p, size] : live_) cudaFree(p);
  for (auto& [p, unused] : pinned_) cudaFreeHost(p);
}

cudaEvent_t CachingAllocator::take_event() {
  if (spare_events_.empty()) {
    cudaEvent_t e = nullptr;
    CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return e;
  }
  cudaEvent_t e = spare_events_.back();
  spare_events_.pop_back();
  return e;
}

void* CachingAllocator::allocate(size_t bytes, Mem kind) {
  if (!compute_ || !comm_) throw std::logic_error("CachingAllocator: streams not set");
  const size_t size = round_up(bytes);
  void* p = nullptr;
  auto it = free_.lower_bound(size);
  if (it != free_.end() && it->first <= 2 * size) {
    p = it->second.p;
    if (cudaEvent_t released = it->second.released) {
      CUDA_CHECK(cudaStreamWaitEvent(compute_, released, 0));
      spare_events_.push_back(released);
    }
    live_[p] = it->first;
    cached_ -= it->first;
    free_.erase(it);
  } else {
    cudaError_t e = cudaMalloc(&p, size);
    if (e == cudaErrorMemoryAllocation && cached_) {  // give the cache back and retry once
      cudaGetLastError();
      free_cached();
      e = cudaMalloc(&p, size);
    }
    if (e != cudaSuccess) {
      cudaGetLastError();
      size_t free_b = 0, total_b = 0;
      cudaMemGetInfo(&free_b, &total_b);
      throw std::runtime_error("GPU out of memory: allocating " + mb(bytes) + " of " + mem_name(kind) + " failed (" +
                               cudaGetErrorString(e) + "); the device has " + mb(free_b) + " free of " +
                               mb(total_b) + ", this rank holds " + mb(tracker_.stats().total_current) +
                               "; `trainer plan RECIPE` shows what each category needs");
    }
    live_[p] = size;
  }
  CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, compute_));  // Buffers start zeroed, in compute-stream order
  tracker_.add(p, bytes, kind);
  return p;
}

void* CachingAllocator::allocate_pinned(size_t bytes) {
  void* p = nullptr;
  CUDA_CHECK(cudaHostAlloc(&p, round_up(bytes), cudaHostAllocDefault));
  std::memset(p, 0, bytes);
  pinned_[p] = true;
  return p;
}

void CachingAllocator::release(void* p) {
  if (!p) return;
  if (pinned_.erase(p)) {
    cudaFreeHost(p);
    return;
  }
  auto it = live_.find(p);
  if (it == live_.end()) return;
  tracker_.remove(p);
  cudaEvent_t released = nullptr;
  if (comm_) {
    released = take_event();
    CUDA_CHECK(cudaEventRecord(released, comm_));
  }
  free_.emplace(it->second, Cached{p, released});
  cached_ += it->second;
  live_.erase(it);
}

void CachingAllocator::free_cached() {
  if (!free_.empty() && compute_) {  // cudaFree orders against everything: let queued work finish first
    cudaStreamSynchronize(compute_);
    cudaStreamSynchronize(comm_);
  }
  for (auto& [size, c] : free_) {
    cudaFree(c.p);
    if (c.released) spare_events_.push_back(c.released);
  }
  free_.clear();
  cached_ = 0;
}

}  // namespace trainer::cuda
