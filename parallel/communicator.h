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

// Each kind's operations, declared once here: the interface declares them
// pure, and an implementation (MPI, NCCL, staged, solo, and the recording and
// counting decorators) declares them all with TRAINER_CONTROL_COMM_OVERRIDES
// or TRAINER_DATA_COMM_OVERRIDES, defining each in its .cpp.
//   allreduce_sum/max  in place, across the group
//   allgather          out[size * n] = every rank's in[n], in rank order
#define TRAINER_CONTROL_COMM_OPERATIONS(DECLARE)                \
  DECLARE(void, allreduce_sum, (float* x, size_t n))            \
  DECLARE(void, allreduce_sum, (double* x, size_t n))           \
  DECLARE(void, allreduce_max, (float* x, size_t n))            \
  DECLARE(void, allreduce_max, (double* x, size_t n))           \
  DECLARE(void, allgather, (const float* in, float* out, size_t n)) \
  DECLARE(void, allgather_bytes, (const void* in, void* out, size_t bytes)) \
  DECLARE(void, broadcast, (void* data, size_t bytes, int root)) \
  DECLARE(void, barrier, ())
//   start_allreduce       in place: x[n] becomes the element-wise op over the group
//   start_reduce_scatter  out[n] = this rank's block of the element-wise sum of every in[size * n]
//   start_allgather       out[size * n] = every rank's in[n], in rank order; in
//                         may be this rank's block of out (in place)
//   start_alltoall        out[j * n .. (j + 1) * n) = rank j's in[rank * n ..), for every
//                         rank j (in and out [size * n]; context parallelism's a2a)
//   start_alltoallv       rows of `row` elements: in holds send_rows[j] rows for each
//                         rank j, out receives recv_rows[j] from each, blocks in rank
//                         order (the counts [size], copied; a Mixture-of-Experts
//                         layer's tokens to their experts and back)
//   isend, irecv          point-to-point (pipeline stages, the context-parallel ring)
//   wait                  completes a started operation
#define TRAINER_DATA_COMM_OPERATIONS(DECLARE)                    \
  DECLARE(Handle, start_allreduce, (Ref x, size_t n, ReduceOp op)) \
  DECLARE(Handle, start_reduce_scatter, (CRef in, Ref out, size_t n)) \
  DECLARE(Handle, start_allgather, (CRef in, Ref out, size_t n)) \
  DECLARE(Handle, start_alltoall, (CRef in, Ref out, size_t n)) \
  DECLARE(Handle, start_alltoallv, (CRef in, const size_t* send_rows, Ref out, const size_t* recv_rows, size_t row)) \
  DECLARE(Handle, isend, (CRef data, size_t n, int peer, int tag)) \
  DECLARE(Handle, irecv, (Ref data, size_t n, int peer, int tag)) \
  DECLARE(void, wait, (Handle h))
#define TRAINER_COMM_PURE_(ret, name, params) virtual ret name params = 0;
#define TRAINER_COMM_OVERRIDE_(ret, name, params) ret name params override;
#define TRAINER_CONTROL_COMM_OVERRIDES TRAINER_CONTROL_COMM_OPERATIONS(TRAINER_COMM_OVERRIDE_)
#define TRAINER_DATA_COMM_OVERRIDES TRAINER_DATA_COMM_OPERATIONS(TRAINER_COMM_OVERRIDE_)

class ControlComm {
 public:
  virtual ~ControlComm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  TRAINER_CONTROL_COMM_OPERATIONS(TRAINER_COMM_PURE_)
};

enum class ReduceOp { Sum, Max };

class DataComm {
 public:
  using Handle = long;
  DataComm() = default;
  virtual ~DataComm() = default;
  // A communicator owns its operations in flight: never copied.
  DataComm(const DataComm&) = delete;
  DataComm& operator=(const DataComm&) = delete;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  TRAINER_DATA_COMM_OPERATIONS(TRAINER_COMM_PURE_)
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
