#pragma once
// supervisor.on_straggler = "replace": the supervisor follows the job's
// straggler reports (events.jsonl, engine/stragglers.cpp) as the job appends
// them, feeds them to the streaks (supervise/straggler_streak.h), and names
// the host to swap for a spare; after a swap it measures what the swap cost
// (the relaunch's first step) and remembers the ranks it moved, so that a
// slowness that follows them is reported, not swapped again.
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "parallel/grid_shape.h"
#include "recipe/recipe.h"
#include "supervise/allocation.h"
#include "supervise/event_log.h"
#include "supervise/straggler_streak.h"

namespace trainer {

// A straggler to swap: the allocation's name for its host, why, and the run
// of reports that named it.
struct StragglerPick {
  std::string host, why;
  StragglerRun run;
  double decided = 0;  // when the job was asked to stop for it
};

class StragglerPolicy {
 public:
  StragglerPolicy(const Recipe& r, EventLog& events) : r_(r), events_(events) {}

  // A launch on `hosts` begins: its reports are read from the end of what
  // events.jsonl holds now (watch: with an allocation and on_straggler =
  // "replace"; else only a pending swap's cost is measured).
  void begin_launch(bool watch);
  // Once a second while the job runs: the reports appended since, and a
  // pending swap's cost once the relaunch finished its first step (t0: the
  // launch's start). Returns the host to swap, when one is (can_swap: the
  // job runs and may be asked to stop).
  std::optional<StragglerPick> poll(int launch, const Allocation& alloc, const std::vector<std::string>& hosts,
                                    const GridShape& grid, bool can_swap);
  void measure_swap(int launch, double t0);
  // The launch ended (picked: it was stopped for a swap): the reports it
  // wrote as it ended still say a host to keep; a pending swap whose
  // relaunch ended before its first step is said to have cost nothing
  // measurable.
  void end_launch(int launch, const Allocation* alloc, const std::vector<std::string>& hosts, const GridShape& grid,
                  bool picked);
  // The swap of `pick` is made: spares_in took its place (none: no spare
  // was taken); same_layout: the ranks kept their numbers (not a shrink).
  void swapped(const StragglerPick& pick, int launch, long last_step, const std::vector<std::string>& spares_in,
               bool same_layout);
  // A shrink renumbers the ranks: the swaps' ranks mean nothing now.
  void forget_ranks() { swaps_.clear(); }

 private:
  std::string ranks_in_grid(const std::set<int>& ranks, const GridShape& grid) const;
  std::string follows_text(int launch, const StragglerRun& run, const std::string& host, const std::string& swapped,
                           const std::string& figures, const Allocation& alloc, const GridShape& grid) const;
  std::optional<StragglerPick> read_reports(int launch, const Allocation& alloc, const std::vector<std::string>& hosts,
                                            const GridShape& grid, bool can_swap);
  long first_step_since(long* offset) const;
  void swap_done(int launch, long first);

  const Recipe& r_;
  EventLog& events_;
  // This run's straggler swaps, each once a spare took the host's place:
  // the ranks they moved, for the streaks to tell a slowness that followed
  // those ranks. Cleared by a shrink; a new `supervise` forgets them, as it
  // does the excluded hosts.
  std::vector<StragglerSwap> swaps_;
  // A straggler swap, until the relaunch's first step measures its cost.
  struct PendingSwap {
    std::string host;
    std::vector<std::string> spares_in;
    double decided = 0;
    long last_step = -1, resume_step = 0;  // the stopped job's last step; the step the relaunch resumes from
  };
  std::optional<PendingSwap> pending_;
  // The launch's: its streaks (when watched), where its reading is in
  // events.jsonl and launches.jsonl, the step the relaunch after a swap
  // began at, and the hosts already said to be kept.
  std::optional<StragglerStreaks> streaks_;
  long events_offset_ = 0, launches_offset_ = 0, swap_first_ = -1;
  std::set<std::string> kept_;
};

}  // namespace trainer
