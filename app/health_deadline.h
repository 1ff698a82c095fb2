#pragma once
// `trainer health`'s own time limit (runtime.comm_timeout): its
// measurements wait in collectives on every node, so a host cut off in the
// middle would hold the others there for ever, printing nothing. Past the
// limit every rank probes the other ranks' hosts (runtime/peer_probe.h);
// the lowest rank that still reaches (or is) rank 0's side names the hosts
// that do not answer, records them for `trainer supervise` (an unfit_node
// event) when run by it, and the process ends with exit 10.
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "runtime/peer_probe.h"

namespace trainer {

class HealthDeadline {
 public:
  // Collective over MPI_COMM_WORLD (the probe addresses are swapped now,
  // while every host answers). timeout_s <= 0 or one rank: no limit.
  // record_launch >= 0: the supervisor's launch, whose events get the hosts.
  HealthDeadline(double timeout_s, const std::string& run_dir, int record_launch);
  ~HealthDeadline();  // the check ended in time: the watch stops
  HealthDeadline(const HealthDeadline&) = delete;
  HealthDeadline& operator=(const HealthDeadline&) = delete;

 private:
  void watch();
  double timeout_s_;
  std::string run_dir_;
  int launch_, rank_ = 0, size_ = 1;
  std::unique_ptr<PeerProbe> probe_;
  std::mutex m_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

}  // namespace trainer
