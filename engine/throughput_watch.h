#pragma once
// The throughput watch: a job that degrades on day two should be noticed on
// day two. Each launch takes the median step of its first
// runtime.throughput_window steps (after 2 warm-up steps) as its baseline;
// when the median step of the last window steps gives fewer tokens/s than
// runtime.throughput_drop times the baseline's, the watch reports it once
// (again only after a window back above the line), with each part of the
// step then and at the baseline and the part that grew most. Medians, so a
// single slow step (a checkpoint, a page-in) is not a drop.
#include <deque>
#include <optional>
#include <string>
#include <vector>

namespace trainer {

// One step as the watch sees it (rank 0's times, ms).
struct StepParts {
  double step = 0, compute = 0, comm = 0, data_wait = 0;
};

struct ThroughputDrop {
  long step = 0;
  double ratio = 0;     // tokens/s now / at the baseline
  StepParts base, now;  // medians of each part
  std::string grew;     // "compute", "communication" or "data wait"
  double grew_ms = 0;
};

class ThroughputWatch {
 public:
  // fraction <= 0: off.
  ThroughputWatch(double fraction, int window, int warmup = 2);
  std::optional<ThroughputDrop> add(long step, const StepParts& p);

 private:
  static StepParts medians(const std::vector<StepParts>& v);
  double fraction_;
  int window_, warmup_, seen_ = 0;
  std::vector<StepParts> baseline_steps_;
  std::optional<StepParts> base_;
  std::deque<StepParts> recent_;
  bool reported_ = false;
};

}  // namespace trainer
