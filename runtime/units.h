#pragma once
// Units and how people read numbers, in one place for every command, the
// step log and the report: bytes in MiB and GiB (the "MB" of memory tables,
// metrics and checkpoint sizes), and numbers, counts, sizes, durations and
// lists of names as text.
#include <string>
#include <vector>

namespace trainer {

constexpr double kMiB = 1048576.0, kGiB = 1073741824.0;
inline double mib(double bytes) { return bytes / kMiB; }
inline double gib(double bytes) { return bytes / kGiB; }

// 4 significant digits, trailing zeros dropped, no exponent for ordinary
// magnitudes ("0.01234", "1234", "1.5e+09"); "-" when not finite.
std::string format_number(double v);
// A count with a k, M or G suffix: "350 k", "2.731 M" (parameters, tokens).
std::string format_count(double v);
// "2.40 GB": decimal gigabytes, as the memory pre-flight's messages give them.
std::string format_gb(double bytes);
// "45.5 s" below 2 minutes, "12.5 min" below 2 hours, else "3.1 h".
std::string format_duration(double seconds);
// "a, b, c": names (hosts, ranks) in a message.
std::string join(const std::vector<std::string>& v, const char* sep = ", ");

}  // namespace trainer
