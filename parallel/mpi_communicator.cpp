#include "parallel/mpi_communicator.h"

#include <algorithm>
#include <climits>
#include <stdexcept>

namespace trainer {

namespace {
// MPI counts are int: split large buffers into chunks.
constexpr size_t kMaxChunk = INT_MAX / 2;

template <typename T>
void allreduce_chunks(T* x, size_t n, MPI_Datatype type, MPI_Op op, MPI_Comm comm) {
  for (size_t off = 0; off < n; off += kMaxChunk) {
    const int cnt = (int)std::min(kMaxChunk, n - off);
    MPI_Allreduce(MPI_IN_PLACE, x + off, cnt, type, op, comm);
  }
}
}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm comm) : comm_(comm) {
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
}

void MpiCommunicator::allreduce_sum(float* x, size_t n) {
  if (size_ > 1) allreduce_chunks(x, n, MPI_FLOAT, MPI_SUM, comm_);
}
void MpiCommunicator::allreduce_sum(double* x, size_t n) {
  if (size_ > 1) allreduce_chunks(x, n, MPI_DOUBLE, MPI_SUM, comm_);
}
void MpiCommunicator::allreduce_max(float* x, size_t n) {
  if (size_ > 1) allreduce_chunks(x, n, MPI_FLOAT, MPI_MAX, comm_);
}
void MpiCommunicator::allgather(const float* in, float* out, size_t n) {
  if (size_ == 1) {
    if (out != in) std::copy(in, in + n, out);
    return;
  }
  if (n > kMaxChunk) throw std::length_error("allgather: block too large for one MPI call");
  MPI_Allgather(in, (int)n, MPI_FLOAT, out, (int)n, MPI_FLOAT, comm_);
}
void MpiCommunicator::allgather_bytes(const void* in, void* out, size_t bytes) {
  if (size_ == 1) {
    if (out != in) std::copy_n(static_cast<const char*>(in), bytes, static_cast<char*>(out));
    return;
  }
  if (bytes > kMaxChunk) throw std::length_error("allgather_bytes: block too large for one MPI call");
  MPI_Allgather(in, (int)bytes, MPI_BYTE, out, (int)bytes, MPI_BYTE, comm_);
}
void MpiCommunicator::reduce_scatter_sum(const float* in, float* out, size_t n) {
  if (size_ == 1) {
    if (out != in) std::copy(in, in + n, out);
    return;
  }
  if (n > kMaxChunk) throw std::length_error("reduce_scatter: block too large for one MPI call");
  MPI_Reduce_scatter_block(in, out, (int)n, MPI_FLOAT, MPI_SUM, comm_);
}
void MpiCommunicator::allreduce_max(double* x, size_t n) {
  if (size_ > 1) allreduce_chunks(x, n, MPI_DOUBLE, MPI_MAX, comm_);
}
void MpiCommunicator::broadcast(void* data, size_t bytes, int root) {
  if (size_ <= 1) return;
  auto* p = static_cast<char*>(data);
  for (size_t off = 0; off < bytes; off += kMaxChunk)
    MPI_Bcast(p + off, (int)std::min(kMaxChunk, bytes - off), MPI_BYTE, root, comm_);
}
void MpiCommunicator::barrier() { MPI_Barrier(comm_); }

Communicator::Request MpiCommunicator::keep(MPI_Request r) {
  if (!free_.empty()) {
    const Request id = free_.back();
    free_.pop_back();
    requests_[id] = r;
    return id;
  }
  requests_.push_back(r);
  return (Request)requests_.size() - 1;
}

Communicator::Request MpiCommunicator::isend(const float* data, size_t n, int peer, int tag) {
  if (n > kMaxChunk) throw std::length_error("isend: message too large for one MPI call");
  MPI_Request r;
  MPI_Isend(data, (int)n, MPI_FLOAT, peer, tag, comm_, &r);
  return keep(r);
}

Communicator::Request MpiCommunicator::irecv(float* data, size_t n, int peer, int tag) {
  if (n > kMaxChunk) throw std::length_error("irecv: message too large for one MPI call");
  MPI_Request r;
  MPI_Irecv(data, (int)n, MPI_FLOAT, peer, tag, comm_, &r);
  return keep(r);
}

void MpiCommunicator::wait(Request id) {
  MPI_Wait(&requests_[id], MPI_STATUS_IGNORE);
  free_.push_back(id);
}

}  // namespace trainer
