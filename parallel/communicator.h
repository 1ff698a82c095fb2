#pragma once
// Two kinds of communicator, as a GPU run needs them:
//
// ControlComm carries host values: the loss, flags, timings, checkpoint
// agreement, manifest lines, the gradient-norm partial sums. Always MPI (a
// GPU collective library cannot carry host memory).
//
// DataComm carries backend buffers (activations, gradients) of any element
// type: all-reduce, reduce-scatter, all-gather, send/receive. Every call
// starts the operation and returns a Handle; wait() completes it, after
// which its buffers may be reused. On a GPU the operation is queued on the
// communication stream and the host goes on; the MPI one here runs on host
// memory. The blocking forms are start + wait.
#include <cstddef>
#include <cstdint>

#include "runtime/tensor_ref.h"

namespace trainer {

class ControlComm {
 public:
  virtual ~ControlComm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // In-place reductions across the group.
  virtual void allreduce_sum(float* x, size_t n) = 0;
  virtual void allreduce_sum(double* x, size_t n) = 0;
  virtual void allreduce_max(float* x, size_t n) = 0;
  virtual void allreduce_max(double* x, size_t n) = 0;
  // out[size * n] = concatenation of every rank's in[n], in rank order.
  virtual void allgather(const float* in, float* out, size_t n) = 0;
  virtual void allgather_bytes(const void* in, void* out, size_t bytes) = 0;
  virtual void broadcast(void* data, size_t bytes, int root) = 0;
  virtual void barrier() = 0;
};

enum class ReduceOp { Sum, Max };

class DataComm {
 public:
  using Handle = long;
  virtual ~DataComm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // In place: x[n] becomes the element-wise op over the group.
  virtual Handle start_allreduce(Ref x, size_t n, ReduceOp op) = 0;
  // out[n] = this rank's block of the element-wise sum of every in[size * n].
  virtual Handle start_reduce_scatter(CRef in, Ref out, size_t n) = 0;
  // out[size * n] = every rank's in[n], in rank order.
  virtual Handle start_allgather(CRef in, Ref out, size_t n) = 0;
  // Point-to-point (pipeline stages).
  virtual Handle isend(CRef data, size_t n, int peer, int tag) = 0;
  virtual Handle irecv(Ref data, size_t n, int peer, int tag) = 0;
  virtual void wait(Handle h) = 0;
  // Whether h has completed, without blocking; it drives the transfer on
  // (MPI progresses non-blocking collectives only inside MPI calls). A
  // completed handle still takes its wait(). Default: unknown, false.
  virtual bool test(Handle) { return false; }

  void allreduce_sum(Ref x, size_t n) { wait(start_allreduce(x, n, ReduceOp::Sum)); }
  void allreduce_max(Ref x, size_t n) { wait(start_allreduce(x, n, ReduceOp::Max)); }
  void reduce_scatter_sum(CRef in, Ref out, size_t n) { wait(start_reduce_scatter(in, out, n)); }
  void allgather(CRef in, Ref out, size_t n) { wait(start_allgather(in, out, n)); }
};

}  // namespace trainer
