#pragma once
// The data communicator of a group of one rank (dp 1, tp 1, the embedding
// group of a run without pipeline stages, ...): every collective is the
// identity, done as a device copy where it has distinct input and output,
// and nothing is bootstrapped. On GPUs a single-GPU run otherwise created an
// NCCL communicator per group, each a socket bootstrap and proxy threads.
// Point-to-point has no peer in a group of one and is refused.
#include "parallel/communicator.h"
#include "runtime/backend.h"

namespace trainer {

class SoloDataComm final : public DataComm {
 public:
  explicit SoloDataComm(Backend& be) : be_(be) {}
  int rank() const override { return 0; }
  int size() const override { return 1; }
  TRAINER_DATA_COMM_OVERRIDES
  bool test(Handle) override { return true; }

 private:
  Handle copy(CRef in, Ref out, size_t n);
  Backend& be_;
};

// Which data communicator a group gets on GPUs: none to speak of for a
// group of one; the staged MPI path where ranks share a GPU (NCCL refuses
// that) and for the pipeline group (its messages are told apart by tag,
// which NCCL's point-to-point does not carry); NCCL otherwise.
enum class GpuDataComm { Solo, StagedMpi, Nccl };
GpuDataComm gpu_data_comm(int group_size, bool pipeline_group, bool ranks_share_gpu);

}  // namespace trainer
