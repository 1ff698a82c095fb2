#include "supervise/child_process.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <thread>

#include "runtime/elapsed.h"
#include "runtime/stop_signal.h"

namespace trainer {

pid_t spawn(const std::vector<std::string>& cmd, const Environment& env, const std::string& output) {
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    setsid();  // a session of its own: signals to the supervisor's group do not hit it
    // If the supervisor dies (even by SIGKILL), the launcher gets SIGTERM and
    // ends the ranks with it: no job left training without its supervisor.
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(128 + SIGTERM);  // it died before the line above
    for (const auto& [name, value] : env) setenv(name.c_str(), value.c_str(), 1);
    if (!output.empty())
      if (const int fd = open(output.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644); fd >= 0)
        dup2(fd, 1), dup2(fd, 2);
    signal(SIGTERM, SIG_DFL), signal(SIGUSR1, SIG_DFL), signal(SIGINT, SIG_DFL);
    std::vector<char*> argv;
    for (const auto& a : cmd) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execvp(argv[0], argv.data());
    std::fprintf(stderr, "supervise: cannot run %s: %s\n", argv[0], std::strerror(errno));
    _exit(127);
  }
  return pid;
}

void kill_session(pid_t sid, int sig) {
  // A live leader is found too (its session id is its pid); the kernel
  // keeps a pid from reuse while a process still has it as its session id.
  if (DIR* d = opendir("/proc")) {
    while (dirent* e = readdir(d)) {
      const pid_t p = (pid_t)std::atoi(e->d_name);
      if (p > 0 && p != getpid() && getsid(p) == sid) kill(p, sig);
    }
    closedir(d);
  }
}

std::vector<int> stop_jobs(const std::vector<pid_t>& pids, const std::string& launcher) {
  std::vector<int> status(pids.size(), 0);
  std::vector<bool> reaped(pids.size(), false);
  auto reap = [&](size_t i) { return reaped[i] || (reaped[i] = waitpid(pids[i], &status[i], WNOHANG) == pids[i]); };
  if (std::filesystem::path(launcher).filename() == "srun") {
    for (int round = 0; round < 2; round++) {
      for (pid_t p : pids) kill(p, SIGINT);
      if (round == 0) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    for (int i = 0; i < 100; i++) {
      bool all = true;
      for (size_t k = 0; k < pids.size(); k++) all &= reap(k);
      if (all) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  for (size_t k = 0; k < pids.size(); k++) {
    kill_session(pids[k], SIGKILL);  // the leader too while it is not reaped
    if (!reaped[k]) waitpid(pids[k], &status[k], 0);
    kill_session(pids[k], SIGKILL);  // what it left behind
  }
  return status;
}

int stop_job(pid_t pid, const std::string& launcher) { return stop_jobs({pid}, launcher)[0]; }

int exit_code(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status); }

std::vector<ChildEnd> wait_children(const std::vector<pid_t>& pids, double limit, const std::string& launcher,
                                    const std::function<bool()>& over) {
  std::vector<ChildEnd> ends(pids.size());
  std::vector<bool> done(pids.size(), false);
  std::vector<int> status(pids.size(), 0);
  const auto t0 = Clock::now();  // a step of the wall clock must not end the wait
  auto reap = [&] {
    bool all = true;
    for (size_t k = 0; k < pids.size(); k++) {
      if (!done[k]) done[k] = waitpid(pids[k], &status[k], WNOHANG) == pids[k];
      all &= done[k];
    }
    return all;
  };
  bool is_over = false;
  double asked_ms = 0;
  while (!reap() && !stop_signal() && ms_since(t0) <= limit * 1e3) {
    if (over && ms_since(t0) - asked_ms >= 1000) {
      asked_ms = ms_since(t0);
      if ((is_over = over())) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const bool stopped = stop_signal() != 0;
  reap();  // one that ended just now ended by itself: its code, not "timed out"
  std::vector<pid_t> running;
  for (size_t k = 0; k < pids.size(); k++)
    if (!done[k]) running.push_back(pids[k]);
  stop_jobs(running, launcher);
  for (size_t k = 0; k < pids.size(); k++) {
    if (done[k]) {
      kill_session(pids[k], SIGKILL);  // ranks the launcher left behind
      ends[k].code = exit_code(status[k]);
    } else {
      ends[k].code = 128 + SIGKILL;
      (stopped ? ends[k].stopped : is_over ? ends[k].over : ends[k].timed_out) = true;
    }
  }
  return ends;
}

}  // namespace trainer
