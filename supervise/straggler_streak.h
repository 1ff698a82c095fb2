#pragma once
// Which hosts the job's straggler reports (engine/stragglers.cpp: one every
// runtime.straggler_every steps, written to events.jsonl when it names a
// rank) have named in enough reports in a row, for the supervisor's
// supervisor.on_straggler = "replace". A host's run of windows continues
// while each report naming it comes exactly one window after the last; a
// report that does not name it (quiet reports are not written) ends it. A
// run that began in the launch's first window is a standing imbalance (a
// stage the cost model under-predicts, a host slow from the start: the
// health check's to find), not a host degrading, and is not returned (but
// see below); it stays standing across a gap of one quiet window (a report
// just under the bar), and only a longer quiet spell ends it.
//
// A run on ranks that an earlier swap moved off another host (each report
// names world ranks) is the rank's slowness, not the host's: its share of
// the work followed it to the new host, and a spare would not cure it. Such
// a run is returned (standing or not) marked `follows`, to be reported and
// never swapped.
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace trainer {

// One straggler report: its step, the steps in its window, whether it is
// the launch's first window, and each named rank's host with its figures
// (a host may appear once per rank).
struct StragglerWindow {
  long step = 0;
  long window_steps = 0;
  bool first = false;
  std::vector<std::string> hosts;
  std::vector<double> ratios, compute_ms;  // per named rank: x what its stage should take, ms per step
  std::vector<int> ranks;  // per named rank: its world rank (empty: a report without ranks)
};

// A host swapped out for a straggler run: the name its ranks reported, the
// supervisor's launch it was swapped at, the run's last report step, and
// the world ranks the run named on it (in that launch's layout).
struct StragglerSwap {
  std::string host;
  int launch = 0;
  long step = 0;
  std::set<int> ranks;
};

// A host's run of consecutive windows: the report steps, and per window its
// worst named rank's ratio and compute ms.
struct StragglerRun {
  std::string host;
  std::vector<long> steps;
  std::vector<double> ratios, compute_ms;
  bool standing = false;  // began in the launch's first window
  std::set<int> ranks;    // every world rank named on the host in the run (-1: a report gave none)
  // Set when the run names only ranks that an earlier swap moved off
  // another host (that swap): the slowness followed the ranks (their share
  // of the work: a stage the cost model under-predicts, the head's stage),
  // not a host.
  std::optional<StragglerSwap> follows;
};

class StragglerStreaks {
 public:
  // swaps: this supervisor's earlier straggler swaps, in the same rank layout.
  explicit StragglerStreaks(int windows, std::vector<StragglerSwap> swaps = {})
      : windows_(windows), swaps_(std::move(swaps)) {}
  // Adds a report (in step order); returns each host whose run has
  // `windows` reports or more with it, with the last `windows` of them, in
  // host order: a run that is not standing, or one that follows an earlier
  // swap (follows set; standing or not).
  std::vector<StragglerRun> add(const StragglerWindow& w);
  // What swapping `run`'s host at `launch` moves: its ranks.
  static StragglerSwap swap_of(const StragglerRun& run, int launch);

 private:
  // The newest earlier swap that moved every rank `run` names, off another
  // host; none for a run with a report that gave no ranks.
  std::optional<StragglerSwap> followed(const StragglerRun& run) const;

  int windows_;
  std::vector<StragglerSwap> swaps_;
  std::map<std::string, StragglerRun> runs_;  // host -> its run so far
};

}  // namespace trainer
