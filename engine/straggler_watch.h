#pragma once
// Stragglers: every runtime.straggler_every steps all ranks share their mean
// compute time per step (step time minus time in communication calls, which
// is where fast ranks wait for slow ones); a rank slower than what its
// pipeline stage should take by more than runtime.straggler_factor is
// named. The judgment, and the watch that keeps a rank's window and the
// newest report that named ranks (engine/stragglers.cpp prints and records
// the reports).
#include <optional>
#include <vector>

#include "parallel/communicator.h"
#include "parallel/grid_shape.h"
#include "recipe/recipe.h"

namespace trainer {

// Ranks whose compute time per step exceeds what their pipeline stage should
// take by runtime.straggler_factor (judge_stragglers says how that is found).
struct StragglerReport {
  std::vector<double> ranks, ms, ratios;  // world ranks named, their compute ms/step and ratio to what their stage should take
  double worst_ratio = 0, median_ms = 0;  // median: over all ranks
  // Ranks slower than that only because their experts received more rows
  // than their stage's median rank's (Mixture-of-Experts routing): not
  // named; their compute ms and that load ratio.
  std::vector<double> loaded, loaded_ms, loads;
};
// The verdict on every rank's mean compute ms (index: world rank): each rank
// against its stage's predicted share of the work (stage_work) at the fastest
// stage's rate, a stage's rate being the median of its ranks. With experts:
// a rank's time first divided by what its experts' rows add, 1 + share x
// (its rows / its stage's median rows - 1) (share: expert_flops_share),
// so that a rank the routing sent more tokens is told from a slow one.
StragglerReport judge_stragglers(const std::vector<float>& ms, const GridShape& grid, double factor,
                                 const std::vector<double>& stage_work, const std::vector<float>& expert_rows = {},
                                 double expert_share = 0);
// Collective over the world group; my_compute_ms, my_expert_rows: this rank's means.
StragglerReport find_stragglers(ControlComm& world, const GridShape& grid, double factor, double my_compute_ms,
                                const std::vector<double>& stage_work, double my_expert_rows = 0,
                                double expert_share = 0);

class StragglerWatch {
 public:
  explicit StragglerWatch(const RuntimeSection& rt) : rt_(rt) {}
  bool on() const { return rt_.straggler_factor > 0; }
  // This rank's mean compute ms per step and experts' rows over a window.
  struct Window {
    double compute_ms = 0, expert_rows = 0;
  };
  // A step's figures (compute: its time outside communication calls); the
  // window's means once it holds straggler_every steps (a report is due:
  // every rank's window fills at the same step), the next window begun.
  std::optional<Window> add(double compute_ms, double expert_rows);
  // Reports made by this launch (the first: 1).
  long windows() const { return windows_; }
  // A report at `step`; the newest that named ranks is kept.
  void reported(const StragglerReport& r, long step);
  // The newest report that named ranks, when it came within the last two
  // windows before `step` (a throughput drop then names its rank).
  const StragglerReport* recent(long step) const;

 private:
  const RuntimeSection& rt_;
  double compute_ms_ = 0, expert_rows_ = 0;  // (expert rows: a Mixture-of-Experts model's)
  int steps_ = 0;
  long windows_ = 0;
  StragglerReport named_;  // the newest report that named a rank...
  long named_step_ = -1;   // ...and its step
};

}  // namespace trainer
