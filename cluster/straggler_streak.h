#pragma once
// Which hosts the job's straggler reports (engine/stragglers.cpp: one every
// runtime.straggler_every steps, written to events.jsonl when it names a
// rank) have named in enough reports in a row, for the supervisor's
// supervisor.on_straggler = "replace". A host's run of windows continues
// while each report naming it comes exactly one window after the last; a
// report that does not name it (quiet reports are not written) ends it. A
// run that began in the launch's first window is a standing imbalance (a
// stage the cost model under-predicts, a host slow from the start: the
// health check's to find), not a host degrading, and is never returned; it
// stays standing across a gap of one quiet window (a report just under the
// bar), and only a longer quiet spell ends it.
#include <map>
#include <string>
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
};

// A host's run of consecutive windows: the report steps, and per window its
// worst named rank's ratio and compute ms.
struct StragglerRun {
  std::string host;
  std::vector<long> steps;
  std::vector<double> ratios, compute_ms;
  bool standing = false;  // began in the launch's first window
};

class StragglerStreaks {
 public:
  explicit StragglerStreaks(int windows) : windows_(windows) {}
  // Adds a report (in step order); returns each host whose run (not a
  // standing one) has `windows` reports or more with it, with the last
  // `windows` of them, in host order.
  std::vector<StragglerRun> add(const StragglerWindow& w);

 private:
  int windows_;
  std::map<std::string, StragglerRun> runs_;  // host -> its run so far
};

}  // namespace trainer
