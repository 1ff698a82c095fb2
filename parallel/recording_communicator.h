#pragma once
// Decorators that log every call of a communicator into the rank's flight
// recorder (runtime/flight_recorder.h) under one named group, so a call that
// never completes is visible to the watchdog and to `trainer diagnose`.
//
// Control calls block: recorded from entry to return. Data collectives are
// recorded when they are enqueued and again (the same entry's end) when
// wait() sees them complete: a queued GPU collective does not block the
// host, so whether it is stuck is judged on completion. Point-to-point posts
// are recorded as done at once; the wait() that completes one is the call
// that can block, recorded with the posted op's peer and bytes.
#include <map>
#include <string>
#include <vector>

#include "parallel/communicator.h"
#include "runtime/flight_recorder.h"

namespace trainer {

class RecordingControlComm final : public ControlComm {
 public:
  // members: the world rank of each group rank (for peers and diagnosis).
  RecordingControlComm(ControlComm& inner, FlightRecorder& rec, int group, const std::vector<int>& members);
  int rank() const override { return c_.rank(); }
  int size() const override { return c_.size(); }
  TRAINER_CONTROL_COMM_OVERRIDES

 private:
  template <class F>
  void record(const char* op, size_t bytes, int peer, F&& f);
  ControlComm& c_;
  FlightRecorder& rec_;
  int group_;
  std::vector<int> members_;
};

class RecordingDataComm final : public DataComm {
 public:
  RecordingDataComm(DataComm& inner, FlightRecorder& rec, int group, const std::vector<int>& members);
  int rank() const override { return c_.rank(); }
  int size() const override { return c_.size(); }
  TRAINER_DATA_COMM_OVERRIDES
  bool test(Handle h) override { return c_.test(h); }

 private:
  template <class F>
  Handle enqueue(const char* op, size_t bytes, F&& f);
  Handle posted(Handle h, const char* op, const char* wait_op, size_t bytes, int peer);
  DataComm& c_;
  FlightRecorder& rec_;
  int group_;
  std::vector<int> members_;
  struct Pending {
    uint64_t token;  // collectives: the entry that completes at wait(); 0: a point-to-point post
    const char* op;  // point-to-point: the wait's name
    size_t bytes;
    int peer;
  };
  std::map<Handle, Pending> pending_;
};

}  // namespace trainer
