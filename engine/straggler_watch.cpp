#include "engine/straggler_watch.h"

#include <algorithm>

#include "runtime/metrics.h"

namespace trainer {

// Each rank is held to what its stage should take: the stage's predicted
// share of the work (stage_work, from the plan's flop counts) at the rate of
// the fastest stage. A stage's rate is the median of its ranks, so one slow
// rank among three or more peers does not move it and is named against them;
// a stage slow as a whole, all its ranks alike, is named against the others'
// rate, and the head's stage is not named for the head's predicted work.
StragglerReport judge_stragglers(const std::vector<float>& raw, const GridShape& grid, double factor,
                                 const std::vector<double>& stage_work, const std::vector<float>& expert_rows,
                                 double expert_share) {
  const int n = (int)raw.size();
  // Each rank's experts' load against its stage's median rank's, and its
  // time without what the extra (or missing) rows cost.
  std::vector<double> load(n, 1.0);
  std::vector<float> all(raw);
  if (expert_share > 0 && (int)expert_rows.size() == n) {
    std::vector<std::vector<float>> stage_rows(grid.pp);
    for (int k = 0; k < n; k++) stage_rows[grid_coords(grid, k).pp].push_back(expert_rows[k]);
    for (int k = 0; k < n; k++) {
      const double median = median_of(stage_rows[grid_coords(grid, k).pp]);
      if (median > 0) load[k] = expert_rows[k] / median;
      all[k] = (float)(raw[k] / (1 + expert_share * (load[k] - 1)));
    }
  }
  std::vector<std::vector<float>> stage_times(grid.pp);
  for (int k = 0; k < n; k++) stage_times[grid_coords(grid, k).pp].push_back(all[k]);
  double rate = -1;  // the fastest stage's median ms per unit of predicted work
  for (int p = 0; p < grid.pp; p++) {
    const double r = median_of(stage_times[p]) / stage_work[p];
    if (rate < 0 || r < rate) rate = r;
  }
  StragglerReport rep;
  rep.median_ms = median_of(raw);
  for (int k = 0; k < n; k++) {
    const double expected = rate * stage_work[grid_coords(grid, k).pp];
    const double ratio = expected > 0 ? all[k] / expected : 0, raw_ratio = expected > 0 ? raw[k] / expected : 0;
    rep.worst_ratio = std::max(rep.worst_ratio, ratio);
    if (ratio > factor) {
      rep.ranks.push_back(k);
      rep.ms.push_back(raw[k]);
      rep.ratios.push_back(ratio);
    } else if (raw_ratio > factor) {
      rep.loaded.push_back(k), rep.loaded_ms.push_back(raw[k]), rep.loads.push_back(load[k]);
    }
  }
  return rep;
}

StragglerReport find_stragglers(ControlComm& world, const GridShape& grid, double factor, double my_compute_ms,
                                const std::vector<double>& stage_work, double my_expert_rows, double expert_share) {
  const int n = world.size();
  std::vector<float> both(2 * (size_t)n), ms(n), rows(n);
  const float mine[2] = {(float)my_compute_ms, (float)my_expert_rows};
  world.allgather(mine, both.data(), 2);
  for (int k = 0; k < n; k++) ms[k] = both[2 * k], rows[k] = both[2 * k + 1];
  return judge_stragglers(ms, grid, factor, stage_work, rows, expert_share);
}

std::optional<StragglerWatch::Window> StragglerWatch::add(double compute_ms, double expert_rows) {
  if (!on()) return std::nullopt;
  compute_ms_ += compute_ms, expert_rows_ += expert_rows;
  if (++steps_ < rt_.straggler_every) return std::nullopt;
  const Window w{compute_ms_ / steps_, expert_rows_ / steps_};
  windows_++;
  compute_ms_ = 0, expert_rows_ = 0, steps_ = 0;
  return w;
}

void StragglerWatch::reported(const StragglerReport& r, long step) {
  if (!r.ranks.empty()) named_ = r, named_step_ = step;
}

const StragglerReport* StragglerWatch::recent(long step) const {
  return named_step_ >= 0 && step - named_step_ <= 2L * rt_.straggler_every ? &named_ : nullptr;
}

}  // namespace trainer
