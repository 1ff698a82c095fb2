#include "runtime/peer_watch.h"

#include <chrono>

namespace trainer {

PeerWatch::PeerWatch(const PeerProbe& probe, std::vector<int> ranks, double period_s, OnCut on_cut,
                     double probe_timeout_s)
    : probe_(probe), ranks_(std::move(ranks)), period_s_(period_s), timeout_s_(probe_timeout_s),
      on_cut_(std::move(on_cut)) {
  thread_ = std::thread([this] { run(); });
}

PeerWatch::~PeerWatch() {
  {
    std::lock_guard<std::mutex> l(m_);
    done_ = true;
  }
  cv_.notify_all();
  thread_.join();  // at most a probe's time (two timeouts) when one is under way
}

void PeerWatch::run() {
  std::unique_lock<std::mutex> l(m_);
  for (;;) {
    if (cv_.wait_for(l, std::chrono::duration<double>(period_s_), [this] { return done_; })) return;
    l.unlock();
    PeerProbe::Result res = probe_.probe(ranks_, timeout_s_);
    if (!res.unreached.empty()) {  // once more, at once, the silent ones only: a lost packet is not a cut
      const PeerProbe::Result again = probe_.probe({res.unreached.begin(), res.unreached.end()}, timeout_s_);
      for (int r : again.reached) res.unreached.erase(r), res.reached.insert(r);
      res.links_down = again.links_down;
    }
    l.lock();
    if (done_) return;  // the work ended meanwhile: its own verdict stands
    if (res.unreached.empty()) continue;
    l.unlock();
    on_cut_(res);
    return;
  }
}

}  // namespace trainer
