#include "parallel/staged_communicator.h"

#include <stdexcept>

namespace trainer {

StagedDataComm::StagedDataComm(std::unique_ptr<DataComm> host_comm, Backend& be)
    : inner_(std::move(host_comm)), be_(be) {}

Buffer StagedDataComm::staging(DType dt, size_t n) {
  auto it = pool_.find({dt, n});
  if (it == pool_.end()) return be_.alloc(n, dt, Mem::Comm, Space::Staging);
  Buffer b = std::move(it->second);
  pool_.erase(it);
  return b;
}

void StagedDataComm::give_back(Buffer b) {
  if (b) pool_.emplace(std::make_pair(b.dtype(), b.count()), std::move(b));
}

Buffer StagedDataComm::stage(CRef src, size_t n) {
  Buffer b = staging(src.dt, n);
  if (n) be_.to_host(b.host(), src, n);  // waits for the compute stream: the data is complete
  return b;
}

DataComm::Handle StagedDataComm::keep(Pending p) {
  pending_.emplace(++next_, std::move(p));
  return next_;
}

DataComm::Handle StagedDataComm::start_allreduce(Ref x, size_t n, ReduceOp op) {
  Pending p;
  p.in = stage(x, n);
  p.inner = inner_->start_allreduce(p.in.ref(), n, op);
  p.dst = x, p.n = n;
  p.out = std::move(p.in);
  return keep(std::move(p));
}

DataComm::Handle StagedDataComm::start_reduce_scatter(CRef in, Ref out, size_t n) {
  Pending p;
  p.in = stage(in, n * size());
  p.out = staging(out.dt, n);
  p.inner = inner_->start_reduce_scatter(p.in.ref(), p.out.ref(), n);
  p.dst = out, p.n = n;
  return keep(std::move(p));
}

DataComm::Handle StagedDataComm::start_allgather(CRef in, Ref out, size_t n) {
  Pending p;
  p.in = stage(in, n);
  p.out = staging(out.dt, n * size());
  p.inner = inner_->start_allgather(p.in.ref(), p.out.ref(), n);
  p.dst = out, p.n = n * size();
  return keep(std::move(p));
}

DataComm::Handle StagedDataComm::start_alltoall(CRef in, Ref out, size_t n) {
  Pending p;
  p.in = stage(in, n * size());
  p.out = staging(out.dt, n * size());
  p.inner = inner_->start_alltoall(p.in.ref(), p.out.ref(), n);
  p.dst = out, p.n = n * size();
  return keep(std::move(p));
}

DataComm::Handle StagedDataComm::start_alltoallv(CRef in, const size_t* send_rows, Ref out, const size_t* recv_rows,
                                                 size_t row) {
  size_t sent = 0, received = 0;
  for (int j = 0; j < size(); j++) sent += send_rows[j], received += recv_rows[j];
  Pending p;
  p.in = stage(in, sent * row);
  p.out = staging(out.dt, received * row);
  p.inner = inner_->start_alltoallv(p.in.ref(), send_rows, p.out.ref(), recv_rows, row);
  p.dst = out, p.n = received * row;
  return keep(std::move(p));
}

DataComm::Handle StagedDataComm::isend(CRef data, size_t n, int peer, int tag) {
  Pending p;
  p.in = stage(data, n);
  p.inner = inner_->isend(p.in.ref(), n, peer, tag);
  return keep(std::move(p));
}

DataComm::Handle StagedDataComm::irecv(Ref data, size_t n, int peer, int tag) {
  Pending p;
  p.out = staging(data.dt, n);
  p.inner = inner_->irecv(p.out.ref(), n, peer, tag);
  p.dst = data, p.n = n;
  return keep(std::move(p));
}

void StagedDataComm::wait(Handle h) {
  auto it = pending_.find(h);
  if (it == pending_.end()) throw std::logic_error("StagedDataComm::wait on an unknown handle");
  Pending& p = it->second;
  inner_->wait(p.inner);
  if (p.dst && p.n) be_.from_host(p.dst, p.out.host(), p.n);
  give_back(std::move(p.in));
  give_back(std::move(p.out));
  pending_.erase(it);
}

}  // namespace trainer
