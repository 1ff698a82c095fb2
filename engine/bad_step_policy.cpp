#include "engine/bad_step_policy.h"

#include <vector>

#include "runtime/metrics.h"

namespace trainer {

double BadStepPolicy::spike_median() const {
  if (t_.spike_factor <= 0 || (int)recent_losses_.size() < t_.spike_window) return 0;
  return median_of(std::vector<double>(recent_losses_.begin(), recent_losses_.end()));
}

void BadStepPolicy::applied(double loss) {
  recent_losses_.push_back(loss);
  if ((int)recent_losses_.size() > t_.spike_window) recent_losses_.pop_front();
  skipped_in_a_row_ = 0, bad_at_once_ = 0;
}

BadStepPolicy::Skip BadStepPolicy::on_skip(bool nonfinite, bool weights_finite) {
  // Skipping helps against a bad batch, not against weights an earlier
  // update already made NaN or inf (an overflowing learning rate): then
  // every later step is bad too, and the run would end with NaN weights.
  if (!weights_finite) return Skip::StopWeights;
  if (nonfinite && ++skipped_in_a_row_ > kInARow) return Skip::StopInARow;
  return Skip::Skip;
}

BadStepPolicy::Rollback BadStepPolicy::on_rollback(bool nonfinite, const std::string& to) {
  if (policy(nonfinite) == TrainingSection::BadStep::Stop) return Rollback::StopAsked;
  if (to.empty()) return Rollback::StopNoCheckpoint;
  if (++rollbacks_in_a_row_ > kInARow) return Rollback::StopInARow;
  if (to != rolled_back_to_) bad_at_once_ = 0;
  rolled_back_to_ = to;
  return Rollback::Rollback;
}

}  // namespace trainer
