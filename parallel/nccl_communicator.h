#pragma once
// The data communicator on GPUs: NCCL, one communicator per process group,
// bootstrapped by broadcasting rank 0's unique id over the group's MPI
// control communicator. Operations are queued on the backend's
// communication stream after an event recorded on the compute stream (so
// they read finished data) and overlap later compute; wait() polls the
// operation's completion event from the host, so a collective that never
// completes keeps its flight-recorder entry in flight and the watchdog sees
// it, then makes the compute stream wait for it.
// Point-to-point is refused: NCCL matches sends and receives by order per
// peer, not by tag, and ungrouped sends deadlock when both peers send first;
// the pipeline group uses the staged MPI communicator instead
// (parallel/staged_communicator.h), where tags keep messages apart. Groups
// of one rank get no NCCL communicator (parallel/solo_communicator.h).
#include <nccl.h>

#include "parallel/communicator.h"
#include "runtime/cuda/cuda_backend.h"

namespace trainer {

// Rank 0's ncclUniqueId, broadcast over `control` (collective over it).
// Needs no GPU, only NCCL's bootstrap network (tests run it in CI).
ncclUniqueId nccl_unique_id(ControlComm& control);

class NcclDataComm final : public DataComm {
 public:
  // Collective over `control`'s group.
  NcclDataComm(ControlComm& control, CudaBackend& be);
  ~NcclDataComm() override;
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  TRAINER_DATA_COMM_OVERRIDES
  // Ends every NCCL operation of this process at once (the watchdog calls it
  // before exiting, so no kernel waits forever on a dead peer).
  static void abort_all();

 private:
  template <class F>
  Handle enqueue(F&& issue);

  CudaBackend& be_;
  ncclComm_t comm_ = nullptr;
  int rank_ = 0, size_ = 1;
};

}  // namespace trainer
