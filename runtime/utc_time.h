#pragma once
// UTC time as text, for names and messages (lock files, the peak cache,
// moved-aside checkpoints, supervisor events).
#include <ctime>
#include <string>

namespace trainer {

// strftime of `t` (seconds since the epoch; default now) in UTC.
inline std::string utc_time(const char* format, time_t t = time(nullptr)) {
  struct tm tm {};
  gmtime_r(&t, &tm);
  char b[64];
  std::strftime(b, sizeof b, format, &tm);
  return b;
}

}  // namespace trainer
