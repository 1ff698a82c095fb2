#include "parallel/comm_stats.h"

namespace trainer {

const char* CommCounters::name(int k) {
  static const char* names[] = {"allreduce", "allgather", "reduce_scatter", "p2p", "other"};
  return names[k];
}

template <class F>
void CountingCommunicator::timed(CommCounters::Kind kind, double bytes, F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  k_.ms[kind] += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  k_.bytes[kind] += c_.size() > 1 ? bytes : 0;
  k_.calls[kind]++;
}

namespace {
double ring_allreduce(size_t bytes, int p) { return 2.0 * (p - 1) / p * bytes; }
double ring_gather(size_t full_bytes, int p) { return (double)(p - 1) / p * full_bytes; }
}  // namespace

void CountingCommunicator::allreduce_sum(float* x, size_t n) {
  timed(CommCounters::AllReduce, ring_allreduce(n * 4, size()), [&] { c_.allreduce_sum(x, n); });
}
void CountingCommunicator::allreduce_sum(double* x, size_t n) {
  timed(CommCounters::AllReduce, ring_allreduce(n * 8, size()), [&] { c_.allreduce_sum(x, n); });
}
void CountingCommunicator::allreduce_max(float* x, size_t n) {
  timed(CommCounters::AllReduce, ring_allreduce(n * 4, size()), [&] { c_.allreduce_max(x, n); });
}
void CountingCommunicator::allreduce_max(double* x, size_t n) {
  timed(CommCounters::AllReduce, ring_allreduce(n * 8, size()), [&] { c_.allreduce_max(x, n); });
}
void CountingCommunicator::allgather(const float* in, float* out, size_t n) {
  timed(CommCounters::AllGather, ring_gather(n * 4 * size(), size()), [&] { c_.allgather(in, out, n); });
}
void CountingCommunicator::reduce_scatter_sum(const float* in, float* out, size_t n) {
  timed(CommCounters::ReduceScatter, ring_gather(n * 4 * size(), size()),
        [&] { c_.reduce_scatter_sum(in, out, n); });
}
Communicator::Request CountingCommunicator::isend(const float* data, size_t n, int peer, int tag) {
  Request r = 0;
  timed(CommCounters::P2P, (double)n * 4, [&] { r = c_.isend(data, n, peer, tag); });
  return r;
}
Communicator::Request CountingCommunicator::irecv(float* data, size_t n, int peer, int tag) {
  return c_.irecv(data, n, peer, tag);
}
void CountingCommunicator::wait(Request r) {
  const auto t0 = std::chrono::steady_clock::now();
  c_.wait(r);
  k_.ms[CommCounters::P2P] += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

void CountingCommunicator::allgather_bytes(const void* in, void* out, size_t bytes) {
  timed(CommCounters::AllGather, ring_gather(bytes * size(), size()), [&] { c_.allgather_bytes(in, out, bytes); });
}
void CountingCommunicator::broadcast(void* data, size_t bytes, int root) {
  timed(CommCounters::Other, (double)bytes, [&] { c_.broadcast(data, bytes, root); });
}

}  // namespace trainer
