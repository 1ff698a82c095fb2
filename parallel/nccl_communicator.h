#pragma once
// The data communicator on GPUs: NCCL, one communicator per process group,
// bootstrapped by broadcasting rank 0's unique id over the group's MPI
// control communicator. Operations are queued on the backend's
// communication stream after an event recorded on the compute stream (so
// they read finished data) and overlap later compute; wait() polls the
// operation's completion event from the host, so a collective that never
// completes keeps its flight-recorder entry in flight and the watchdog sees
// it, then makes the compute stream wait for it.
// Point-to-point (the context-parallel ring): NCCL matches sends and
// receives per peer by order, not by tag, and a send issued alone waits for
// its receive, so two ranks that both send first deadlock. isend and irecv
// are therefore held and issued together, in posting order, inside one
// ncclGroupStart/End at the next call that needs them (a wait or test, or
// any other operation), after the compute stream as it was when the last of
// them was posted. Tags are ignored: the pipeline group, which needs them,
// uses the staged MPI communicator (parallel/staged_communicator.h). Groups
// of one rank get no NCCL communicator (parallel/solo_communicator.h).
#include <nccl.h>

#include <map>
#include <vector>

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
  bool test(Handle h) override;
  // Ends every NCCL operation of this process at once (the watchdog calls it
  // before exiting, so no kernel waits forever on a dead peer).
  static void abort_all();

 private:
  template <class F>
  Handle enqueue(F&& issue);
  // Point-to-point operations posted and not yet issued.
  struct P2p {
    bool send;
    void* buf;
    size_t n;
    DType dt;
    int peer;
    Handle handle;
  };
  Handle post(const P2p& op);
  void issue_p2p();  // the pending ones, in one NCCL group
  uint64_t done_event(Handle h);  // a handle's completion event (a p2p handle issued first)

  // p2p handles lie above the event ids that name the other operations.
  static constexpr Handle kP2pBase = Handle(1) << 62;
  std::vector<P2p> pending_;
  Backend::Event p2p_ready_{};       // the compute stream when the last pending one was posted
  std::map<Handle, uint64_t> p2p_;   // issued p2p handle -> its group's completion event
  Handle next_p2p_ = kP2pBase;

  CudaBackend& be_;
  ncclComm_t comm_ = nullptr;
  int rank_ = 0, size_ = 1;
};

}  // namespace trainer
