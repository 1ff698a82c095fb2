#pragma once
// The training step `trainer bench` times: forward (with the loss gradient),
// backward and AdamW on one micro-batch of random tokens, in one process,
// for one or several recompute modes (each model on its own backend, so its
// memory is counted apart; steps taken round-robin, so a slow spell of a
// shared machine hits every mode alike).
#include <memory>
#include <vector>

#include "recipe/recipe.h"
#include "runtime/backend.h"

namespace trainer {

struct BenchRun {
  RecomputeMode mode = RecomputeMode::None;
  size_t params = 0;
  std::vector<double> wall_ms, cpu_ms;  // per timed step; CPU time of the process (all threads)
  std::vector<double> phase_ms[3];      // forward, backward, optimizer
  // The step's host waits for the backend (Backend::host_syncs), without the
  // bench's own synchronisation between forward and backward.
  std::vector<double> host_syncs;
  double loss = 0;                      // of the last step
  MemoryStats memory;                   // the backend's peaks after the steps
};

// first: the backend the first mode runs on (the caller measured the sgemm
// peak on it); the others get their own. Returns the backend of the first
// mode back through `first`.
std::vector<BenchRun> bench_training(const Recipe& r, const std::vector<RecomputeMode>& modes, int steps,
                                     int warmup, std::unique_ptr<Backend>& first);

}  // namespace trainer
