#pragma once
// Per-rank communication accounting: a Communicator decorator that counts
// calls, bytes and wall time per collective kind. "Bytes" are what a ring
// algorithm moves per rank: all-reduce 2(p-1)/p of the buffer, all-gather and
// reduce-scatter (p-1)/p of the full buffer. Groups of size 1 move nothing.
#include <chrono>
#include <string>

#include "parallel/communicator.h"

namespace trainer {

struct CommCounters {
  // P2P: bytes sent; its time is the time spent posting sends and waiting.
  enum Kind { AllReduce, AllGather, ReduceScatter, P2P, Other, kKinds };
  double bytes[kKinds] = {0, 0, 0, 0, 0};
  double ms[kKinds] = {0, 0, 0, 0, 0};
  long calls[kKinds] = {0, 0, 0, 0, 0};
  void reset() { *this = CommCounters{}; }
  static const char* name(int k);
};

class CountingCommunicator final : public Communicator {
 public:
  explicit CountingCommunicator(Communicator& inner) : c_(inner) {}
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
  void barrier() override { c_.barrier(); }
  Request isend(const float* data, size_t n, int peer, int tag) override;
  Request irecv(float* data, size_t n, int peer, int tag) override;
  void wait(Request r) override;
  CommCounters& counters() { return k_; }

 private:
  template <class F>
  void timed(CommCounters::Kind kind, double bytes, F&& f);
  Communicator& c_;
  CommCounters k_;
};

}  // namespace trainer
