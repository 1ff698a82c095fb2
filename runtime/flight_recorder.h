#pragma once
// The flight recorder: a ring buffer of this rank's last communication calls
// (collectives, point-to-point posts and waits), each with its group, the
// group's sequence number, bytes and wall-clock start/end. The training
// thread writes it; the watchdog thread (runtime/watchdog.h) reads it to see
// whether a call has been stuck too long, and dumps it as JSON for
// `trainer diagnose`. Every call takes one uncontended mutex: nothing next to
// an MPI call.
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace trainer {

struct FlightEntry {
  uint64_t seq = 0;        // over all groups of this rank
  int group = -1;          // index into the recorder's groups
  uint64_t group_seq = 0;  // collectives: the n-th on that group (1-based), peers must agree; else 0
  const char* op = "";     // "allreduce_sum", "irecv", "wait", ...
  size_t bytes = 0;
  int peer = -1;           // point-to-point: the peer's world rank
  bool queued = false;     // enqueued without blocking the host; t_end is its completion
  double t_start = 0, t_end = 0;  // seconds since the epoch; t_end 0: still running
};

struct FlightGroup {
  std::string name;          // "world", a dimension's ("tp", ...), the weight replicas' ("dp_cp"), "embed"
  std::vector<int> members;  // world ranks, in group-rank order
  uint64_t started = 0, completed = 0;  // collectives
};

class FlightRecorder {
 public:
  explicit FlightRecorder(int world_rank, size_t capacity = 512);
  int world_rank() const { return rank_; }
  // Which job this is (rank 0's start time, the same on every rank) and which
  // supervisor launch: `trainer diagnose` reads only the newest job's dumps.
  void set_job(double job_start, int launch) { job_start_ = job_start, launch_ = launch; }
  int add_group(const std::string& name, const std::vector<int>& members);
  // Collectives count in their group's sequence (every member must make the
  // same n-th call). Collective: a blocking call, in flight until end().
  // Enqueued: a collective started without blocking the host (a data
  // collective), in flight until end() records its completion; the oldest
  // one not completed counts as the call in flight, so a queued collective
  // that never completes is as visible as a blocking one that never returns.
  // Post: a point-to-point transfer posted (done at once); Wait: waiting for
  // one, in flight until end().
  enum Kind { Collective, Enqueued, Post, Wait };
  // Returns a token for end().
  uint64_t begin(int group, const char* op, size_t bytes, int peer, Kind kind = Collective);
  void end(uint64_t token);
  // Progress outside communication (the training loop passes each step).
  void note_step(long step);
  // What the rank does between calls, as a string literal and a step
  // ("checkpoint save", 10; step < 0: none): in the dump as "checkpoint save
  // of step 10", so a rank that is behind is named with it. Once per step
  // at most, so it stores the pointer and formats only when asked.
  void set_phase(const char* what, long step);
  // The watchdog saw its own polls stop for `seconds`: the whole process was
  // stopped (SIGSTOP, a frozen driver call holding every thread, swapping).
  // The longest such stall goes into the dump.
  void note_stall(double seconds);

  struct Status {
    bool in_call = false;      // a blocking call, or an enqueued collective not completed
    double call_start = 0;     // of the call in flight (the oldest)
    double last_progress = 0;  // the latest begin, end or step
    long step = 0;
    const char* phase = "";
    long phase_step = -1;
  };
  Status status() const;
  // Fault injection: the next begin() never returns, as a rank that stops
  // before it joins a collective (its peers then wait in that collective).
  void hang_at_next_call() { hang_next_ = true; }
  // Fault injection: the next collective is recorded as entered, then the
  // whole process stops (SIGSTOP), as one frozen by the OS or a driver
  // inside the call: its watchdog is frozen too, so it writes no dump.
  void freeze_in_next_collective() { freeze_next_ = true; }
  // Fault injection: stop here, for good (marked in the dump).
  [[noreturn]] void stop_here();
  // Everything as one JSON object (docs/ARCHITECTURE.md, "Supervision": the
  // dump); extra: more members ("name": value, ...) to add to it.
  std::string to_json(const std::string& reason, const std::string& extra = "") const;
  // The other ranks the oldest call in flight needs: its group's members, or
  // its peer (none when no call is in flight).
  std::vector<int> waiting_on() const;

 private:
  uint64_t record_begin(int group, const char* op, size_t bytes, int peer, Kind kind);
  mutable std::mutex mu_;
  int rank_;
  std::string host_;  // where this rank runs (the supervisor blames hosts)
  std::vector<FlightEntry> ring_;
  uint64_t next_seq_ = 1;
  std::vector<FlightGroup> groups_;
  std::map<uint64_t, double> in_flight_;  // token -> start, of calls not yet ended
  double last_progress_ = 0;
  long step_ = 0;
  const char* phase_ = "starting";
  long phase_step_ = -1;
  double stalled_s_ = 0;
  double job_start_ = 0;
  int launch_ = 0;
  bool hang_next_ = false, hung_ = false, freeze_next_ = false;
};

double wall_seconds();  // seconds since the epoch, microsecond resolution
// "checkpoint save of step 10" from ("checkpoint save", 10); step < 0: what alone.
std::string phase_text(const char* what, long step);

}  // namespace trainer
