#include "runtime/run_events.h"

#include "runtime/flight_recorder.h"
#include "runtime/utc_time.h"

namespace trainer::events {

JsonRecord head_record(const char* kind, long launch, const std::string& message) {
  Head h{iso_time(wall_seconds()), kind, launch, message};
  JsonRecord r;
  h.fields([&](const char* name, const auto& v) { r.add(name, v); });
  return r;
}

}  // namespace trainer::events
