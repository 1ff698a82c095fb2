#pragma once
// A data communicator for backend buffers that MPI cannot read directly (GPU
// memory where NCCL cannot be used: several ranks on one GPU). Each
// operation copies its input into pinned host staging, runs the MPI data
// communicator on the staged copy, and wait() copies the result back. Works
// for any backend (on the CPU backend the copies are memcpy), so it is tested
// without a GPU.
#include <map>
#include <memory>
#include <vector>

#include "parallel/communicator.h"
#include "runtime/backend.h"

namespace trainer {

class StagedDataComm final : public DataComm {
 public:
  StagedDataComm(std::unique_ptr<DataComm> host_comm, Backend& be);
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  TRAINER_DATA_COMM_OVERRIDES

 private:
  struct Pending {
    Handle inner;
    Buffer in, out;   // staging; `out` is copied to `dst` at wait (empty for sends)
    Ref dst;
    size_t n = 0;
  };
  Buffer stage(CRef src, size_t n);  // a staged host copy of src[n]
  // Pinned allocations are slow: buffers return to a pool by (type, count)
  // when their operation completes (steps repeat the same sizes).
  Buffer staging(DType dt, size_t n);
  void give_back(Buffer b);
  Handle keep(Pending p);

  std::unique_ptr<DataComm> inner_;
  Backend& be_;
  std::map<Handle, Pending> pending_;
  std::multimap<std::pair<DType, size_t>, Buffer> pool_;
  Handle next_ = 0;
};

}  // namespace trainer
