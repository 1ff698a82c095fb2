// Stragglers (engine/straggler_watch.h judges them and keeps the window):
// every runtime.straggler_every steps the ranks' reports, and the
// throughput watch's (engine/throughput_watch.h). Rank 0 writes the reports that name
// a rank, with its host, and the throughput drops to events.jsonl.
#include <algorithm>
#include <cstdio>

#include "engine/step_loop.h"
#include "runtime/run_events.h"
#include "model/flops.h"
#include "runtime/errors.h"
#include "runtime/host_name.h"

namespace trainer {

void StepLoop::track_stragglers(const StepStats& st, StepExtras& x) {
  const std::optional<StragglerWatch::Window> w = stragglers_.add(st.step_ms - st.comm_ms(), st.moe_expert_rows);
  if (!w) return;
  x.slow = find_stragglers(world_, r_.parallel.grid, r_.runtime.straggler_factor, w->compute_ms,
                           stage_work(r_.model, r_.parallel.grid.pp), w->expert_rows, expert_flops_share(r_.model));
  x.straggler_report = true;
  stragglers_.reported(x.slow, st.step);
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
                                               .window = stragglers_.windows(),
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
void StepLoop::watch_throughput(const StepStats& st) {
  const double comm = st.comm_ms(), compute = std::max(0.0, st.step_ms - comm - st.data_wait_ms);
  const auto drop = throughput_.add(st.step, {st.step_ms, compute, comm, st.data_wait_ms});
  if (!drop) return;
  const StragglerReport* straggler = stragglers_.recent(st.step);
  char who[128] = "";
  if (straggler)
    std::snprintf(who, sizeof who, "; straggler: rank %d computes %.2fx what its stage should take",
                  (int)straggler->ranks[0], straggler->ratios[0]);
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
  if (straggler) e.straggler_rank = (long)straggler->ranks[0];
  write_event(events::record(e, job_.launch, text));
}

}  // namespace trainer
