// Stragglers: every runtime.straggler_every steps all ranks share their mean
// compute time per step (step time minus time in communication calls, which
// is where fast ranks wait for slow ones); a rank slower than its peers by
// more than runtime.straggler_factor is named.
#include <algorithm>
#include <cstdio>

#include "engine/step_loop.h"

namespace trainer {

StragglerReport find_stragglers(ControlComm& world, const GridShape& grid, double factor, double my_compute_ms) {
  const int n = world.size();
  std::vector<float> all(n);
  const float mine = (float)my_compute_ms;
  world.allgather(&mine, all.data(), 1);
  const double global = median_of(all);
  // Each pipeline stage's ranks, and the median they are compared with.
  std::vector<std::vector<float>> stage_times(grid.pp);
  for (int k = 0; k < n; k++) stage_times[grid_coords(grid, k).pp].push_back(all[k]);
  std::vector<double> stage_median(grid.pp);
  for (int p = 0; p < grid.pp; p++)
    stage_median[p] = stage_times[p].size() >= 3 ? median_of(stage_times[p]) : global;
  StragglerReport rep;
  rep.median_ms = global;
  for (int k = 0; k < n; k++) {
    const double med = stage_median[grid_coords(grid, k).pp];
    const double ratio = med > 0 ? all[k] / med : 0;
    rep.worst_ratio = std::max(rep.worst_ratio, ratio);
    if (ratio > factor) {
      rep.ranks.push_back(k);
      rep.ms.push_back(all[k]);
      rep.ratios.push_back(ratio);
    }
  }
  return rep;
}

void StepLoop::track_stragglers(const StepStats& st, StepExtras& x) {
  if (r_.runtime.straggler_factor <= 0) return;
  window_compute_ms_ += st.step_ms - st.comm_ms();
  if (++window_steps_ < r_.runtime.straggler_every) return;
  x.slow = find_stragglers(world_, r_.grid, r_.runtime.straggler_factor, window_compute_ms_ / window_steps_);
  x.straggler_report = true;
  window_compute_ms_ = 0, window_steps_ = 0;
}

void StepLoop::print_stragglers(const StepStats& st, const StragglerReport& slow) const {
  for (size_t i = 0; i < slow.ranks.size(); i++) {
    const GridCoords at = grid_coords(r_.grid, (int)slow.ranks[i]);
    std::fprintf(stderr,
                 "warning: step %ld: straggler: rank %d (dp %d, pp %d, tp %d) computed %.1f ms per step over the "
                 "last %d steps, %.2fx the median of the ranks doing the same work (runtime.straggler_factor = "
                 "%g; median of all ranks %.1f ms)\n",
                 st.step, (int)slow.ranks[i], at.dp, at.pp, at.tp, slow.ms[i], r_.runtime.straggler_every,
                 slow.ratios[i], r_.runtime.straggler_factor, slow.median_ms);
  }
}

}  // namespace trainer
