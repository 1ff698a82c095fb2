#include "runtime/units.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace trainer {

namespace {

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

}  // namespace

std::string format_number(double v) {
  if (!std::isfinite(v)) return "-";
  if (v == 0) return "0";
  const double a = std::fabs(v);
  if (a >= 1e-3 && a < 1e7) {
    // 4 significant digits, trailing zeros dropped.
    const int decimals = std::max(0, 3 - (int)std::floor(std::log10(a)));
    std::string s = fmt(("%." + std::to_string(decimals) + "f").c_str(), v);
    if (s.find('.') != std::string::npos) {
      while (s.back() == '0') s.pop_back();
      if (s.back() == '.') s.pop_back();
    }
    return s;
  }
  return fmt("%.4g", v);
}

std::string format_count(double v) {
  const double a = std::fabs(v);
  if (a >= 1e9) return format_number(v / 1e9) + " G";
  if (a >= 1e6) return format_number(v / 1e6) + " M";
  if (a >= 1e3) return format_number(v / 1e3) + " k";
  return format_number(v);
}

std::string format_gb(double bytes) { return fmt("%.2f GB", bytes / 1e9); }

std::string format_duration(double s) {
  if (!std::isfinite(s)) return "-";
  if (s < 120) return format_number(s) + " s";
  if (s < 7200) return format_number(s / 60) + " min";
  return format_number(s / 3600) + " h";
}

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string out;
  for (const std::string& x : v) out += (out.empty() ? "" : sep) + x;
  return out;
}

}  // namespace trainer
