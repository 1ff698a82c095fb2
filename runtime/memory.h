#pragma once
// Memory accounting: every buffer a backend allocates is counted under a
// category, with current and peak bytes per category and in total. Backends
// own a MemoryTracker and report through Backend::memory().
#include <cstddef>
#include <unordered_map>

namespace trainer {

enum class Mem { Params, Grads, Optimizer, Activations, Comm, Temporaries, kCount };
constexpr int kMemKinds = (int)Mem::kCount;
const char* mem_name(Mem m);  // "params", "grads", "optimizer", "activations", "comm", "temporaries"

struct MemoryStats {
  size_t current[kMemKinds] = {};
  size_t peak[kMemKinds] = {};
  size_t total_current = 0, total_peak = 0;
};

class MemoryTracker {
 public:
  void add(const void* p, size_t bytes, Mem kind);
  void remove(const void* p);
  // Peaks restart from the current values (e.g. to measure one step).
  void reset_peaks();
  const MemoryStats& stats() const { return s_; }

 private:
  MemoryStats s_;
  std::unordered_map<const void*, std::pair<size_t, Mem>> live_;
};

}  // namespace trainer
