#pragma once
// Both communicator kinds over MPI communicators they do not own. The data
// communicator works on host memory (the CPU backend's); bf16 travels as
// 16-bit words, reduced by summing in fp32 and rounding once per pair, as
// a GPU library does.
#include <mpi.h>

#include <map>
#include <vector>

#include "parallel/communicator.h"

namespace trainer {

class MpiControlComm final : public ControlComm {
 public:
  explicit MpiControlComm(MPI_Comm comm);
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  TRAINER_CONTROL_COMM_OVERRIDES
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
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  TRAINER_DATA_COMM_OVERRIDES
  bool test(Handle h) override;

 private:
  Handle keep(MPI_Request r);
  bool single_rank_copy(CRef in, Ref out, size_t n, const char* what);
  std::vector<MPI_Request> requests_;  // indexed by Handle; reused when completed
  // An all-to-all-v's counts and displacements (in rows), kept until its wait.
  std::map<Handle, std::vector<int>> alltoallv_args_;
  std::vector<Handle> free_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
};

}  // namespace trainer
