#include "supervise/event_log.h"

#include <cstdio>

namespace trainer {

EventLog::EventLog(const std::string& path) : log_(path, false) {}

void EventLog::write(const std::string& event, int launch, const std::string& text, JsonRecord extra) {
  if (!log_.write(event_record(event, launch, text).add(extra)) && !reported_) {
    reported_ = true;  // once: the console still gets every event
    std::fprintf(stderr, "supervise: warning: cannot write %s; events go to the console only\n", log_.error().c_str());
  }
  std::printf("supervise: %s\n", text.c_str());
  std::fflush(stdout);
}

}  // namespace trainer
