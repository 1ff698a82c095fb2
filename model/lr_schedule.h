#pragma once
// Learning-rate schedule: linear warmup over warmup_steps, then decay to
// min_lr at the last step (cosine or linear), or constant.
#include <string>

namespace trainer {

enum class LrSchedule { Cosine, Linear, Constant };

struct LrConfig {
  float lr = 3e-4f, min_lr = 3e-5f;
  int warmup_steps = 0;
  LrSchedule schedule = LrSchedule::Cosine;
};

// Learning rate of optimizer step `step` (0-based) in a run of total_steps.
float lr_at(const LrConfig& c, long step, long total_steps);
const char* schedule_name(LrSchedule s);

}  // namespace trainer
