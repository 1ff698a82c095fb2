#include "parallel/recording_communicator.h"

namespace trainer {

RecordingCommunicator::RecordingCommunicator(Communicator& inner, FlightRecorder& rec,
                                             const std::string& name, const std::vector<int>& members)
    : c_(inner), rec_(rec), group_(rec.add_group(name, members)), members_(members) {}

template <class F>
void RecordingCommunicator::record(const char* op, size_t bytes, int peer, F&& f,
                                   FlightRecorder::Kind kind) {
  const uint64_t token = rec_.begin(group_, op, bytes, peer, kind);
  f();
  rec_.end(token);
}

void RecordingCommunicator::allreduce_sum(float* x, size_t n) {
  record("allreduce_sum", n * 4, -1, [&] { c_.allreduce_sum(x, n); });
}
void RecordingCommunicator::allreduce_sum(double* x, size_t n) {
  record("allreduce_sum", n * 8, -1, [&] { c_.allreduce_sum(x, n); });
}
void RecordingCommunicator::allreduce_max(float* x, size_t n) {
  record("allreduce_max", n * 4, -1, [&] { c_.allreduce_max(x, n); });
}
void RecordingCommunicator::allreduce_max(double* x, size_t n) {
  record("allreduce_max", n * 8, -1, [&] { c_.allreduce_max(x, n); });
}
void RecordingCommunicator::allgather(const float* in, float* out, size_t n) {
  record("allgather", n * 4, -1, [&] { c_.allgather(in, out, n); });
}
void RecordingCommunicator::allgather_bytes(const void* in, void* out, size_t bytes) {
  record("allgather_bytes", bytes, -1, [&] { c_.allgather_bytes(in, out, bytes); });
}
void RecordingCommunicator::reduce_scatter_sum(const float* in, float* out, size_t n) {
  record("reduce_scatter_sum", n * 4, -1, [&] { c_.reduce_scatter_sum(in, out, n); });
}
void RecordingCommunicator::broadcast(void* data, size_t bytes, int root) {
  record("broadcast", bytes, members_[root], [&] { c_.broadcast(data, bytes, root); });
}
void RecordingCommunicator::barrier() {
  record("barrier", 0, -1, [&] { c_.barrier(); });
}

// Posting is recorded as done at once; the wait() that completes a request is
// the call that can block, recorded with the posted op's peer and bytes.
Communicator::Request RecordingCommunicator::isend(const float* data, size_t n, int peer, int tag) {
  const Request r = c_.isend(data, n, peer, tag);
  rec_.begin(group_, "isend", n * 4, members_[peer], FlightRecorder::Post);
  posted_[r] = {"wait_send", n * 4, members_[peer]};
  return r;
}
Communicator::Request RecordingCommunicator::irecv(float* data, size_t n, int peer, int tag) {
  const Request r = c_.irecv(data, n, peer, tag);
  rec_.begin(group_, "irecv", n * 4, members_[peer], FlightRecorder::Post);
  posted_[r] = {"wait_recv", n * 4, members_[peer]};
  return r;
}
void RecordingCommunicator::wait(Request r) {
  Posted p{"wait", 0, -1};
  if (auto it = posted_.find(r); it != posted_.end()) {
    p = it->second;
    posted_.erase(it);
  }
  record(p.op, p.bytes, p.peer, [&] { c_.wait(r); }, FlightRecorder::Wait);
}

}  // namespace trainer
