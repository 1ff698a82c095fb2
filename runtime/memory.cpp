#include "runtime/memory.h"

#include <algorithm>

namespace trainer {

const char* mem_name(Mem m) {
  static const char* names[] = {"params", "grads", "optimizer", "activations", "comm", "temporaries"};
  return names[(int)m];
}

void MemoryTracker::add(const void* p, size_t bytes, Mem kind) {
  live_[p] = {bytes, kind};
  const int k = (int)kind;
  s_.current[k] += bytes;
  s_.peak[k] = std::max(s_.peak[k], s_.current[k]);
  s_.total_current += bytes;
  s_.total_peak = std::max(s_.total_peak, s_.total_current);
}

void MemoryTracker::remove(const void* p) {
  const auto it = live_.find(p);
  if (it == live_.end()) return;
  s_.current[(int)it->second.second] -= it->second.first;
  s_.total_current -= it->second.first;
  live_.erase(it);
}

void MemoryTracker::reset_peaks() {
  for (int k = 0; k < kMemKinds; k++) s_.peak[k] = s_.current[k];
  s_.total_peak = s_.total_current;
}

}  // namespace trainer
