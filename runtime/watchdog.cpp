#include "runtime/watchdog.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "runtime/errors.h"
#include "runtime/replace_file.h"

namespace trainer {

namespace {
void (*abort_hook)() = nullptr;
}  // namespace

void Watchdog::set_abort_hook(void (*hook)()) { abort_hook = hook; }


Watchdog::Watchdog(FlightRecorder& rec, double timeout_s, std::string dump_path, double grace_s,
                   std::function<int()> dump_requests, NetworkCheck network_check)
    : rec_(rec), dump_requests_(std::move(dump_requests)), network_check_(std::move(network_check)),
      timeout_s_(timeout_s), grace_s_(grace_s), dump_path_(std::move(dump_path)) {
  if (timeout_s_ > 0 || dump_requests_) thread_ = std::thread([this] { run(); });
}

bool Watchdog::dump(const std::string& why, const std::string& extra) {
  // flight/ alone, never the run directory above it: a run directory renamed
  // or removed under a live run is not made again by its dump.
  std::error_code ec;
  std::filesystem::create_directory(std::filesystem::path(dump_path_).parent_path(), ec);
  dump_error_ = replace_file(dump_path_, rec_.to_json(why, extra), false);
  return dump_error_.empty();
}

Watchdog::~Watchdog() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void Watchdog::run() {
  // Poll often enough that the abort comes within a fraction of a second of
  // the timeout, rarely enough to cost nothing.
  const auto period = std::chrono::milliseconds(timeout_s_ < 10 ? 100 : 500);
  int requests_seen = dump_requests_ ? dump_requests_() : 0;
  auto last_poll = std::chrono::steady_clock::now();
  double resumed_at = 0;  // when the process last came back from being stopped (wall seconds)
  while (!stop_) {
    std::this_thread::sleep_for(period);
    // A poll that comes seconds late means the whole process was stopped
    // (this thread included): SIGSTOP, `scontrol suspend`, gang scheduling,
    // a paused VM. The dump says so, since such a rank looks like its peers
    // otherwise (inside the same call); and the time stopped is not a hang:
    // the timeout counts again from the moment the process came back. The
    // recorder is dumped then all the same (the process carries on): a rank
    // frozen alone is continued by the launcher just before it is killed,
    // and that dump is how the diagnosis learns it was the frozen one.
    const auto polled = std::chrono::steady_clock::now();
    const double gap = std::chrono::duration<double>(polled - last_poll).count();
    last_poll = polled;
    if (gap > std::max(2.0, 20 * std::chrono::duration<double>(period).count())) {
      rec_.note_stall(gap);
      resumed_at = wall_seconds();
      char why[160];
      std::snprintf(why, sizeof why, "the process was stopped for %.1f s (SIGSTOP, a suspended job, a paused VM) "
                                     "and carries on; its timeout counts again from now", gap);
      dump(why, "\"stall_ended\": true");  // this dump was written as the process came back
    }
    FlightRecorder::Status s = rec_.status();
    s.call_start = std::max(s.call_start, resumed_at);
    s.last_progress = std::max(s.last_progress, resumed_at);
    const double now = wall_seconds();
    if (dump_requests_ && dump_requests_() != requests_seen) {
      requests_seen = dump_requests_();
      const bool dumped = dump("dump requested (SIGUSR2)");
      std::fprintf(stderr, "rank %d (step %ld, %s): flight recorder %s%s on request\n", rec_.world_rank(),
                   s.step + 1, phase_text(s.phase, s.phase_step).c_str(), dumped ? "written to " : "NOT written: ",
                   dumped ? dump_path_.c_str() : dump_error_.c_str());
      std::fflush(stderr);
      continue;
    }
    if (timeout_s_ <= 0) continue;
    char why[256];
    if (s.in_call && now - s.call_start > timeout_s_)
      std::snprintf(why, sizeof why, "a communication call has not returned for %.1f s (runtime.comm_timeout = %g s)",
                    now - s.call_start, timeout_s_);
    else if (!s.in_call && now - s.last_progress > timeout_s_)
      std::snprintf(why, sizeof why,
                    "no progress for %.1f s outside communication, in %s (runtime.comm_timeout = %g s)",
                    now - s.last_progress, phase_text(s.phase, s.phase_step).c_str(), timeout_s_);
    else
      continue;
    // A stuck call: can its peers' hosts still be reached? (2 s at most)
    const std::string network = network_check_ && s.in_call ? network_check_(rec_.waiting_on()) : "";
    // "ends_job": a supervisor whose launcher lingers after this (waiting on
    // a host that is gone) knows the job is over (supervise/diagnosis.h).
    const bool dumped = dump(why, "\"ends_job\": true" + (network.empty() ? "" : ", " + network));
    std::fprintf(stderr, "error (rank %d, step %ld): watchdog: %s; flight recorder %s%s; ending the job "
                         "(exit %d). Run `trainer diagnose RUN_DIR` to see which rank is behind.\n",
                 rec_.world_rank(), s.step + 1, why, dumped ? "written to " : "NOT written: ",
                 dumped ? dump_path_.c_str() : dump_error_.c_str(), kExitCommTimeout);
    std::fflush(stderr);
    std::this_thread::sleep_for(std::chrono::duration<double>(grace_s_));
    std::fflush(stdout);
    if (abort_hook) abort_hook();
    _exit(kExitCommTimeout);
  }
}

}  // namespace trainer
