#include "parallel/nccl_communicator.h"

#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>

#include "runtime/cuda/cuda_check.h"

namespace trainer {

namespace {
void nccl_check(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) cuda::fail("NCCL", ncclGetErrorString(r), what, __FILE__, __LINE__);
}
#define NCCL_CHECK(x) nccl_check((x), #x)

ncclDataType_t nccl_type(DType d) {
  return d == DType::BF16 ? ncclBfloat16 : d == DType::I32 ? ncclInt32 : ncclFloat32;
}

// Every live communicator, for abort_all (the watchdog's thread).
std::mutex g_mu;
std::set<ncclComm_t> g_comms;
}  // namespace

ncclUniqueId nccl_unique_id(ControlComm& control) {
  ncclUniqueId id{};
  if (control.rank() == 0) NCCL_CHECK(ncclGetUniqueId(&id));
  control.broadcast(&id, sizeof id, 0);
  return id;
}

NcclDataComm::NcclDataComm(ControlComm& control, CudaBackend& be)
    : be_(be), rank_(control.rank()), size_(control.size()) {
  const ncclUniqueId id = nccl_unique_id(control);
  NCCL_CHECK(ncclCommInitRank(&comm_, size_, id, rank_));
  std::lock_guard<std::mutex> l(g_mu);
  g_comms.insert(comm_);
}

NcclDataComm::~NcclDataComm() {
  {
    std::lock_guard<std::mutex> l(g_mu);
    g_comms.erase(comm_);
  }
  if (comm_) ncclCommDestroy(comm_);
}

void NcclDataComm::abort_all() {
  std::lock_guard<std::mutex> l(g_mu);
  for (ncclComm_t c : g_comms) ncclCommAbort(c);
  g_comms.clear();
}

// The handle is the completion event recorded on the communication stream
// after the operation. Point-to-point posted before it goes first.
template <class F>
DataComm::Handle NcclDataComm::enqueue(F&& issue) {
  issue_p2p();
  be_.wait_event(Backend::kCommStream, be_.record_event(Backend::kComputeStream));
  issue(be_.stream(Backend::kCommStream));
  return (Handle)be_.record_event(Backend::kCommStream).id;
}

DataComm::Handle NcclDataComm::start_allreduce(Ref x, size_t n, ReduceOp op) {
  return enqueue([&](cudaStream_t s) {
    NCCL_CHECK(ncclAllReduce(x.p, x.p, n, nccl_type(x.dt), op == ReduceOp::Max ? ncclMax : ncclSum, comm_, s));
  });
}

DataComm::Handle NcclDataComm::start_reduce_scatter(CRef in, Ref out, size_t n) {
  return enqueue(
      [&](cudaStream_t s) { NCCL_CHECK(ncclReduceScatter(in.p, out.p, n, nccl_type(in.dt), ncclSum, comm_, s)); });
}

DataComm::Handle NcclDataComm::start_allgather(CRef in, Ref out, size_t n) {
  return enqueue([&](cudaStream_t s) { NCCL_CHECK(ncclAllGather(in.p, out.p, n, nccl_type(in.dt), comm_, s)); });
}

// NCCL has no all-to-all: a send and a receive per rank, grouped so that
// NCCL posts them together (ungrouped, every rank's first send would wait
// for a receive not yet posted).
DataComm::Handle NcclDataComm::start_alltoall(CRef in, Ref out, size_t n) {
  const size_t bytes = n * dtype_size(in.dt);
  return enqueue([&](cudaStream_t s) {
    NCCL_CHECK(ncclGroupStart());
    for (int j = 0; j < size(); j++) {
      NCCL_CHECK(ncclSend(static_cast<const char*>(in.p) + j * bytes, n, nccl_type(in.dt), j, comm_, s));
      NCCL_CHECK(ncclRecv(static_cast<char*>(out.p) + j * bytes, n, nccl_type(in.dt), j, comm_, s));
    }
    NCCL_CHECK(ncclGroupEnd());
  });
}

// The same, blocks of their own sizes; ranks with nothing to exchange skipped.
DataComm::Handle NcclDataComm::start_alltoallv(CRef in, const size_t* send_rows, Ref out, const size_t* recv_rows,
                                               size_t row) {
  const size_t row_bytes = row * dtype_size(in.dt);
  const std::vector<size_t> send(send_rows, send_rows + size()), recv(recv_rows, recv_rows + size());
  return enqueue([&](cudaStream_t s) {
    size_t send_at = 0, recv_at = 0;
    NCCL_CHECK(ncclGroupStart());
    for (int j = 0; j < size(); j++) {
      if (send[j])
        NCCL_CHECK(ncclSend(static_cast<const char*>(in.p) + send_at * row_bytes, send[j] * row, nccl_type(in.dt), j,
                            comm_, s));
      if (recv[j])
        NCCL_CHECK(ncclRecv(static_cast<char*>(out.p) + recv_at * row_bytes, recv[j] * row, nccl_type(in.dt), j,
                            comm_, s));
      send_at += send[j], recv_at += recv[j];
    }
    NCCL_CHECK(ncclGroupEnd());
  });
}

DataComm::Handle NcclDataComm::post(const P2p& op) {
  P2p p = op;
  p.handle = next_p2p_++;
  p2p_ready_ = be_.record_event(Backend::kComputeStream);  // the data as the caller left it
  pending_.push_back(p);
  return p.handle;
}

DataComm::Handle NcclDataComm::isend(CRef data, size_t n, int peer, int) {
  return post({true, const_cast<void*>(data.p), n, data.dt, peer, 0});
}

DataComm::Handle NcclDataComm::irecv(Ref data, size_t n, int peer, int) {
  return post({false, data.p, n, data.dt, peer, 0});
}

void NcclDataComm::issue_p2p() {
  if (pending_.empty()) return;
  be_.wait_event(Backend::kCommStream, p2p_ready_);
  const cudaStream_t s = be_.stream(Backend::kCommStream);
  NCCL_CHECK(ncclGroupStart());
  for (const P2p& p : pending_)
    if (p.send) NCCL_CHECK(ncclSend(p.buf, p.n, nccl_type(p.dt), p.peer, comm_, s));
    else NCCL_CHECK(ncclRecv(p.buf, p.n, nccl_type(p.dt), p.peer, comm_, s));
  NCCL_CHECK(ncclGroupEnd());
  const uint64_t done = be_.record_event(Backend::kCommStream).id;
  for (const P2p& p : pending_) p2p_[p.handle] = done;
  pending_.clear();
}

uint64_t NcclDataComm::done_event(Handle h) {
  if (h < kP2pBase) return (uint64_t)h;
  issue_p2p();
  const auto it = p2p_.find(h);
  if (it == p2p_.end()) throw std::logic_error("NCCL data communicator: wait on an unknown point-to-point handle");
  return it->second;
}

bool NcclDataComm::test(Handle h) {
  return be_.event_done(Backend::Event{Backend::kCommStream, done_event(h)});
}

// Polls the completion event (yielding) rather than blocking in the driver,
// so a hang is one in-flight flight-recorder entry, and checks NCCL's own
// asynchronous error state meanwhile (a failed peer shows up there).
void NcclDataComm::wait(Handle h) {
  const Backend::Event done{Backend::kCommStream, done_event(h)};
  if (h >= kP2pBase) p2p_.erase(h);
  while (!be_.event_done(done)) {
    ncclResult_t async = ncclSuccess;
    NCCL_CHECK(ncclCommGetAsyncError(comm_, &async));
    NCCL_CHECK(async);
    std::this_thread::yield();
  }
  be_.wait_event(Backend::kComputeStream, done);
}

}  // namespace trainer
