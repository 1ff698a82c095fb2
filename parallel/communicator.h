#pragma once
// The collectives model/ and app/ may use. An MPI implementation exists now;
// an NCCL one slots in behind the same interface for the CUDA backend.
#include <cstddef>
#include <cstdint>
#include <memory>

namespace trainer {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // In-place reductions across the group.
  virtual void allreduce_sum(float* x, size_t n) = 0;
  virtual void allreduce_sum(double* x, size_t n) = 0;
  virtual void allreduce_max(float* x, size_t n) = 0;
  virtual void allreduce_max(double* x, size_t n) = 0;
  // out[size * n] = concatenation of every rank's in[n], in rank order.
  virtual void allgather(const float* in, float* out, size_t n) = 0;
  // The same for raw bytes (small control messages: checkpoint manifest lines).
  virtual void allgather_bytes(const void* in, void* out, size_t bytes) = 0;
  // out[n] = this rank's block of the element-wise sum of every in[size * n].
  virtual void reduce_scatter_sum(const float* in, float* out, size_t n) = 0;
  virtual void broadcast(void* data, size_t bytes, int root) = 0;
  virtual void barrier() = 0;
  // Point-to-point (pipeline stages), non-blocking; wait() completes a
  // request, after which its buffer may be reused.
  using Request = long;
  virtual Request isend(const float* data, size_t n, int peer, int tag) = 0;
  virtual Request irecv(float* data, size_t n, int peer, int tag) = 0;
  virtual void wait(Request r) = 0;
};

}  // namespace trainer
