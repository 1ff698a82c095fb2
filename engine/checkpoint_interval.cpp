#include "engine/checkpoint_interval.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace trainer {

namespace {
double median(const std::deque<double>& d) {
  std::vector<double> v(d.begin(), d.end());
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}
void keep_newest(std::deque<double>& d, double x, size_t n) {
  d.push_back(x);
  if (d.size() > n) d.pop_front();
}
}  // namespace

double young_interval_s(double save_s, double mtbf_s) { return std::sqrt(2 * save_s * mtbf_s); }

double daly_interval_s(double save_s, double mtbf_s) {
  if (save_s >= 2 * mtbf_s) return mtbf_s;
  const double r = save_s / (2 * mtbf_s);
  return young_interval_s(save_s, mtbf_s) * (1 + std::sqrt(r) / 3 + r / 9) - save_s;
}

ExpectedLoss expected_loss(double interval_s, double save_s, double mtbf_s) {
  return {save_s / (interval_s + save_s), (interval_s + save_s) / (2 * mtbf_s)};
}

AutoCheckpointInterval::AutoCheckpointInterval(double mtbf_hours, double first_save_s)
    : mtbf_s_(mtbf_hours * 3600), first_save_s_(first_save_s) {}

void AutoCheckpointInterval::saved(double blocking_ms) {
  keep_newest(saves_ms_, blocking_ms, 5);
  since_save_ = estimate();
}
void AutoCheckpointInterval::stepped(double step_ms) { keep_newest(steps_ms_, step_ms, 21); }

double AutoCheckpointInterval::save_s() const {
  return saves_ms_.empty() ? first_save_s_ : median(saves_ms_) / 1e3;
}

long AutoCheckpointInterval::steps() const { return since_save_ > 0 ? since_save_ : estimate(); }

long AutoCheckpointInterval::estimate() const {
  if (steps_ms_.empty()) return 1;
  const double step_s = median(steps_ms_) / 1e3;
  return std::max(1L, std::lround(daly_interval_s(save_s(), mtbf_s_) / std::max(step_s, 1e-6)));
}

}  // namespace trainer
