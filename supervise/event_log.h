#pragma once
// The supervisor's events: appended to <run.dir>/events.jsonl (the job's
// ranks append theirs there too) and said on the console.
#include <string>

#include "runtime/metrics.h"

namespace trainer {

class EventLog {
 public:
  explicit EventLog(const std::string& path);
  // One event of `launch`: its kind, the sentence the console gets, and
  // its fields.
  void write(const std::string& event, int launch, const std::string& text, JsonRecord extra = {});

 private:
  MetricsLog log_;
  bool reported_ = false;  // the log could not be written (said once)
};

}  // namespace trainer
