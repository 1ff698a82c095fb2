#pragma once
// The watchdog: a thread beside the training thread that polls the flight
// recorder. When a communication call has been in flight, or the rank has
// made no progress at all (no call started or ended, no step finished), for
// longer than the timeout, it writes the recorder to dump_path, says so on
// stderr, gives the other ranks a moment to dump theirs, and ends the process
// with kExitCommTimeout, which ends the job (mpirun and srun stop every rank
// when one exits with an error) so a supervisor can restart it. It also
// dumps on request (and carries on): whenever `dump_requests()` grows, which
// the job wires to SIGUSR2 (runtime/stop_signal.h).
#include <atomic>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "runtime/flight_recorder.h"

namespace trainer {

class Watchdog {
 public:
  // timeout_s <= 0: no timeout (dumps on request only). grace_s: how long to
  // wait after dumping before exiting, so peers whose own timeouts fire a
  // moment later dump too. dump_requests: a count that grows by one per
  // request; empty: none.
  // network_check, if set, runs before a timeout's dump with the ranks the
  // stuck call waits for and returns more members for it (runtime/peer_probe.h).
  using NetworkCheck = std::function<std::string(const std::vector<int>&)>;
  Watchdog(FlightRecorder& rec, double timeout_s, std::string dump_path, double grace_s = 3.0,
           std::function<int()> dump_requests = {}, NetworkCheck network_check = {});
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;
  // Run just before a timeout ends the process: aborts what could keep it
  // (or a device) waiting on a dead peer, e.g. NCCL communicators.
  static void set_abort_hook(void (*hook)());

 private:
  void run();
  bool dump(const std::string& why, const std::string& extra = "");
  FlightRecorder& rec_;
  std::function<int()> dump_requests_;
  NetworkCheck network_check_;
  double timeout_s_, grace_s_;
  std::string dump_path_;
  std::string dump_error_;  // why the last dump could not be written (the file and the system's reason)
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace trainer
