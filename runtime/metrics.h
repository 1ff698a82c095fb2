#pragma once
// Run metrics: one JSON object per line in <run.dir>/metrics.jsonl, and a
// console line for people. Written by one rank (rank 0).
#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace trainer {

// A flat JSON object built field by field, numbers printed round-trippable.
class JsonRecord {
 public:
  JsonRecord& add(const std::string& key, double v);
  JsonRecord& add(const std::string& key, long v);
  JsonRecord& add(const std::string& key, int v) { return add(key, (long)v); }
  JsonRecord& add(const std::string& key, const std::string& v);
  JsonRecord& add(const std::string& key, const std::vector<double>& v);
  // Appends every field of o.
  JsonRecord& add(const JsonRecord& o) {
    if (!o.body_.empty()) body_ += (body_.empty() ? "" : ", ") + o.body_;
    return *this;
  }
  std::string str() const { return "{" + body_ + "}"; }

 private:
  void key(const std::string& k);
  std::string body_;
};

std::string json_escape(const std::string& s);

// The median of a non-empty sample (the mean of the middle two for an even
// count): step times, straggler compute times, recent losses.
template <class T>
double median_of(std::vector<T> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? (double)v[m] : 0.5 * ((double)v[m - 1] + (double)v[m]);
}

class MetricsLog {
 public:
  MetricsLog() = default;
  // truncate: start a new file; else append. Empty path: disabled.
  MetricsLog(const std::string& path, bool truncate);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;
  void write(const JsonRecord& r);

 private:
  FILE* f_ = nullptr;
};

}  // namespace trainer
