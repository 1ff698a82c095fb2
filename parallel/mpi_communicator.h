#pragma once
// Both communicator kinds over MPI communicators they do not own. The data
// communicator works on host memory (the CPU backend's); bf16 travels as
// 16-bit words, reduced by summing in fp32 and rounding once per pair, as
// a GPU library does.
#include <mpi.h>

#include <vector>

#include "parallel/communicator.h"

namespace trainer {

class MpiControlComm final : public ControlComm {
 public:
  explicit MpiControlComm(MPI_Comm comm);
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void allreduce_sum(float* x, size_t n) override;
  void allreduce_sum(double* x, size_t n) override;
  void allreduce_max(float* x, size_t n) override;
  void allreduce_max(double* x, size_t n) override;
  void allgather(const float* in, float* out, size_t n) override;
  void allgather_bytes(const void* in, void* out, size_t bytes) override;
  void broadcast(void* data, size_t bytes, int root) override;
  void barrier() override;
  MPI_Comm comm() const { return comm_; }

 private:
  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
};

class MpiDataComm final : public DataComm {
 public:
  // Duplicates comm, so its traffic never matches the control communicator's.
  explicit MpiDataComm(MPI_Comm comm);
  ~MpiDataComm() override;
  MpiDataComm(const MpiDataComm&) = delete;
  MpiDataComm& operator=(const MpiDataComm&) = delete;
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Handle start_allreduce(Ref x, size_t n, ReduceOp op) override;
  Handle start_reduce_scatter(CRef in, Ref out, size_t n) override;
  Handle start_allgather(CRef in, Ref out, size_t n) override;
  Handle isend(CRef data, size_t n, int peer, int tag) override;
  Handle irecv(Ref data, size_t n, int peer, int tag) override;
  void wait(Handle h) override;
  bool test(Handle h) override;

 private:
  Handle keep(MPI_Request r);
  bool single_rank_copy(CRef in, Ref out, size_t n, const char* what);
  std::vector<MPI_Request> requests_;  // indexed by Handle; reused when completed
  std::vector<Handle> free_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
};

}  // namespace trainer
