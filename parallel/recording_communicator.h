#pragma once
// A Communicator decorator that logs every call into the rank's flight
// recorder (runtime/flight_recorder.h) under one named group, so a call that
// never returns is visible to the watchdog and to `trainer diagnose`.
#include <map>
#include <string>
#include <vector>

#include "parallel/communicator.h"
#include "runtime/flight_recorder.h"

namespace trainer {

class RecordingCommunicator final : public Communicator {
 public:
  // members: the world rank of each group rank (for peers and diagnosis).
  RecordingCommunicator(Communicator& inner, FlightRecorder& rec, const std::string& name,
                        const std::vector<int>& members);
  int rank() const override { return c_.rank(); }
  int size() const override { return c_.size(); }
  void allreduce_sum(float* x, size_t n) override;
  void allreduce_sum(double* x, size_t n) override;
  void allreduce_max(float* x, size_t n) override;
  void allreduce_max(double* x, size_t n) override;
  void allgather(const float* in, float* out, size_t n) override;
  void allgather_bytes(const void* in, void* out, size_t bytes) override;
  void reduce_scatter_sum(const float* in, float* out, size_t n) override;
  void broadcast(void* data, size_t bytes, int root) override;
  void barrier() override;
  Request isend(const float* data, size_t n, int peer, int tag) override;
  Request irecv(float* data, size_t n, int peer, int tag) override;
  void wait(Request r) override;

 private:
  template <class F>
  void record(const char* op, size_t bytes, int peer, F&& f,
              FlightRecorder::Kind kind = FlightRecorder::Collective);
  Communicator& c_;
  FlightRecorder& rec_;
  int group_;
  std::vector<int> members_;
  struct Posted {
    const char* op;
    size_t bytes;
    int peer;
  };
  std::map<Request, Posted> posted_;  // what a wait() completes
};

}  // namespace trainer
