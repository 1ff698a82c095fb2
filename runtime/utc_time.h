#pragma once
// UTC time as text, for names and messages (lock files, the peak cache,
// moved-aside checkpoints, supervisor events, metrics records), and back.
#include <cmath>
#include <cstdio>
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

// "2026-11-30T12:40:01.123Z" for t seconds since the epoch.
inline std::string iso_time(double t) {
  const time_t secs = (time_t)t;
  char out[80];
  std::snprintf(out, sizeof out, "%s.%03dZ", utc_time("%Y-%m-%dT%H:%M:%S", secs).c_str(),
                (int)((t - (double)secs) * 1000));
  return out;
}

// The inverse of iso_time (the fraction optional); NaN when `s` is not one.
inline double parse_iso_time(const std::string& s) {
  struct tm tm {};
  int ms = 0, used = 0;
  if (std::sscanf(s.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
                  &tm.tm_min, &tm.tm_sec, &used) != 6)
    return NAN;
  double frac = 0;
  if (s[used] == '.' && std::sscanf(s.c_str() + used + 1, "%3d", &ms) == 1) frac = ms / 1000.0;
  tm.tm_year -= 1900, tm.tm_mon -= 1;
  return (double)timegm(&tm) + frac;
}

}  // namespace trainer
