#pragma once
// training.on_nan / on_spike: what follows a step whose update was not
// applied (a NaN/Inf loss or gradient, or a loss above spike_factor x the
// median of the last spike_window applied losses), and the spike limit
// itself. It owns the runs of bad steps it counts; it decides and
// engine/failure_policy.cpp carries the decision out (the collectives, the
// rollback, setting a checkpoint aside, the messages). Every rank holds the
// same losses and facts, so every rank decides alike without talking.
#include <deque>
#include <string>

#include "recipe/recipe.h"

namespace trainer {

class BadStepPolicy {
 public:
  // A bad step's policy gives up after this many in a row: rollbacks that
  // meet bad steps again, or skipped steps (on_nan = "skip": finite weights
  // whose every forward overflows, which no skipping mends).
  static constexpr int kInARow = 3;

  explicit BadStepPolicy(const TrainingSection& t) : t_(t) {}

  // The median loss of the recent applied steps: 0 until spike_window of
  // them, or with spike detection off (spike_factor 0).
  double spike_median() const;
  // A step whose update was applied: its loss joins the window, and the
  // runs of skipped steps and of bad steps right after a rollback end.
  void applied(double loss);
  // A checkpoint was saved: the rollbacks in a row start again.
  void saved() { rollbacks_in_a_row_ = 0; }

  TrainingSection::BadStep policy(bool nonfinite) const { return nonfinite ? t_.on_nan : t_.on_spike; }
  const char* key(bool nonfinite) const { return nonfinite ? "training.on_nan" : "training.on_spike"; }

  // The "skip" policy. weights_finite: on every rank.
  enum class Skip {
    Skip,          // skip the update; the step and its batch count as done
    StopInARow,    // kInARow nonfinite steps in a row skipped: the weights give no finite loss
    StopWeights,   // the weights themselves are not finite: skipping cannot recover
  };
  Skip on_skip(bool nonfinite, bool weights_finite);
  int skipped_in_a_row() const { return skipped_in_a_row_; }

  // The "rollback" policy, first: whether the checkpoint the last rollback
  // went to is unusable (kInARow rollbacks to it met a nonfinite step at
  // once, each on a fresh batch: its weights are what is bad): returns it,
  // to be set aside, or "". `step`: the bad step's; `step_of`: the step of
  // a checkpoint directory.
  template <class StepOf>
  std::string unusable_target(bool nonfinite, long step, StepOf step_of) {
    if (!nonfinite || rolled_back_to_.empty() || step != step_of(rolled_back_to_) + 1 || ++bad_at_once_ < kInARow)
      return "";
    const std::string was = rolled_back_to_;
    rolled_back_to_.clear(), bad_at_once_ = 0, rollbacks_in_a_row_ = 0;
    return was;
  }
  // Then, with `to` the newest valid checkpoint ("" when none; "stop"
  // policy: not asked), what to do.
  enum class Rollback {
    Rollback,        // roll back to `to` and retry the step
    StopAsked,       // the policy is "stop"
    StopNoCheckpoint,
    StopInARow,      // still bad after kInARow rollbacks
  };
  Rollback on_rollback(bool nonfinite, const std::string& to);

 private:
  const TrainingSection& t_;
  std::deque<double> recent_losses_;  // applied steps, for the spike limit
  int rollbacks_in_a_row_ = 0, skipped_in_a_row_ = 0;
  // The checkpoint the last rollback went to, and how many rollbacks to it
  // in a row met a bad step at once.
  std::string rolled_back_to_;
  int bad_at_once_ = 0;
};

}  // namespace trainer
