#pragma once
// One launch of the job, run to its end: the launcher process (mpirun or
// srun, supervise/launch_command.h) started in a session of its own, a stop
// signal forwarded to it, its heartbeat watched (a hang is killed after the
// ranks wrote their flight recorders), hosts whose ranks never start
// stopped at start_timeout, a launcher lingering after a watchdog ended the
// job stopped, and a straggler to swap asked to checkpoint and stop.
#include <optional>
#include <string>
#include <vector>

#include "parallel/grid_shape.h"
#include "recipe/recipe.h"
#include "supervise/allocation.h"
#include "supervise/event_log.h"
#include "supervise/straggler_policy.h"

namespace trainer {

// How a launch ended, as the supervisor's diagnosis and decisions need it.
struct LaunchEnd {
  int code = 0;            // the launcher's exit code (or what the supervisor's stop stands for)
  bool hung = false;       // no heartbeat for hang_timeout: killed
  bool no_space = false;   // the heartbeat stopped because run.dir cannot be written: stopped
  bool lingered = false;   // a watchdog ended the job and the launcher did not: stopped
  bool unstarted = false;  // no rank ran on a host by supervisor.start_timeout: stopped
  std::vector<std::string> hosts;  // the launch's, with an allocation; else empty
  std::string marks;       // where each host's first rank leaves a file (with hosts only)
  int forwarded = 0;       // the stop signal passed on to the job
  double t0 = 0;           // when it started (seconds since the epoch)
  std::optional<StragglerPick> swap;  // the straggler the job was stopped for
};

class Launcher {
 public:
  Launcher(const Recipe& r, EventLog& events) : r_(r), events_(events) {}
  // Runs `command` (on `hosts`, with an allocation; `ranks` of them in the
  // grid `grid`) to its end. stragglers: watched and swapped with an
  // allocation and on_straggler = "replace".
  LaunchEnd run(int launch, const std::vector<std::string>& command, const std::vector<std::string>& hosts,
                const Allocation* alloc, int ranks, const GridShape& grid, StragglerPolicy& stragglers);

 private:
  void kill_hung(pid_t pid, int ranks, int* status, const std::string& launcher);
  void stop_gracefully(pid_t pid, int* status, const std::string& launcher);

  const Recipe& r_;
  EventLog& events_;
};

}  // namespace trainer
