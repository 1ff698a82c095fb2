#pragma once
// Milliseconds on the steady clock, the one every timing of the trainer's
// own work reads (the wall clock jumps with NTP and is for timestamps only).
#include <chrono>

namespace trainer {

using Clock = std::chrono::steady_clock;

inline double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}
inline double ms_since(Clock::time_point t0) { return ms_between(t0, Clock::now()); }

}  // namespace trainer
