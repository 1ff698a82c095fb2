#include "supervise/event_log.h"

#include <cstdio>

namespace trainer {

EventLog::EventLog(const std::string& path) : log_(path, false) {}

void EventLog::append(const JsonRecord& record, const std::string& text) {
  if (!log_.write(record) && !reported_) {
    reported_ = true;  // once: the console still gets every event
    std::fprintf(stderr, "supervise: warning: cannot write %s; events go to the console only\n", log_.error().c_str());
  }
  std::printf("supervise: %s\n", text.c_str());
  std::fflush(stdout);
}

}  // namespace trainer
