#pragma once
// Communicators of a group that exists only on paper: every call returns at
// once and is recorded (kind, bytes), so a model chunk can run alone (traced
// or timed, planning/op_meter.h) as if it were one tensor-parallel rank of
// a group of `size`. The data are left as they are: a timed op sees zeros or
// its own earlier values, which cost what real values cost.
#include <string>
#include <vector>

#include "parallel/communicator.h"
#include "planning/op_meter.h"

namespace trainer {

struct CommCall {
  std::string op;  // "allreduce", "reduce_scatter", "allgather", "alltoall", "send", "recv"
  double bytes;    // of this rank's buffer: allreduce the whole, reduce-scatter the input, all-gather the output,
                   // all-to-all either
  OpPhase phase;
  // With a meter given: how many backend ops it had recorded when the call
  // started and when it was waited for (the ops in between ran while it was
  // in flight: what a transfer can hide behind).
  size_t started = 0, waited = 0;
};

class NullDataComm final : public DataComm {
 public:
  // phase: where the caller keeps the phase each call is filed under;
  // meter: whose op count marks a call's start and wait (optional).
  NullDataComm(int size, const OpPhase* phase, const MeteredBackend* meter = nullptr)
      : size_(size), phase_(phase), meter_(meter) {}
  int rank() const override { return 0; }
  int size() const override { return size_; }
  Handle start_allreduce(Ref x, size_t n, ReduceOp) override { return note("allreduce", x.dt, n); }
  Handle start_reduce_scatter(CRef in, Ref, size_t n) override { return note("reduce_scatter", in.dt, n * size_); }
  Handle start_allgather(CRef in, Ref, size_t n) override { return note("allgather", in.dt, n * size_); }
  Handle start_alltoall(CRef in, Ref, size_t n) override { return note("alltoall", in.dt, n * size_); }
  Handle start_alltoallv(CRef in, const size_t* send_rows, Ref, const size_t*, size_t row) override {
    size_t sent = 0;
    for (int j = 0; j < size_; j++) sent += send_rows[j];
    return note("alltoallv", in.dt, sent * row);
  }
  Handle isend(CRef d, size_t n, int, int) override { return note("send", d.dt, n); }
  Handle irecv(Ref d, size_t n, int, int) override { return note("recv", d.dt, n); }
  void wait(Handle h) override {
    if (h >= 1 && (size_t)h <= calls_.size()) calls_[h - 1].waited = ops();
  }
  bool test(Handle) override { return true; }
  const std::vector<CommCall>& calls() const { return calls_; }
  void clear_calls() { calls_.clear(); }

 private:
  Handle note(const char* op, DType dt, size_t n) {
    const size_t at = ops();
    calls_.push_back({op, (double)n * dtype_size(dt), *phase_, at, at});
    return (Handle)calls_.size();
  }
  size_t ops() const { return meter_ ? meter_->calls().size() : 0; }
  int size_;
  const OpPhase* phase_;
  const MeteredBackend* meter_;
  std::vector<CommCall> calls_;
};

// Host values: reductions leave them as they are (one rank's share stands
// for the sum), gathers repeat this rank's part.
class NullControlComm final : public ControlComm {
 public:
  explicit NullControlComm(int size) : size_(size) {}
  int rank() const override { return 0; }
  int size() const override { return size_; }
  void allreduce_sum(float*, size_t) override {}
  void allreduce_sum(double*, size_t) override {}
  void allreduce_max(float*, size_t) override {}
  void allreduce_max(double*, size_t) override {}
  void allgather(const float* in, float* out, size_t n) override;
  void allgather_bytes(const void* in, void* out, size_t bytes) override;
  void broadcast(void*, size_t, int) override {}
  void barrier() override {}

 private:
  int size_;
};

}  // namespace trainer
