#include "parallel/mpi_communicator.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <stdexcept>

namespace trainer {

namespace {
// MPI counts are int: split large reductions into chunks; one call's block
// beyond that is refused.
constexpr size_t kMaxChunk = INT_MAX / 2;

template <typename T>
void allreduce_chunks(T* x, size_t n, MPI_Datatype type, MPI_Op op, MPI_Comm comm) {
  for (size_t off = 0; off < n; off += kMaxChunk) {
    const int cnt = (int)std::min(kMaxChunk, n - off);
    MPI_Allreduce(MPI_IN_PLACE, x + off, cnt, type, op, comm);
  }
}

int count_of(size_t n, const char* what) {
  if (n > kMaxChunk) throw std::length_error(std::string(what) + ": block too large for one MPI call");
  return (int)n;
}

// bf16 reductions: MPI has no bf16, so the words go as MPI_UINT16_T with
// these operations (fp32 arithmetic, one rounding per pair).
void bf16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  const bf16* a = static_cast<const bf16*>(in);
  bf16* b = static_cast<bf16*>(inout);
  for (int i = 0; i < *len; i++) b[i] = to_bf16(from_bf16(a[i]) + from_bf16(b[i]));
}
void bf16_max(void* in, void* inout, int* len, MPI_Datatype*) {
  const bf16* a = static_cast<const bf16*>(in);
  bf16* b = static_cast<bf16*>(inout);
  for (int i = 0; i < *len; i++) b[i] = to_bf16(std::max(from_bf16(a[i]), from_bf16(b[i])));
}

MPI_Datatype mpi_type(DType d) {
  return d == DType::F32 ? MPI_FLOAT : d == DType::BF16 ? MPI_UINT16_T : MPI_INT32_T;
}

MPI_Op mpi_op(DType d, ReduceOp op) {
  if (d != DType::BF16) return op == ReduceOp::Sum ? MPI_SUM : MPI_MAX;
  static MPI_Op sum = MPI_OP_NULL, max = MPI_OP_NULL;  // created once, on first use (main thread)
  if (sum == MPI_OP_NULL) {
    MPI_Op_create(bf16_sum, 1, &sum);
    MPI_Op_create(bf16_max, 1, &max);
  }
  return op == ReduceOp::Sum ? sum : max;
}
}  // namespace

MpiControlComm::MpiControlComm(MPI_Comm comm) : comm_(comm) {
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
}

void MpiControlComm::allreduce_sum(float* x, size_t n) {
  if (size_ > 1) allreduce_chunks(x, n, MPI_FLOAT, MPI_SUM, comm_);
}
void MpiControlComm::allreduce_sum(double* x, size_t n) {
  if (size_ > 1) allreduce_chunks(x, n, MPI_DOUBLE, MPI_SUM, comm_);
}
void MpiControlComm::allreduce_max(float* x, size_t n) {
  if (size_ > 1) allreduce_chunks(x, n, MPI_FLOAT, MPI_MAX, comm_);
}
void MpiControlComm::allreduce_max(double* x, size_t n) {
  if (size_ > 1) allreduce_chunks(x, n, MPI_DOUBLE, MPI_MAX, comm_);
}
void MpiControlComm::allgather(const float* in, float* out, size_t n) {
  allgather_bytes(in, out, n * sizeof(float));
}
void MpiControlComm::allgather_bytes(const void* in, void* out, size_t bytes) {
  if (size_ == 1) {
    if (out != in) std::memmove(out, in, bytes);
    return;
  }
  const int cnt = count_of(bytes, "allgather");
  MPI_Allgather(in, cnt, MPI_BYTE, out, cnt, MPI_BYTE, comm_);
}
void MpiControlComm::broadcast(void* data, size_t bytes, int root) {
  if (size_ <= 1) return;
  auto* p = static_cast<char*>(data);
  for (size_t off = 0; off < bytes; off += kMaxChunk)
    MPI_Bcast(p + off, (int)std::min(kMaxChunk, bytes - off), MPI_BYTE, root, comm_);
}
void MpiControlComm::barrier() { MPI_Barrier(comm_); }

MpiDataComm::MpiDataComm(MPI_Comm comm) {
  MPI_Comm_dup(comm, &comm_);
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
}

MpiDataComm::~MpiDataComm() {
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

DataComm::Handle MpiDataComm::keep(MPI_Request r) {
  if (!free_.empty()) {
    const Handle id = free_.back();
    free_.pop_back();
    requests_[id] = r;
    return id;
  }
  requests_.push_back(r);
  return (Handle)requests_.size() - 1;
}

// One rank: nothing to reduce (all-reduce), or a copy (reduce-scatter,
// all-gather); MPI_REQUEST_NULL completes at once. MPI buffers are host
// memory here, as the CPU backend's are.
DataComm::Handle MpiDataComm::start_allreduce(Ref x, size_t n, ReduceOp op) {
  MPI_Request r = MPI_REQUEST_NULL;
  if (size_ > 1 && n > 0)
    MPI_Iallreduce(MPI_IN_PLACE, x.p, count_of(n, "allreduce"), mpi_type(x.dt), mpi_op(x.dt, op), comm_, &r);
  return keep(r);
}

// With one rank, this rank's block is the whole result: a copy.
bool MpiDataComm::single_rank_copy(CRef in, Ref out, size_t n, const char* what) {
  if (in.dt != out.dt) throw std::logic_error(std::string(what) + " between element types");
  if (size_ > 1) return false;
  if (out.p != in.p) std::memmove(out.p, in.p, n * dtype_size(in.dt));
  return true;
}

DataComm::Handle MpiDataComm::start_reduce_scatter(CRef in, Ref out, size_t n) {
  MPI_Request r = MPI_REQUEST_NULL;
  if (!single_rank_copy(in, out, n, "reduce_scatter"))
    MPI_Ireduce_scatter_block(in.p, out.p, count_of(n, "reduce_scatter"), mpi_type(in.dt),
                              mpi_op(in.dt, ReduceOp::Sum), comm_, &r);
  return keep(r);
}

DataComm::Handle MpiDataComm::start_allgather(CRef in, Ref out, size_t n) {
  MPI_Request r = MPI_REQUEST_NULL;
  // In place: this rank's block already sits in out (MPI forbids passing it
  // as the input too).
  const bool in_place = in.p == static_cast<const char*>(out.p) + (size_t)rank_ * n * dtype_size(in.dt);
  if (!single_rank_copy(in, out, n, "allgather"))
    MPI_Iallgather(in_place ? MPI_IN_PLACE : in.p, count_of(n, "allgather"), mpi_type(in.dt), out.p,
                   count_of(n, "allgather"), mpi_type(in.dt), comm_, &r);
  return keep(r);
}

DataComm::Handle MpiDataComm::start_alltoall(CRef in, Ref out, size_t n) {
  MPI_Request r = MPI_REQUEST_NULL;
  if (!single_rank_copy(in, out, n, "alltoall"))
    MPI_Ialltoall(in.p, count_of(n, "alltoall"), mpi_type(in.dt), out.p, count_of(n, "alltoall"), mpi_type(in.dt),
                  comm_, &r);
  return keep(r);
}

// Rows travel as one MPI type of `row` elements, so that counts and
// displacements count rows (int, as MPI's are).
DataComm::Handle MpiDataComm::start_alltoallv(CRef in, const size_t* send_rows, Ref out, const size_t* recv_rows,
                                              size_t row) {
  if (in.dt != out.dt) throw std::logic_error("alltoallv between element types");
  std::vector<int> args(4 * (size_t)size_);  // send counts, send displacements, receive counts, receive displacements
  size_t send_at = 0, recv_at = 0;
  for (int j = 0; j < size_; j++) {
    args[j] = count_of(send_rows[j], "alltoallv"), args[size_ + j] = count_of(send_at, "alltoallv");
    args[2 * size_ + j] = count_of(recv_rows[j], "alltoallv"), args[3 * size_ + j] = count_of(recv_at, "alltoallv");
    send_at += send_rows[j], recv_at += recv_rows[j];
  }
  MPI_Datatype rows;
  MPI_Type_contiguous(count_of(row, "alltoallv"), mpi_type(in.dt), &rows);
  MPI_Type_commit(&rows);
  MPI_Request r;
  MPI_Ialltoallv(in.p, &args[0], &args[size_], rows, out.p, &args[2 * size_], &args[3 * size_], rows, comm_, &r);
  MPI_Type_free(&rows);  // (freed once the operation no longer needs it)
  const Handle h = keep(r);
  alltoallv_args_[h] = std::move(args);
  return h;
}

DataComm::Handle MpiDataComm::isend(CRef data, size_t n, int peer, int tag) {
  MPI_Request r;
  MPI_Isend(data.p, count_of(n, "isend"), mpi_type(data.dt), peer, tag, comm_, &r);
  return keep(r);
}

DataComm::Handle MpiDataComm::irecv(Ref data, size_t n, int peer, int tag) {
  MPI_Request r;
  MPI_Irecv(data.p, count_of(n, "irecv"), mpi_type(data.dt), peer, tag, comm_, &r);
  return keep(r);
}

bool MpiDataComm::test(Handle id) {
  int done = 0;
  MPI_Test(&requests_[id], &done, MPI_STATUS_IGNORE);  // a completed request becomes MPI_REQUEST_NULL
  return done != 0;
}

void MpiDataComm::wait(Handle id) {
  MPI_Wait(&requests_[id], MPI_STATUS_IGNORE);
  alltoallv_args_.erase(id);
  free_.push_back(id);
}

}  // namespace trainer
