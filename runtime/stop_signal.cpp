#include "runtime/stop_signal.h"

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstring>

namespace trainer {

namespace {
volatile std::sig_atomic_t g_stop_signal = 0;
volatile std::sig_atomic_t g_dump_requests = 0;
// Two note buffers: the writer fills the one not in use, then publishes it.
char g_notes[2][2048];
std::atomic<int> g_note{-1};
extern "C" void record_stop_signal(int sig) {
  const bool first = g_stop_signal == 0;
  g_stop_signal = sig;
  const int i = g_note.load();
  if (first && i >= 0) {  // write(2) and strlen are async-signal-safe
    const ssize_t ignored = write(2, g_notes[i], strlen(g_notes[i]));
    (void)ignored;
  }
}
extern "C" void record_dump_request(int) { g_dump_requests = g_dump_requests + 1; }
}  // namespace

void install_stop_signals(bool interrupt) {
  struct sigaction sa {};
  sa.sa_handler = record_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // MPI and file calls carry on; the loop checks between steps
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGUSR1, &sa, nullptr);
  if (interrupt) sigaction(SIGINT, &sa, nullptr);
}

int stop_signal() { return g_stop_signal; }

void set_stop_note(const std::string& text) {
  const int next = g_note.load() == 0 ? 1 : 0;
  std::snprintf(g_notes[next], sizeof g_notes[next], "%s", text.c_str());
  g_note.store(text.empty() ? -1 : next);
}

void install_dump_signal() {
  struct sigaction sa {};
  sa.sa_handler = record_dump_request;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGUSR2, &sa, nullptr);
}

int dump_requests() { return g_dump_requests; }

}  // namespace trainer
