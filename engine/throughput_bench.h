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
  int micro_batch = 1;                  // sequences per step
  std::vector<double> wall_ms, cpu_ms;  // per timed step; CPU time of the process (all threads)
  std::vector<double> phase_ms[3];      // forward, backward, optimizer
  // The step's host waits for the backend (Backend::host_syncs), without the
  // bench's own synchronisation between forward and backward.
  std::vector<double> host_syncs;
  double loss = 0;                      // of the last step
  MemoryStats memory;                   // the backend's peaks after the steps
};

// What a mode's steps come to. Shared machines only ever slow a step down,
// so the fastest step is the least noisy estimate of one configuration. As
// in training (engine/step_log.cpp): a rate above the peak shows the peak is
// low, and MFU is against the rate itself, never above 100%.
struct BenchFigures {
  double fastest_ms = 0, tokens_per_s = 0;
  double median_ms = 0, median_cpu_ms = 0;  // medians compare configurations
  double median_phase_ms[3] = {};           // forward, backward, optimizer
  double host_syncs = 0;                    // per step, the median
  double model_gflops = 0;      // the model's FLOPs per second at that rate
  double mfu_peak_gflops = 0;   // the larger of the peak and model_gflops
  double mfu = 0;
};
BenchFigures bench_figures(const Recipe& r, const BenchRun& run, double peak_gflops);

// first: the backend the first mode runs on (the caller measured the sgemm
// peak on it); the others get their own, made with `options`. Returns the
// backend of the first mode back through `first`.
std::vector<BenchRun> bench_training(const Recipe& r, const std::vector<RecomputeMode>& modes, int steps,
                                     int warmup, const BackendOptions& options, std::unique_ptr<Backend>& first);

}  // namespace trainer
