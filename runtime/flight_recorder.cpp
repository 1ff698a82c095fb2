#include "runtime/flight_recorder.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>

#include "runtime/host_name.h"
#include "runtime/metrics.h"

namespace trainer {

double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

FlightRecorder::FlightRecorder(int world_rank, size_t capacity)
    : rank_(world_rank), host_(host_name()), ring_(capacity), last_progress_(wall_seconds()) {}

int FlightRecorder::add_group(const std::string& name, const std::vector<int>& members) {
  std::lock_guard<std::mutex> lock(mu_);
  groups_.push_back({name, members, 0, 0});
  return (int)groups_.size() - 1;
}

uint64_t FlightRecorder::begin(int group, const char* op, size_t bytes, int peer, Kind kind) {
  if (hang_next_) stop_here();
  const uint64_t token = record_begin(group, op, bytes, peer, kind);
  if (freeze_next_ && (kind == Collective || kind == Enqueued)) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      freeze_next_ = false;
      hung_ = true;
    }
    raise(SIGSTOP);
  }
  return token;
}

uint64_t FlightRecorder::record_begin(int group, const char* op, size_t bytes, int peer, Kind kind) {
  std::lock_guard<std::mutex> lock(mu_);
  const double now = wall_seconds();
  FlightGroup& g = groups_[group];
  FlightEntry e;
  e.seq = next_seq_++;
  e.group = group;
  if (kind == Collective || kind == Enqueued) e.group_seq = ++g.started;
  e.op = op;
  e.bytes = bytes;
  e.peer = peer;
  e.t_start = now;
  e.queued = kind == Enqueued;
  if (kind == Post) e.t_end = now;
  else in_flight_[e.seq] = now;
  ring_[e.seq % ring_.size()] = e;
  last_progress_ = now;
  return e.seq;
}

void FlightRecorder::end(uint64_t token) {
  std::lock_guard<std::mutex> lock(mu_);
  const double now = wall_seconds();
  FlightEntry& e = ring_[token % ring_.size()];
  if (e.seq == token && e.t_end == 0) {
    e.t_end = now;
    if (e.group_seq) groups_[e.group].completed++;
  }
  in_flight_.erase(token);
  last_progress_ = now;
}

void FlightRecorder::note_step(long step) {
  std::lock_guard<std::mutex> lock(mu_);
  step_ = step;
  last_progress_ = wall_seconds();
}

void FlightRecorder::set_phase(const char* what, long step) {
  std::lock_guard<std::mutex> lock(mu_);
  phase_ = what, phase_step_ = step;
}

std::string phase_text(const char* what, long step) {
  return step >= 0 ? std::string(what) + " of step " + std::to_string(step) : std::string(what);
}

void FlightRecorder::note_stall(double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  stalled_s_ = std::max(stalled_s_, seconds);
}

void FlightRecorder::stop_here() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    hung_ = true;
  }
  for (;;) sleep(1);  // until the watchdog (or the launcher) ends the process
}

FlightRecorder::Status FlightRecorder::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  const bool in_call = !in_flight_.empty();  // tokens grow with time: the first is the oldest
  return {in_call, in_call ? in_flight_.begin()->second : 0.0, last_progress_, step_, phase_, phase_step_};
}

std::vector<int> FlightRecorder::waiting_on() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<int> out;
  if (in_flight_.empty()) return out;
  const uint64_t seq = in_flight_.begin()->first;
  const FlightEntry& e = ring_[seq % ring_.size()];
  if (e.seq != seq) return out;
  if (e.peer >= 0) return {e.peer};
  for (int m : groups_[e.group].members)
    if (m != rank_) out.push_back(m);
  return out;
}

std::string FlightRecorder::to_json(const std::string& reason, const std::string& extra) const {
  std::lock_guard<std::mutex> lock(mu_);
  char b[512];
  std::string s = "{\"rank\": " + std::to_string(rank_) + ", \"pid\": " + std::to_string(getpid()) +
                  ", \"host\": \"" + json_escape(host_) + "\"";
  std::snprintf(b, sizeof b, ", \"job_start\": %.6f, \"launch\": %d, \"time\": %.6f, \"step\": %ld",
                job_start_, launch_, wall_seconds(), step_);
  s += b;
  s += ", \"reason\": \"" + json_escape(reason) + "\"";
  s += ", \"phase\": \"" + json_escape(phase_text(phase_, phase_step_)) + "\"";
  std::snprintf(b, sizeof b, ", \"process_stalled_s\": %.3f", stalled_s_);
  s += b;
  s += std::string(", \"stopped_by_fault_injection\": ") + (hung_ ? "true" : "false");
  if (!extra.empty()) s += ", " + extra;
  s += ", \"groups\": [";
  for (size_t g = 0; g < groups_.size(); g++) {
    const FlightGroup& G = groups_[g];
    s += (g ? ", " : "") + std::string("{\"name\": \"") + G.name + "\", \"members\": [";
    for (size_t i = 0; i < G.members.size(); i++) s += (i ? ", " : "") + std::to_string(G.members[i]);
    s += "], \"started\": " + std::to_string(G.started) + ", \"completed\": " + std::to_string(G.completed) + "}";
  }
  s += "], \"calls\": [";
  // Oldest first: the ring holds sequence numbers next_seq_ - size .. next_seq_ - 1.
  const uint64_t n = ring_.size();
  const uint64_t first = next_seq_ > n ? next_seq_ - n : 1;
  bool comma = false;
  for (uint64_t q = first; q < next_seq_; q++) {
    const FlightEntry& e = ring_[q % n];
    if (e.seq != q) continue;
    const std::string end = e.t_end > 0 ? std::to_string(e.t_end) : "null";
    // A queued data collective: when the host enqueued it and when it
    // completed (null: not yet), under their own names as well.
    const std::string queued = e.queued ? ", \"queued\": true, \"enqueued\": " + std::to_string(e.t_start) +
                                              ", \"completed\": " + end
                                        : "";
    std::snprintf(b, sizeof b,
                  "%s\n  {\"seq\": %llu, \"group\": %d, \"group_seq\": %llu, \"op\": \"%s\", \"bytes\": %zu, "
                  "\"peer\": %d, \"start\": %.6f, \"end\": %s%s}",
                  comma ? "," : "", (unsigned long long)e.seq, e.group, (unsigned long long)e.group_seq, e.op,
                  e.bytes, e.peer, e.t_start, end.c_str(), queued.c_str());
    s += b;
    comma = true;
  }
  s += "]}\n";
  return s;
}

}  // namespace trainer
