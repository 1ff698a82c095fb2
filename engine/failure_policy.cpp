// A step whose loss or gradient norm is not finite, or whose loss spiked: its
// update was not applied (RankStep::step); training.on_nan / on_spike say
// what follows (engine/bad_step_policy.h decides; this carries it out).
// Every rank holds the same loss, norm and limit, so all decide alike
// without talking.
#include <cmath>
#include <cstdio>

#include "ckpt/checkpoint.h"
#include "engine/step_loop.h"
#include "runtime/errors.h"
#include "parallel/mpi_world.h"

namespace trainer {

std::string StepLoop::describe_bad_step(const StepStats& st, double median) const {
  char what[256];
  if (st.nonfinite)
    std::snprintf(what, sizeof what, "%s is %g (NaN/Inf)", !std::isfinite(st.loss) ? "loss" : "gradient norm",
                  !std::isfinite(st.loss) ? st.loss : st.grad_norm);
  else
    std::snprintf(what, sizeof what,
                  "loss %.4f is a spike (above %g x %.4f, the median of the last %d steps; training.spike_factor)",
                  st.loss, r_.training.spike_factor, median, r_.training.spike_window);
  return what;
}

StepLoop::Next StepLoop::on_bad_step(const StepStats& st, double median) {
  using BadStep = TrainingSection::BadStep;
  const BadStep policy = bad_steps_.policy(st.nonfinite);
  const char* key = bad_steps_.key(st.nonfinite);
  const std::string what = describe_bad_step(st, median);
  if (policy == BadStep::Skip) {
    double bad_weights = rank_step_.weights_finite() ? 0 : 1;
    world_.allreduce_max(&bad_weights, 1);
    const BadStepPolicy::Skip verdict = bad_steps_.on_skip(st.nonfinite, bad_weights == 0);
    if (verdict == BadStepPolicy::Skip::Skip) {
      if (lead_) std::fprintf(stderr, "warning: step %ld: %s; update skipped (%s = \"skip\")\n", st.step, what.c_str(), key);
      return Next::Continue;  // the step and its batch count as done
    }
    if (verdict == BadStepPolicy::Skip::StopInARow) {
      // A checkpoint of the step before the skipped ones holds these very
      // weights: it is set aside, not left to be resumed from.
      const int skipped = bad_steps_.skipped_in_a_row();
      finish_async();
      const std::string newest = broadcast_string(lead_ ? newest_valid_checkpoint(r_.checkpoint.dir) : "");
      const std::string aside =
          !newest.empty() && checkpoint_step(newest) == st.step - skipped
              ? set_aside(newest, std::to_string(skipped) + " batches in a row after it were not finite")
              : "";
      if (lead_)
        std::fprintf(stderr,
                     "error: step %ld: %s; %d steps in a row have had their update skipped: the weights are finite "
                     "but no batch gets a finite loss from them (an update too large, as from a learning rate far "
                     "too high, can leave them so), and skipping batches cannot recover. %sStopping; resume from "
                     "the newest checkpoint in %s (none is written at a step whose loss is not finite) with a lower "
                     "optimizer.lr, or use %s = \"rollback\".\n",
                     st.step, what.c_str(), skipped, aside.c_str(), r_.checkpoint.dir.c_str(), key);
      return Next::Stop;
    }
    if (lead_)
      std::fprintf(stderr,
                   "error: step %ld: %s, and the weights themselves hold NaN or inf (an earlier update made them "
                   "so): skipping batches cannot recover. Stopping; resume from the newest checkpoint in %s (a "
                   "checkpoint of non-finite weights is never committed) with a lower optimizer.lr, or use %s = "
                   "\"rollback\".\n", st.step, what.c_str(), r_.checkpoint.dir.c_str(), key);
    return Next::Stop;
  }
  finish_async();
  const CheckpointSection& ck = r_.checkpoint;
  // A checkpoint whose weights give no finite loss (an overflowing update
  // whose own step's loss was still finite, so it was saved) is set aside,
  // so that neither the next rollback nor a resume lands on it. (A loss
  // spike is not this: its weights are finite and give a loss.)
  std::string aside;
  if (policy == BadStep::Rollback)
    if (const std::string bad = bad_steps_.unusable_target(st.nonfinite, st.step, checkpoint_step); !bad.empty())
      aside = set_aside(bad, std::to_string(BadStepPolicy::kInARow) +
                                 " rollbacks in a row to it met a bad step at once");
  const std::string to =
      policy == BadStep::Rollback ? broadcast_string(lead_ ? newest_valid_checkpoint(ck.dir) : "") : "";
  const BadStepPolicy::Rollback verdict = bad_steps_.on_rollback(st.nonfinite, to);
  if (verdict != BadStepPolicy::Rollback::Rollback) {
    const std::string why = verdict == BadStepPolicy::Rollback::StopAsked
                                ? std::string("Stopping (") + key + " = \"stop\")."
                            : verdict == BadStepPolicy::Rollback::StopNoCheckpoint
                                ? aside + "No checkpoint to roll back to: stopping."
                                : "Still bad after " + std::to_string(BadStepPolicy::kInARow) + " rollbacks: stopping.";
    if (lead_)
      std::fprintf(stderr,
                   "error: step %ld: %s; the update was not applied. %s The newest checkpoint in %s is what to "
                   "resume from; %s = \"skip\" or \"rollback\" continue past bad batches.\n",
                   st.step, what.c_str(), why.c_str(), ck.dir.c_str(), key);
    return Next::Stop;
  }
  phase("rollback", st.step);
  const long skipped = rank_step_.rollback(to);
  last_saved_ = rank_step_.steps_done();
  if (lead_)
    std::fprintf(stderr,
                 "warning: step %ld: %s; %srolled back to %s (step %ld) and skipped the %ld batch(es) since it "
                 "(%s = \"rollback\")\n",
                 st.step, what.c_str(), aside.c_str(), to.c_str(), rank_step_.steps_done(), skipped, key);
  return Next::Retry;
}

// Collective: rank 0 moves `step_dir` aside (ckpt/checkpoint.h
// set_aside_checkpoint: kept, never resumed from); the sentence that says
// so and why.
std::string StepLoop::set_aside(const std::string& step_dir, const std::string& evidence) {
  std::string moved, err;
  if (lead_) try {
      moved = set_aside_checkpoint(step_dir);
    } catch (const CheckpointError& e) {
      err = e.what();
    }
  moved = broadcast_string(moved);
  if (moved.empty())
    throw CheckpointError(lead_ ? err : "a checkpoint whose weights give no finite loss could not be set aside");
  newest_ = broadcast_string(lead_ ? newest_valid_checkpoint(r_.checkpoint.dir) : "");
  if (lead_) note_newest_checkpoint(newest_);  // what a stop signal saves from now on
  return step_dir + " holds weights that give no finite loss on any batch (" + evidence +
         ": the update it saved overflowed); set aside as " + moved + " (kept, never resumed from). ";
}

}  // namespace trainer
