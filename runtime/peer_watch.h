#pragma once
// A watch over the other hosts while collective work runs that has no
// flight recorder or watchdog of its own (the node health check): every
// period it probes them (runtime/peer_probe.h). A host that answers, however
// slow its process, never ends anything: the kernel answers a connection
// from the listening socket's backlog. When a probe finds hosts that do not
// answer, they are probed again at once; those silent both times go to
// on_cut, once. The watch never calls MPI (run_under_mpi initialises MPI
// FUNNELED) and stops when destroyed.
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "runtime/peer_probe.h"

namespace trainer {

class PeerWatch {
 public:
  using OnCut = std::function<void(const PeerProbe::Result&)>;
  // `probe` (its peers set) must outlive the watch.
  PeerWatch(const PeerProbe& probe, std::vector<int> ranks, double period_s, OnCut on_cut,
            double probe_timeout_s = 2.0);
  ~PeerWatch();
  PeerWatch(const PeerWatch&) = delete;
  PeerWatch& operator=(const PeerWatch&) = delete;

 private:
  void run();

  const PeerProbe& probe_;
  const std::vector<int> ranks_;
  const double period_s_, timeout_s_;
  const OnCut on_cut_;
  std::mutex m_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

}  // namespace trainer
