#include "runtime/metrics.h"

#include "runtime/flight_recorder.h"

#include <cerrno>
#include <cmath>
#include <cstring>

#include "runtime/errors.h"
#include "runtime/regular_file.h"
#include "runtime/utc_time.h"

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
JsonRecord& JsonRecord::add(const std::string& k, const std::vector<double>& v, const std::string& element) {
  key(k);
  body_ += '[';
  for (size_t i = 0; i < v.size(); i++) {
    char b[32];
    std::snprintf(b, sizeof b, "%s%.9g", i ? ", " : "", v[i]);
    body_ += std::isfinite(v[i]) ? b : (i ? ", null" : "null");
    if (!element.empty() && std::isfinite(v[i])) numbers_.emplace_back(k + "/" + element + std::to_string(i), v[i]);
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
JsonRecord& JsonRecord::add(const std::string& k, const std::vector<std::string>& v) {
  key(k);
  body_ += '[';
  for (size_t i = 0; i < v.size(); i++) body_ += (i ? ", \"" : "\"") + json_escape(v[i]) + '"';
  body_ += ']';
  return *this;
}

namespace {
// A run killed mid-write leaves a last line without its newline; the next
// record appended to it would make one unreadable line of two. The next
// record starts a line of its own: the fragment stays (readers skip it, and
// nothing another process may still be writing is cut away).
void end_partial_last_line(const std::string& path) {
  if (!not_regular_file(path).empty()) return;  // a device or FIFO has no last line to end
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return;
  char c = '\n';
  const bool partial = std::fseek(f, -1, SEEK_END) == 0 && std::fread(&c, 1, 1, f) == 1 && c != '\n';
  std::fclose(f);
  if (!partial) return;
  if (std::FILE* a = std::fopen(path.c_str(), "ab")) {
    std::fputc('\n', a);
    std::fclose(a);
  }
  std::fprintf(stderr, "note: %s: its last line was cut off (a run stopped mid-write); the next record starts a new line\n",
               path.c_str());
}
}  // namespace

MetricsLog::MetricsLog(const std::string& path, bool truncate) {
  if (path.empty()) return;
  if (is_fifo(path)) throw UserError(kExitUsage, path + " is a FIFO, not a file: a run's log cannot go there");
  if (!truncate) end_partial_last_line(path);
  path_ = path;
  f_ = std::fopen(path.c_str(), truncate ? "w" : "a");
  if (!f_) {
    const int err = errno;  // a full disk is exit 8 as for every run file; else the directory is wrong (exit 2)
    throw UserError(err == ENOSPC || err == EDQUOT ? kExitNoSpace : kExitUsage,
                    "cannot open " + path + " for writing: " + std::strerror(err) + " (check [run] dir and its disk)");
  }
}
MetricsLog::~MetricsLog() {
  if (f_) std::fclose(f_);
}
bool MetricsLog::write(const JsonRecord& r) {
  if (!f_) return true;
  errors_.clear();
  errno = 0;
  const bool ok = std::fprintf(f_, "%s\n", r.str().c_str()) >= 0 && std::fflush(f_) == 0;
  if (!ok) {
    errors_.push_back("cannot write " + path_ + ": " + std::strerror(errno ? errno : EIO));
    std::clearerr(f_);
  }
  if (!tb_) return ok;
  const auto& nums = r.numbers();
  const auto step = std::find_if(nums.begin(), nums.end(), [](const auto& kv) { return kv.first == "step"; });
  if (step == nums.end()) return ok;
  const double now = wall_seconds();
  for (const auto& [k, v] : nums)
    if (k != "step") tb_->scalar(k, (long)step->second, (float)v, now);
  if (tb_->flush()) return ok;
  errors_.push_back(tb_->error());  // each file is reported on its own, once
  return false;
}

void MetricsLog::add_tensorboard(const std::string& dir) { tb_ = std::make_unique<TensorBoardWriter>(dir); }

}  // namespace trainer
