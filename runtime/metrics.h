#pragma once
// Run metrics: one JSON object per line in <run.dir>/metrics.jsonl, and a
// console line for people. Written by one rank (rank 0).
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/tensorboard.h"

namespace trainer {

// A flat JSON object built field by field, numbers printed round-trippable.
class JsonRecord {
 public:
  JsonRecord& add(const std::string& key, double v);
  JsonRecord& add(const std::string& key, long v);
  JsonRecord& add(const std::string& key, int v) { return add(key, (long)v); }
  JsonRecord& add(const std::string& key, const std::string& v);
  JsonRecord& add(const std::string& key, const std::vector<std::string>& v);  // an array of strings
  // A list: a JSON array. With `element` (e.g. "stage": one value per
  // pipeline stage) TensorBoard also gets each value as key/element0,
  // key/element1, ...; lists of varying meaning (the ranks named) stay JSON only.
  JsonRecord& add(const std::string& key, const std::vector<double>& v, const std::string& element = "");
  // Appends every field of o.
  JsonRecord& add(const JsonRecord& o) {
    if (!o.body_.empty()) body_ += (body_.empty() ? "" : ", ") + o.body_;
    numbers_.insert(numbers_.end(), o.numbers_.begin(), o.numbers_.end());
    return *this;
  }
  std::string str() const { return "{" + body_ + "}"; }
  // The number fields (finite ones) and list elements, in order: what
  // TensorBoard gets.
  const std::vector<std::pair<std::string, double>>& numbers() const { return numbers_; }

 private:
  void key(const std::string& k);
  std::string body_;
  std::vector<std::pair<std::string, double>> numbers_;
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
  // False when the line (or its TensorBoard scalars) could not be written;
  // errors() says, one entry per file that failed, the file and the
  // system's reason ("cannot write runs/x/metrics.jsonl: No space left on
  // device"); error() is the first.
  bool write(const JsonRecord& r);
  const std::vector<std::string>& errors() const { return errors_; }
  const std::string& error() const { return errors_.front(); }
  // Also write every number field of each record (but "step") as a
  // TensorBoard scalar at the record's step.
  void add_tensorboard(const std::string& dir);

 private:
  FILE* f_ = nullptr;
  std::string path_;
  std::vector<std::string> errors_;  // of the last write
  std::unique_ptr<TensorBoardWriter> tb_;
};

}  // namespace trainer
