#pragma once
// The supervisor's events: appended to <run.dir>/events.jsonl (the job's
// ranks append theirs there too; runtime/run_events.h declares them all)
// and said on the console.
#include <string>

#include "runtime/metrics.h"
#include "runtime/run_events.h"

namespace trainer {

class EventLog {
 public:
  explicit EventLog(const std::string& path);
  // One event of `launch`: its fields, and the sentence the console gets.
  template <class E>
  void write(int launch, const std::string& text, E fields = {}) {
    append(events::record(std::move(fields), launch, text), text);
  }

 private:
  void append(const JsonRecord& record, const std::string& text);
  MetricsLog log_;
  bool reported_ = false;  // the log could not be written (said once)
};

}  // namespace trainer
