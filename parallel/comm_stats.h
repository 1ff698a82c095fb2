#pragma once
// Per-rank communication accounting: a DataComm decorator that counts
// calls, bytes and wall time per collective kind. "Bytes" are what a ring
// algorithm moves per rank: all-reduce 2(p-1)/p of the buffer, all-gather and
// reduce-scatter (p-1)/p of the full buffer. Groups of size 1 move nothing.
#include <chrono>
#include <map>
#include <string>

#include "parallel/communicator.h"

namespace trainer {

struct CommCounters {
  // P2P: bytes sent (an all-to-all's too); its time is the time spent posting
  // sends and waiting.
  enum Kind { AllReduce, AllGather, ReduceScatter, P2P, Other, kKinds };
  double bytes[kKinds] = {0, 0, 0, 0, 0};
  double ms[kKinds] = {0, 0, 0, 0, 0};
  long calls[kKinds] = {0, 0, 0, 0, 0};
  void reset() { *this = CommCounters{}; }
  static const char* name(int k);
};

// Counts a data communicator's traffic. A non-blocking operation's time is
// the time spent starting it plus the time its wait() blocked: what the
// host lost to it.
class CountingDataComm final : public DataComm {
 public:
  explicit CountingDataComm(DataComm& inner) : c_(inner) {}
  int rank() const override { return c_.rank(); }
  int size() const override { return c_.size(); }
  TRAINER_DATA_COMM_OVERRIDES
  bool test(Handle h) override { return c_.test(h); }
  CommCounters& counters() { return k_; }

 private:
  template <class F>
  Handle timed(CommCounters::Kind kind, double bytes, F&& f);
  DataComm& c_;
  CommCounters k_;
  std::map<Handle, CommCounters::Kind> kind_of_;
};

}  // namespace trainer
