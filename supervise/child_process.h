#pragma once
// The processes `trainer supervise` starts (the launcher of a job, of a
// health check, of a start probe): each in a session of its own, ended with
// its whole session, and waited for with a time limit.
#include <sys/types.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace trainer {

using Environment = std::vector<std::pair<std::string, std::string>>;

// Called from the supervisor's main thread only: the parent-death signal
// fires when the thread that forked ends, which for the main thread is when
// the supervisor does. `env`: set in the child; `output`: a file for its
// stdout and stderr ("": the supervisor's).
pid_t spawn(const std::vector<std::string>& cmd, const Environment& env, const std::string& output = "");

// Every process still in session `sid` (the launcher's ranks on this host,
// whatever process groups they made) gets `sig`. Found by their session id
// alone, never by the pid: the leader may be reaped and its pid reused.
void kill_session(pid_t sid, int sig);

// Ends launchers (of `launcher`: mpirun or srun) and reaps them; returns
// each one's wait status. srun's tasks run under slurmd, outside our
// session: two SIGINTs within a second make srun kill the whole step (all
// launchers at once, so N stuck ones take one wait, not N); after that (and
// for mpirun, whose ranks are in our session) everything left gets SIGKILL.
std::vector<int> stop_jobs(const std::vector<pid_t>& pids, const std::string& launcher);
int stop_job(pid_t pid, const std::string& launcher);

// A wait status as one code (128 + N for signal N).
int exit_code(int status);

// How a child waited for with wait_children ended.
struct ChildEnd {
  int code = 0;            // exit_code(); 128 + SIGKILL when stopped
  bool timed_out = false;  // still running after the limit: stopped
  bool stopped = false;    // a stop signal (runtime/stop_signal.h) came first: stopped
  bool over = false;       // `over` said the work was done first: stopped
};
// Waits for the children, each a launcher of `launcher`, until all ended, the
// limit (seconds) passed, a stop signal came or `over` (asked about once a
// second) says the work is done though a launcher lingers; those still
// running then are stopped (stop_jobs). Every child is reaped and its
// session killed.
std::vector<ChildEnd> wait_children(const std::vector<pid_t>& pids, double limit, const std::string& launcher,
                                    const std::function<bool()>& over = {});

}  // namespace trainer
