#include "model/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace trainer {

const char* schedule_name(LrSchedule s) {
  switch (s) {
    case LrSchedule::Cosine: return "cosine";
    case LrSchedule::Linear: return "linear";
    default: return "constant";
  }
}

float lr_at(const LrConfig& c, long step, long total_steps) {
  if (step < c.warmup_steps) return c.lr * (float)(step + 1) / (float)c.warmup_steps;
  if (c.schedule == LrSchedule::Constant) return c.lr;
  const long span = std::max(1L, total_steps - 1 - c.warmup_steps);
  const double p = std::clamp((double)(step - c.warmup_steps) / span, 0.0, 1.0);
  const double k = c.schedule == LrSchedule::Cosine ? 0.5 * (1.0 + std::cos(M_PI * p)) : 1.0 - p;
  return (float)(c.min_lr + k * (c.lr - c.min_lr));
}

}  // namespace trainer
