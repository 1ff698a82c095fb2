#include "engine/throughput_watch.h"

#include <algorithm>

namespace trainer {

ThroughputWatch::ThroughputWatch(double fraction, int window, int warmup)
    : fraction_(fraction), window_(std::max(window, 1)), warmup_(warmup) {}

StepParts ThroughputWatch::medians(const std::vector<StepParts>& v) {
  auto median = [&](double StepParts::*f) {  // of an even count: the mean of the middle two
    std::vector<double> x;
    for (const StepParts& p : v) x.push_back(p.*f);
    std::sort(x.begin(), x.end());
    const size_t n = x.size();
    return n % 2 ? x[n / 2] : (x[n / 2 - 1] + x[n / 2]) / 2;
  };
  return {median(&StepParts::step), median(&StepParts::compute), median(&StepParts::comm),
          median(&StepParts::data_wait)};
}

std::optional<ThroughputDrop> ThroughputWatch::add(long step, const StepParts& p) {
  if (fraction_ <= 0 || ++seen_ <= warmup_) return std::nullopt;
  if (!base_) {
    baseline_steps_.push_back(p);
    if ((int)baseline_steps_.size() == window_) base_ = medians(baseline_steps_);
    return std::nullopt;
  }
  recent_.push_back(p);
  if ((int)recent_.size() > window_) recent_.pop_front();
  if ((int)recent_.size() < window_) return std::nullopt;
  const StepParts now = medians({recent_.begin(), recent_.end()});
  const double ratio = now.step > 0 ? base_->step / now.step : 1;  // tokens per step are fixed
  if (ratio >= fraction_) {
    reported_ = false;  // back above the line: a later drop is reported again
    return std::nullopt;
  }
  if (reported_) return std::nullopt;
  reported_ = true;
  ThroughputDrop d{step, ratio, *base_, now, "compute", now.compute - base_->compute};
  if (now.comm - base_->comm > d.grew_ms) d.grew = "communication", d.grew_ms = now.comm - base_->comm;
  if (now.data_wait - base_->data_wait > d.grew_ms) d.grew = "data wait", d.grew_ms = now.data_wait - base_->data_wait;
  return d;
}

}  // namespace trainer
