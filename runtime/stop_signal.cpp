#include "runtime/stop_signal.h"

#include <csignal>

namespace trainer {

namespace {
volatile std::sig_atomic_t g_stop_signal = 0;
volatile std::sig_atomic_t g_dump_requests = 0;
extern "C" void record_stop_signal(int sig) { g_stop_signal = sig; }
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

void install_dump_signal() {
  struct sigaction sa {};
  sa.sa_handler = record_dump_request;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGUSR2, &sa, nullptr);
}

int dump_requests() { return g_dump_requests; }

}  // namespace trainer
