#include "supervise/launcher.h"

#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <thread>

#include "report/run_files.h"
#include "runtime/errors.h"
#include "runtime/flight_recorder.h"
#include "runtime/replace_file.h"
#include "runtime/shell_words.h"
#include "runtime/stop_signal.h"
#include "runtime/units.h"
#include "supervise/child_process.h"
#include "supervise/diagnosis.h"
#include "supervise/launch_command.h"

namespace trainer {

namespace {

double now_s() { return wall_seconds(); }

// How long a launcher may outlive the watchdog that ended its job; when the
// watchdogs' network probes found a host unreached or a link down, it waits
// on that host's daemon, and nothing more will come of it.
constexpr double kLauncherLinger = 15, kLostHostLinger = 3;

// Why run.dir cannot take a heartbeat: "" when it can, else the system's
// reason (a full disk, a quota, a read-only remount). Tried by writing, as the
// heartbeat is written; a job whose heartbeat stops for this is not hung.
std::string run_dir_unwritable(const std::string& dir) {
  const std::string probe = dir + "/.supervisor_probe";
  std::string err = replace_file(probe, std::string(4096, '\n'), false);
  std::remove(probe.c_str());
  std::remove((probe + ".tmp").c_str());
  return err;
}

// Flight recorder dumps (rank_*.json) written at or after time t.
int dumps_since(const std::string& dir, double t) {
  int n = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("rank_", 0) == 0 && e.path().extension() == ".json" && mtime_seconds(e.path().string()) >= t) n++;
  }
  return n;
}

}  // namespace

// A hung job: SIGUSR2 (mpirun and srun pass it on) makes every rank's
// watchdog write its flight recorder, which the diagnosis reads; wait until
// all have (at most 5 s: a rank frozen for good never will), then kill the
// job.
void Launcher::kill_hung(pid_t pid, int ranks, int* status, const std::string& launcher) {
  const double asked = now_s();
  kill(pid, SIGUSR2);
  // (mtimes come from the kernel's coarse clock: allow a few ms)
  while (now_s() - asked < 5 && dumps_since(r_.run.dir + "/flight", asked - 0.05) < ranks)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  *status = stop_job(pid, launcher);
}

// SIGUSR1 (the ranks checkpoint at the next step and exit 75), then up to
// two minutes for them to finish before the job is killed.
void Launcher::stop_gracefully(pid_t pid, int* status, const std::string& launcher) {
  kill(pid, SIGUSR1);
  for (int i = 0; i < 1200; i++) {
    if (waitpid(pid, status, WNOHANG) == pid) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  *status = stop_job(pid, launcher);
}

LaunchEnd Launcher::run(int launch, const std::vector<std::string>& command, const std::vector<std::string>& hosts,
                        const Allocation* alloc, int ranks, const GridShape& grid, StragglerPolicy& stragglers) {
  const SupervisorSection& sv = r_.supervisor;
  const std::string heartbeat = r_.run.dir + "/heartbeat";
  events_.write(launch, "launch " + std::to_string(launch) + ": " + shell_join(command),
                events::Start{.command = shell_join(command)});
  LaunchEnd o;
  o.t0 = now_s();
  o.hosts = hosts;
  if (!hosts.empty() && sv.start_timeout > 0) {
    o.marks = r_.run.dir + "/started/launch_" + std::to_string(launch);
    std::error_code ec;
    std::filesystem::remove_all(o.marks, ec);
    std::filesystem::create_directories(o.marks, ec);
  }
  stragglers.begin_launch(alloc && !hosts.empty() && sv.on_straggler == "replace");
  const pid_t pid = spawn(command, launch_environment(launch, o.marks));
  int status = 0;
  bool all_started = o.marks.empty();
  double marks_checked = 0;
  // The supervisor stopped with its job (`scontrol suspend`, gang
  // scheduling, a paused VM) sees the heartbeat old when it comes back:
  // that time is not a hang, so the heartbeat's age counts from then.
  auto last_poll = std::chrono::steady_clock::now();
  double resumed_at = 0, flight_checked = 0, ended_at = 0, stragglers_checked = 0, forwarded_at = 0;
  JobEnd job_end = JobEnd::Running;
  for (;;) {
    if (waitpid(pid, &status, WNOHANG) == pid) break;
    // A watchdog that ended the job normally ends the launcher within
    // seconds; one still running long after waits on a host it lost (mpirun
    // waits for a cut host's daemon): the job is over, stop it.
    if (job_end != JobEnd::EndedHostLost && now_s() - flight_checked > 1) {
      flight_checked = now_s();
      // A watchdog ends a job only after its steps stopped: the flight
      // directory is read once the heartbeat is a few seconds old. The
      // linger counts from here (the dump's time is a rank host's clock).
      if (now_s() - std::max(o.t0, mtime_seconds(heartbeat)) > 2) job_end = watchdog_ended_job(r_.run.dir, o.t0);
      if (job_end != JobEnd::Running && ended_at == 0) ended_at = now_s();
    }
    if (ended_at > 0 && now_s() - ended_at > (job_end == JobEnd::EndedHostLost ? kLostHostLinger : kLauncherLinger)) {
      char b[256];
      std::snprintf(b, sizeof b, "launch %d: a watchdog ended the job %.0f s ago and the launcher is still running "
                                 "(%s): stopping it", launch, now_s() - ended_at,
                    job_end == JobEnd::EndedHostLost ? "waiting on a host the watchdogs' probes found cut off"
                                                     : "waiting on a host it lost?");
      events_.write<events::Lingering>(launch, b);
      status = stop_job(pid, command[0]);
      o.lingered = true;
      break;
    }
    const auto polled = std::chrono::steady_clock::now();
    if (const double gap = std::chrono::duration<double>(polled - last_poll).count(); gap > 2.0) {
      resumed_at = now_s();
      events_.write<events::Resumed>(launch, "the supervisor was stopped for " + std::to_string((int)gap) +
                                           " s (a suspended job?): the heartbeat's age counts from now");
    }
    last_poll = polled;
    // A host whose ranks have not started by start_timeout holds up the
    // whole job (MPI_Init waits for every rank): stop it and find out why.
    // A finished step (the heartbeat) says every rank started.
    if (!all_started && now_s() - marks_checked > 1) {
      marks_checked = now_s();
      const StartMarks m = read_marks(o.marks, hosts);
      all_started = m.marked >= (int)hosts.size() || mtime_seconds(heartbeat) > o.t0;
      if (const double since = now_s() - std::max(o.t0, resumed_at); !all_started && since > sv.start_timeout) {
        const std::string who =
            m.named ? join(m.missing)
                    : std::to_string(hosts.size() - m.marked) + " of its " + std::to_string(hosts.size()) +
                          " hosts (which: unknown, the marks' names from `hostname` are not the allocation's)";
        char b[160];
        std::snprintf(b, sizeof b, " after %.0f s (supervisor.start_timeout = %g s): stopping the launch", since,
                      sv.start_timeout);
        events_.write(launch, "launch " + std::to_string(launch) + ": no rank started on " + who + b,
                      events::NotStarted{.hosts = m.missing});
        status = stop_job(pid, command[0]);
        o.unstarted = true;
        break;
      }
    }
    if (o.forwarded && now_s() - forwarded_at > 2) {
      // Again until the job ends: a launcher that is still starting its
      // ranks forwards the signal to none of them (the ranks take it as
      // often as it comes; they stop once).
      kill(pid, SIGUSR1);
      forwarded_at = now_s();
    }
    if (const int sig = stop_signal(); sig && !o.forwarded) {
      // The launcher passes SIGUSR1 on to every rank (mpirun and srun both
      // forward it); the ranks checkpoint at the next step boundary.
      o.forwarded = sig;
      forwarded_at = now_s();
      kill(pid, SIGUSR1);
      events_.write(launch, std::string("received ") + strsignal(sig) + ": asking the job to checkpoint and stop",
                    events::Signal{.signal = sig});
    }
    stragglers.measure_swap(launch, o.t0);
    if (alloc && !o.forwarded && now_s() - stragglers_checked > 1) {
      stragglers_checked = now_s();
      if ((o.swap = stragglers.poll(launch, *alloc, hosts, grid, true))) {
        stop_gracefully(pid, &status, command[0]);
        break;
      }
    }
    const double beat = std::max({o.t0, resumed_at, mtime_seconds(heartbeat)});
    if (sv.hang_timeout > 0 && now_s() - beat > sv.hang_timeout) {
      if (const std::string why = run_dir_unwritable(r_.run.dir); !why.empty()) {
        events_.write(launch,
                      "launch " + std::to_string(launch) + ": no heartbeat because " + r_.run.dir +
                          " cannot be written (" + why + "): not a hang; asking the job to checkpoint and stop "
                          "(checkpoint.dir may have room) instead of restarting into it. Free space, then run the "
                          "same command to resume from the newest checkpoint",
                      events::DiskFull{.reason = why});
        stop_gracefully(pid, &status, command[0]);
        o.no_space = true;
        break;
      }
      char b[160];
      std::snprintf(b, sizeof b, "launch %d: no heartbeat for %.0f s (supervisor.hang_timeout = %g s): killing the job",
                    launch, now_s() - beat, sv.hang_timeout);
      events_.write(launch, b, events::Hang{.since_heartbeat_s = now_s() - beat});
      kill_hung(pid, ranks, &status, command[0]);
      o.hung = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  stragglers.end_launch(launch, alloc, hosts, grid, o.swap.has_value());
  kill_session(pid, SIGKILL);  // ranks the launcher left behind (it is reaped: by session id only)
  o.code = o.no_space ? kExitNoSpace
           : o.lingered ? kExitCommTimeout
           : o.hung || o.unstarted ? 128 + SIGKILL
                      : exit_code(status);
  return o;
}

}  // namespace trainer
