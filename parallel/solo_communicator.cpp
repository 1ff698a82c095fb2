#include "parallel/solo_communicator.h"

#include <stdexcept>

namespace trainer {

DataComm::Handle SoloDataComm::copy(CRef in, Ref out, size_t n) {
  if (in.p != out.p) be_.copy(out, in, n);
  return 0;
}

DataComm::Handle SoloDataComm::start_allreduce(Ref, size_t, ReduceOp) { return 0; }
DataComm::Handle SoloDataComm::start_reduce_scatter(CRef in, Ref out, size_t n) { return copy(in, out, n); }
DataComm::Handle SoloDataComm::start_allgather(CRef in, Ref out, size_t n) { return copy(in, out, n); }
DataComm::Handle SoloDataComm::start_alltoall(CRef in, Ref out, size_t n) { return copy(in, out, n); }
DataComm::Handle SoloDataComm::start_alltoallv(CRef in, const size_t* send_rows, Ref out, const size_t*, size_t row) {
  return copy(in, out, send_rows[0] * row);
}

DataComm::Handle SoloDataComm::isend(CRef, size_t, int peer, int) {
  throw std::logic_error("send to rank " + std::to_string(peer) + " in a group of one rank");
}
DataComm::Handle SoloDataComm::irecv(Ref, size_t, int peer, int) {
  throw std::logic_error("receive from rank " + std::to_string(peer) + " in a group of one rank");
}

void SoloDataComm::wait(Handle) {}

GpuDataComm gpu_data_comm(int group_size, bool pipeline_group, bool ranks_share_gpu) {
  if (group_size == 1) return GpuDataComm::Solo;
  if (ranks_share_gpu || pipeline_group) return GpuDataComm::StagedMpi;
  return GpuDataComm::Nccl;
}

}  // namespace trainer
