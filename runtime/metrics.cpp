#include "runtime/metrics.h"

#include "runtime/flight_recorder.h"

#include <cerrno>
#include <cmath>
#include <cstring>

#include "runtime/errors.h"

namespace trainer {

std::string json_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') { o += '\\'; o += c; }
    else if (c == '\n') o += "\\n";
    else if ((unsigned char)c < 0x20) { char b[8]; std::snprintf(b, sizeof b, "\\u%04x", c); o += b; }
    else o += c;
  }
  return o;
}

void JsonRecord::key(const std::string& k) {
  if (!body_.empty()) body_ += ", ";
  body_ += '"';  // appends, not operator+: GCC 12 warns falsely (-Wrestrict) on that
  body_ += json_escape(k);
  body_ += "\": ";
}

JsonRecord& JsonRecord::add(const std::string& k, double v) {
  key(k);
  if (!std::isfinite(v)) { body_ += "null"; return *this; }  // JSON has no NaN
  numbers_.emplace_back(k, v);
  char b[32];
  std::snprintf(b, sizeof b, "%.9g", v);
  body_ += b;
  return *this;
}
JsonRecord& JsonRecord::add(const std::string& k, const std::vector<double>& v) {
  key(k);
  body_ += '[';
  for (size_t i = 0; i < v.size(); i++) {
    char b[32];
    std::snprintf(b, sizeof b, "%s%.9g", i ? ", " : "", v[i]);
    body_ += std::isfinite(v[i]) ? b : (i ? ", null" : "null");
  }
  body_ += ']';
  return *this;
}

JsonRecord& JsonRecord::add(const std::string& k, long v) {
  key(k);
  numbers_.emplace_back(k, (double)v);
  body_ += std::to_string(v);
  return *this;
}
JsonRecord& JsonRecord::add(const std::string& k, const std::string& v) {
  key(k);
  body_ += '"';
  body_ += json_escape(v);
  body_ += '"';
  return *this;
}

MetricsLog::MetricsLog(const std::string& path, bool truncate) {
  if (path.empty()) return;
  f_ = std::fopen(path.c_str(), truncate ? "w" : "a");
  if (!f_) throw UserError(kExitInternal, path + ": cannot open metrics log: " + std::strerror(errno));
}
MetricsLog::~MetricsLog() {
  if (f_) std::fclose(f_);
}
void MetricsLog::write(const JsonRecord& r) {
  if (!f_) return;
  std::fprintf(f_, "%s\n", r.str().c_str());
  std::fflush(f_);
  if (!tb_) return;
  const auto& nums = r.numbers();
  const auto step = std::find_if(nums.begin(), nums.end(), [](const auto& kv) { return kv.first == "step"; });
  if (step == nums.end()) return;
  const double now = wall_seconds();
  for (const auto& [k, v] : nums)
    if (k != "step") tb_->scalar(k, (long)step->second, (float)v, now);
  tb_->flush();
}

void MetricsLog::add_tensorboard(const std::string& dir) { tb_ = std::make_unique<TensorBoardWriter>(dir); }

}  // namespace trainer
