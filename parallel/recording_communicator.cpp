#include "parallel/recording_communicator.h"

namespace trainer {

RecordingControlComm::RecordingControlComm(ControlComm& inner, FlightRecorder& rec, int group,
                                           const std::vector<int>& members)
    : c_(inner), rec_(rec), group_(group), members_(members) {}

template <class F>
void RecordingControlComm::record(const char* op, size_t bytes, int peer, F&& f) {
  const uint64_t token = rec_.begin(group_, op, bytes, peer);
  f();
  rec_.end(token);
}

void RecordingControlComm::allreduce_sum(float* x, size_t n) {
  record("allreduce_sum", n * 4, -1, [&] { c_.allreduce_sum(x, n); });
}
void RecordingControlComm::allreduce_sum(double* x, size_t n) {
  record("allreduce_sum", n * 8, -1, [&] { c_.allreduce_sum(x, n); });
}
void RecordingControlComm::allreduce_max(float* x, size_t n) {
  record("allreduce_max", n * 4, -1, [&] { c_.allreduce_max(x, n); });
}
void RecordingControlComm::allreduce_max(double* x, size_t n) {
  record("allreduce_max", n * 8, -1, [&] { c_.allreduce_max(x, n); });
}
void RecordingControlComm::allgather(const float* in, float* out, size_t n) {
  record("allgather", n * 4, -1, [&] { c_.allgather(in, out, n); });
}
void RecordingControlComm::allgather_bytes(const void* in, void* out, size_t bytes) {
  record("allgather_bytes", bytes, -1, [&] { c_.allgather_bytes(in, out, bytes); });
}
void RecordingControlComm::broadcast(void* data, size_t bytes, int root) {
  record("broadcast", bytes, members_[root], [&] { c_.broadcast(data, bytes, root); });
}
void RecordingControlComm::barrier() {
  record("barrier", 0, -1, [&] { c_.barrier(); });
}

RecordingDataComm::RecordingDataComm(DataComm& inner, FlightRecorder& rec, int group,
                                     const std::vector<int>& members)
    : c_(inner), rec_(rec), group_(group), members_(members) {}

template <class F>
DataComm::Handle RecordingDataComm::enqueue(const char* op, size_t bytes, F&& f) {
  const uint64_t token = rec_.begin(group_, op, bytes, -1, FlightRecorder::Enqueued);
  const Handle h = f();
  pending_[h] = {token, op, bytes, -1};
  return h;
}

DataComm::Handle RecordingDataComm::start_allreduce(Ref x, size_t n, ReduceOp op) {
  return enqueue(op == ReduceOp::Sum ? "allreduce_sum" : "allreduce_max", n * dtype_size(x.dt),
                 [&] { return c_.start_allreduce(x, n, op); });
}
DataComm::Handle RecordingDataComm::start_reduce_scatter(CRef in, Ref out, size_t n) {
  return enqueue("reduce_scatter_sum", n * dtype_size(in.dt), [&] { return c_.start_reduce_scatter(in, out, n); });
}
DataComm::Handle RecordingDataComm::start_allgather(CRef in, Ref out, size_t n) {
  return enqueue("allgather", n * dtype_size(in.dt), [&] { return c_.start_allgather(in, out, n); });
}

DataComm::Handle RecordingDataComm::posted(Handle h, const char* op, const char* wait_op, size_t bytes, int peer) {
  rec_.begin(group_, op, bytes, members_[peer], FlightRecorder::Post);
  pending_[h] = {0, wait_op, bytes, members_[peer]};
  return h;
}
DataComm::Handle RecordingDataComm::start_alltoall(CRef in, Ref out, size_t n) {
  return enqueue("alltoall", n * size() * dtype_size(in.dt), [&] { return c_.start_alltoall(in, out, n); });
}

// Recorded as one row's bytes: what every rank of the group passes alike
// (each sends its own count of rows), so that a diagnosis comparing the
// ranks' calls sees the same collective.
DataComm::Handle RecordingDataComm::start_alltoallv(CRef in, const size_t* send_rows, Ref out, const size_t* recv_rows,
                                                    size_t row) {
  return enqueue("alltoallv", row * dtype_size(in.dt),
                 [&] { return c_.start_alltoallv(in, send_rows, out, recv_rows, row); });
}

DataComm::Handle RecordingDataComm::isend(CRef data, size_t n, int peer, int tag) {
  return posted(c_.isend(data, n, peer, tag), "isend", "wait_send", n * dtype_size(data.dt), peer);
}
DataComm::Handle RecordingDataComm::irecv(Ref data, size_t n, int peer, int tag) {
  return posted(c_.irecv(data, n, peer, tag), "irecv", "wait_recv", n * dtype_size(data.dt), peer);
}

void RecordingDataComm::wait(Handle h) {
  Pending p{0, "wait", 0, -1};
  if (auto it = pending_.find(h); it != pending_.end()) {
    p = it->second;
    pending_.erase(it);
  }
  if (p.token) {  // a collective: its entry ends when it completes
    c_.wait(h);
    rec_.end(p.token);
    return;
  }
  const uint64_t token = rec_.begin(group_, p.op, p.bytes, p.peer, FlightRecorder::Wait);
  c_.wait(h);
  rec_.end(token);
}

}  // namespace trainer
