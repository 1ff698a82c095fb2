#pragma once
#include <mpi.h>

#include <vector>

#include "parallel/communicator.h"

namespace trainer {

// Communicator over an MPI communicator it does not own.
class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(MPI_Comm comm);
  int rank() const override { return rank_; }
  int size() const override { return size_; }
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
  MPI_Comm comm() const { return comm_; }

 private:
  Request keep(MPI_Request r);
  std::vector<MPI_Request> requests_;  // indexed by Request; reused when completed
  std::vector<Request> free_;
  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
};

}  // namespace trainer
