#include "runtime/crash_report.h"

#include <execinfo.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "runtime/host_name.h"
#include "runtime/mapped_reads.h"

namespace trainer {

namespace {

struct CrashState {
  char dir[4096] = {0};  // made on the way if missing (mkdir is async-signal-safe)
  char path[4096] = {0};
  const char* volatile phase = "starting";  // a string literal
  volatile long phase_step = -1;
  int rank = -1;
  long long job_start_us = 0;
  char host[256] = {0};  // taken at installation: the handler makes no calls it need not
};
CrashState g_crash;

const char* signal_name(int sig) {
  switch (sig) {
    case SIGSEGV: return "SIGSEGV, invalid memory access";
    case SIGBUS: return "SIGBUS, bus error";
    case SIGFPE: return "SIGFPE, arithmetic error";
    case SIGILL: return "SIGILL, illegal instruction";
    case SIGABRT: return "SIGABRT, abort (an uncaught exception or a failed assertion)";
  }
  return "signal";
}

void write_all(int fd, const char* s, size_t n) {
  while (n > 0) {
    const ssize_t w = write(fd, s, n);
    if (w <= 0) return;
    s += w, n -= (size_t)w;
  }
}

struct sigaction g_action;  // ours, to take again after a recovered SIGBUS (SA_RESETHAND dropped it)

extern "C" void on_crash(int sig, siginfo_t* info, void*) {
  // A token shard that shrank under its mapping: not a crash; the reader
  // names the file (runtime/mapped_reads.h).
  if (sig == SIGBUS && info && recover_mapped_read(info->si_addr)) {
    sigaction(SIGBUS, &g_action, nullptr);
    return;
  }
  alarm(5);  // should anything below block, SIGALRM still ends the process
  char phase[192];
  const long step = g_crash.phase_step;
  if (step >= 0) std::snprintf(phase, sizeof phase, "%s of step %ld", g_crash.phase, step);
  else std::snprintf(phase, sizeof phase, "%s", g_crash.phase);
  char line[1024];
  const int n = std::snprintf(line, sizeof line,
                              "rank %d (pid %d) died of signal %d (%s) in %s\njob_start_us %lld\nhost %s\n",
                              g_crash.rank, (int)getpid(), sig, signal_name(sig), phase, g_crash.job_start_us,
                              g_crash.host);
  mkdir(g_crash.dir, 0755);
  const int fd = open(g_crash.path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0) {
    write_all(fd, line, std::min((size_t)n, sizeof line - 1));
    write_all(fd, "backtrace:\n", 11);
    void* frames[64];
    backtrace_symbols_fd(frames, backtrace(frames, 64), fd);
    fsync(fd);
    close(fd);
  }
  const int m = std::snprintf(line, sizeof line, "error (rank %d): died of signal %d (%s) in %s; backtrace in %s\n",
                              g_crash.rank, sig, signal_name(sig), phase, g_crash.path);
  write_all(2, line, std::min((size_t)m, sizeof line - 1));
  signal(sig, SIG_DFL);
  raise(sig);
}

}  // namespace

void install_crash_report(const std::string& path, int rank, double job_start) {
  std::snprintf(g_crash.path, sizeof g_crash.path, "%s", path.c_str());
  const size_t slash = path.rfind('/');
  std::snprintf(g_crash.dir, sizeof g_crash.dir, "%s", slash == std::string::npos ? "." : path.substr(0, slash).c_str());
  g_crash.rank = rank;
  g_crash.job_start_us = (long long)(job_start * 1e6);
  std::snprintf(g_crash.host, sizeof g_crash.host, "%s", host_name().c_str());
  void* warm[1];
  backtrace(warm, 1);  // loads libgcc now: the first call may allocate
  // A stack overflow leaves no stack to run the handler on: give it its own.
  static char alt_stack[64 * 1024];
  stack_t ss{};
  ss.ss_sp = alt_stack;
  ss.ss_size = sizeof alt_stack;
  sigaltstack(&ss, nullptr);
  struct sigaction& sa = g_action;
  sa = {};
  sa.sa_sigaction = on_crash;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESETHAND;
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) sigaction(sig, &sa, nullptr);
}

void crash_note(const char* what, long step) {
  // A crash between the two stores reports the new phase with the old step
  // (or the reverse): off by a step at worst, never an invalid pointer.
  g_crash.phase = what;
  g_crash.phase_step = step;
}

}  // namespace trainer
