#include "parallel/comm_stats.h"

#include "runtime/elapsed.h"

namespace trainer {

const char* CommCounters::name(int k) {
  static const char* names[] = {"allreduce", "allgather", "reduce_scatter", "p2p", "other"};
  return names[k];
}

namespace {
double ring_allreduce(size_t bytes, int p) { return 2.0 * (p - 1) / p * bytes; }
double ring_gather(size_t full_bytes, int p) { return (double)(p - 1) / p * full_bytes; }
}  // namespace

template <class F>
DataComm::Handle CountingDataComm::timed(CommCounters::Kind kind, double bytes, F&& f) {
  const auto t0 = Clock::now();
  const Handle h = f();
  k_.ms[kind] += ms_since(t0);
  k_.bytes[kind] += c_.size() > 1 ? bytes : 0;
  k_.calls[kind]++;
  kind_of_[h] = kind;
  return h;
}

DataComm::Handle CountingDataComm::start_allreduce(Ref x, size_t n, ReduceOp op) {
  return timed(CommCounters::AllReduce, ring_allreduce(n * dtype_size(x.dt), size()),
               [&] { return c_.start_allreduce(x, n, op); });
}
DataComm::Handle CountingDataComm::start_reduce_scatter(CRef in, Ref out, size_t n) {
  return timed(CommCounters::ReduceScatter, ring_gather(n * dtype_size(in.dt) * size(), size()),
               [&] { return c_.start_reduce_scatter(in, out, n); });
}
DataComm::Handle CountingDataComm::start_allgather(CRef in, Ref out, size_t n) {
  return timed(CommCounters::AllGather, ring_gather(n * dtype_size(in.dt) * size(), size()),
               [&] { return c_.start_allgather(in, out, n); });
}
// Counted with the sends: each rank sends (p - 1) of its p blocks.
DataComm::Handle CountingDataComm::start_alltoall(CRef in, Ref out, size_t n) {
  return timed(CommCounters::P2P, (double)n * dtype_size(in.dt) * (size() - 1),
               [&] { return c_.start_alltoall(in, out, n); });
}
DataComm::Handle CountingDataComm::start_alltoallv(CRef in, const size_t* send_rows, Ref out, const size_t* recv_rows,
                                                   size_t row) {
  size_t to_others = 0;
  for (int j = 0; j < size(); j++)
    if (j != rank()) to_others += send_rows[j];
  return timed(CommCounters::P2P, (double)to_others * row * dtype_size(in.dt),
               [&] { return c_.start_alltoallv(in, send_rows, out, recv_rows, row); });
}
DataComm::Handle CountingDataComm::isend(CRef data, size_t n, int peer, int tag) {
  return timed(CommCounters::P2P, (double)n * dtype_size(data.dt), [&] { return c_.isend(data, n, peer, tag); });
}
DataComm::Handle CountingDataComm::irecv(Ref data, size_t n, int peer, int tag) {
  const Handle h = c_.irecv(data, n, peer, tag);
  kind_of_[h] = CommCounters::P2P;
  return h;
}
void CountingDataComm::wait(Handle h) {
  const auto t0 = Clock::now();
  c_.wait(h);
  const auto it = kind_of_.find(h);
  k_.ms[it != kind_of_.end() ? it->second : CommCounters::Other] += ms_since(t0);
  if (it != kind_of_.end()) kind_of_.erase(it);
}

}  // namespace trainer
