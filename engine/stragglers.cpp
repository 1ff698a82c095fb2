// Stragglers: every runtime.straggler_every steps all ranks share their mean
// compute time per step (step time minus time in communication calls, which
// is where fast ranks wait for slow ones); a rank slower than its peers by
// more than runtime.straggler_factor is named. And the throughput watch's
// reports (engine/throughput_watch.h). Rank 0 writes the reports that name
// a rank, with its host, and the throughput drops to events.jsonl.
#include <algorithm>
#include <cstdio>

#include "engine/step_loop.h"
#include "runtime/run_events.h"
#include "model/flops.h"
#include "runtime/errors.h"
#include "runtime/host_name.h"

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

void StepLoop::track_stragglers(const StepStats& st, StepExtras& x) {
  if (r_.runtime.straggler_factor <= 0) return;
  window_compute_ms_ += st.step_ms - st.comm_ms();
  window_expert_rows_ += st.moe_expert_rows;
  if (++window_steps_ < r_.runtime.straggler_every) return;
  x.slow = find_stragglers(world_, r_.parallel.grid, r_.runtime.straggler_factor, window_compute_ms_ / window_steps_,
                           stage_work(r_.model, r_.parallel.grid.pp), window_expert_rows_ / window_steps_,
                           expert_flops_share(r_.model));
  x.straggler_report = true;
  straggler_windows_++;
  window_compute_ms_ = 0, window_steps_ = 0, window_expert_rows_ = 0;
}

// Rank 0: a report that names ranks is also a `straggler` event, with each
// rank's host, for `trainer supervise` (supervisor.on_straggler = "replace"
// counts the reports in a row that name one host; supervise/straggler_streak.h).
void StepLoop::report_stragglers(const StepStats& st, const StragglerReport& slow) {
  print_stragglers(st, slow);
  if (slow.ranks.empty()) return;
  std::vector<std::string> hosts;
  std::string text = "step " + std::to_string(st.step) + ": straggler(s) over the last " +
                     std::to_string(r_.runtime.straggler_every) + " steps:";
  for (size_t i = 0; i < slow.ranks.size(); i++) {
    // Each rank's host as it gave it in the probe's start-up swap (engine/job.cpp).
    hosts.push_back(job_.probe ? job_.probe->host((int)slow.ranks[i]) : host_name());
    char b[160];
    std::snprintf(b, sizeof b, "%s rank %d on %s, %.1f ms per step, %.2fx what its stage should take", i ? ";" : "",
                  (int)slow.ranks[i], hosts.back().c_str(), slow.ms[i], slow.ratios[i]);
    text += b;
  }
  write_event(events::record(events::Straggler{.step = st.step,
                                               .window_steps = r_.runtime.straggler_every,
                                               .window = straggler_windows_,
                                               .ranks = slow.ranks,
                                               .hosts = hosts,
                                               .ratios = slow.ratios,
                                               .compute_ms = slow.ms,
                                               .median_ms = slow.median_ms},
                             job_.launch, text));
}

// Rank 0: one record into the run's events.jsonl (beside the supervisor's),
// opened at the first event.
void StepLoop::write_event(const JsonRecord& e) {
  try {
    if (!events_) events_ = std::make_unique<MetricsLog>(r_.run.dir + "/events.jsonl", false);
  } catch (const UserError& err) {
    return run_file_unwritable(err.what());
  }
  if (!events_->write(e)) run_file_unwritable(events_->error());
}

void StepLoop::print_stragglers(const StepStats& st, const StragglerReport& slow) const {
  for (size_t i = 0; i < slow.loaded.size(); i++)
    std::fprintf(stderr,
                 "note: step %ld: rank %d (%s) computed %.1f ms per step over the last %d steps, more than "
                 "runtime.straggler_factor = %g allows, but its experts computed %.2fx the rows of its stage's "
                 "median rank (the routing sent it more tokens): not a straggler\n",
                 st.step, (int)slow.loaded[i], grid_position(r_.parallel.grid, (int)slow.loaded[i]).c_str(),
                 slow.loaded_ms[i], r_.runtime.straggler_every, r_.runtime.straggler_factor, slow.loads[i]);
  for (size_t i = 0; i < slow.ranks.size(); i++) {
    std::fprintf(stderr,
                 "warning: step %ld: straggler: rank %d (%s) computed %.1f ms per step over the "
                 "last %d steps, %.2fx what its stage should take (its predicted share of the work at the "
                 "fastest stage's rate, each stage's rate the median of its ranks; runtime.straggler_factor = "
                 "%g; median of all ranks %.1f ms)\n",
                 st.step, (int)slow.ranks[i], grid_position(r_.parallel.grid, (int)slow.ranks[i]).c_str(), slow.ms[i], r_.runtime.straggler_every,
                 slow.ratios[i], r_.runtime.straggler_factor, slow.median_ms);
  }
}

}  // namespace trainer

namespace trainer {

// Rank 0: a drop goes to stderr and, as a `throughput_drop` event, to
// events.jsonl (beside the supervisor's events; `trainer status` and the
// report show it), with each part of the step and the rank last named a
// straggler, if any, within the last two reports.
void StepLoop::watch_throughput(const StepStats& st, const StepExtras& x) {
  if (x.straggler_report && !x.slow.ranks.empty()) last_named_ = x.slow, last_named_step_ = st.step;
  const double comm = st.comm_ms(), compute = std::max(0.0, st.step_ms - comm - st.data_wait_ms);
  const auto drop = throughput_.add(st.step, {st.step_ms, compute, comm, st.data_wait_ms});
  if (!drop) return;
  const bool straggler = last_named_step_ >= 0 && st.step - last_named_step_ <= 2L * r_.runtime.straggler_every;
  char who[128] = "";
  if (straggler)
    std::snprintf(who, sizeof who, "; straggler: rank %d computes %.2fx what its stage should take", (int)last_named_.ranks[0],
                  last_named_.ratios[0]);
  char text[768];
  std::snprintf(text, sizeof text,
                "step %ld: throughput down to %.0f%% of this launch's early baseline over the last %d steps "
                "(runtime.throughput_drop = %g): median step %.0f ms, was %.0f ms; %s grew most (+%.0f ms: compute "
                "%.0f -> %.0f, communication %.0f -> %.0f, data wait %.1f -> %.1f ms)%s",
                st.step, 100 * drop->ratio, r_.runtime.throughput_window, r_.runtime.throughput_drop, drop->now.step,
                drop->base.step, drop->grew.c_str(), drop->grew_ms, drop->base.compute, drop->now.compute,
                drop->base.comm, drop->now.comm, drop->base.data_wait, drop->now.data_wait, who);
  std::fprintf(stderr, "warning: %s\n", text);
  std::fflush(stderr);
  events::ThroughputDrop e{.step = st.step,
                           .ratio = drop->ratio,
                           .grew = drop->grew,
                           .grew_ms = drop->grew_ms,
                           .step_ms = drop->now.step,
                           .baseline_step_ms = drop->base.step};
  if (straggler) e.straggler_rank = (long)last_named_.ranks[0];
  write_event(events::record(e, job_.launch, text));
}

}  // namespace trainer
