#pragma once
// How often to checkpoint from failure rates (checkpoint.every = "auto").
// With save time d and mean time between failures M, Young's interval
// sqrt(2 d M) minimises the time lost to saves (d per interval) plus the
// work redone after a failure (half an interval, plus the save, on
// average); Daly's refinement corrects it where d is not small against M.
// The interval is re-estimated as saves are timed, in steps of the run's
// recent step time.
#include <deque>

namespace trainer {

double young_interval_s(double save_s, double mtbf_s);
// Daly (2006): sqrt(2dM) [1 + sqrt(d / 2M) / 3 + d / 18M] - d for d < 2M, else M.
double daly_interval_s(double save_s, double mtbf_s);
// The share of time a run expects to lose with that interval: saves
// d / (tau + d), plus redone work (tau + d) / 2M (first order in 1/M).
struct ExpectedLoss {
  double saves = 0, redone = 0;
};
ExpectedLoss expected_loss(double interval_s, double save_s, double mtbf_s);

class AutoCheckpointInterval {
 public:
  // first_save_s: the save time assumed before one has been timed.
  AutoCheckpointInterval(double mtbf_hours, double first_save_s);
  void saved(double blocking_ms);  // a save's measured blocking time
  void stepped(double step_ms);    // a training step's time
  // Steps from one save to the next (>= 1): Daly's interval over the median
  // of the recent step times, fixed at each save until the next (before the
  // first, from the step times so far).
  long steps() const;
  double save_s() const;  // the save time it works with now (median of those timed)

 private:
  long estimate() const;
  double mtbf_s_, first_save_s_;
  std::deque<double> saves_ms_, steps_ms_;  // the newest few
  long since_save_ = 0;                     // the interval fixed at the last save; 0 before one
};

}  // namespace trainer
