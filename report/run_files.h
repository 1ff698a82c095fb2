#pragma once
// What a run directory says about a run, read without locks (safe while it
// runs: a line being written is skipped): rank 0's metrics.jsonl, the
// launches of `trainer train` (launches.jsonl), the supervisor's events.jsonl
// and the heartbeat.
#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <vector>

namespace trainer {

struct RunFiles {
  std::vector<nlohmann::json> metrics, launches, events;  // in file order
  int unreadable = 0;          // lines skipped: being written, or damaged
  double heartbeat_mtime = 0;  // 0: no heartbeat
  long heartbeat_step = -1;

  // The newest record of each step: after a restart the steps since the last
  // checkpoint are logged again (with the same values, as resume is exact).
  std::map<long, const nlohmann::json*> latest_by_step() const;
  // Those of the steps after the first `warmup`, in step order.
  std::vector<const nlohmann::json*> steps_after(long warmup) const;
};

// How long a run has to go: the steps after the newest logged one, at the
// mean step time of the last 20 logged records.
struct TimeToGo {
  long steps_left = 0;  // 0: done, or nothing logged
  double step_ms = 0;
  double seconds() const { return steps_left * step_ms / 1e3; }
};
TimeToGo time_to_go(const RunFiles& f, long total_steps);

RunFiles read_run_files(const std::string& dir);
// One of them (or any JSON-lines file): its object records in file order;
// *unreadable (when given) counts the lines skipped.
std::vector<nlohmann::json> read_jsonl(const std::string& path, int* unreadable = nullptr);
// The object records of whole lines appended since byte *offset, which moves
// past the last whole line (a line being written waits for the next call):
// for following a file another process appends to.
std::vector<nlohmann::json> read_jsonl_since(const std::string& path, long* offset);

// The step in DIR/heartbeat (rank 0 writes "STEP TIME" after every step,
// engine/step_loop.cpp); -1 when there is none (or it is not a regular file).
long read_heartbeat_step(const std::string& dir);

// A record's number (NaN when absent or not a number) and its time
// (seconds since the epoch from "time"; NaN when absent).
double number(const nlohmann::json& r, const char* key);
// A record's field as text: a string as it is, another value as JSON, "" when absent.
std::string field_text(const nlohmann::json& r, const char* key);
double record_time(const nlohmann::json& r);

}  // namespace trainer
