#include "engine/grad_reduce.h"

#include <algorithm>

namespace trainer {

namespace {
// One data-parallel call moves at most this many elements (MPI counts are int).
constexpr size_t kMaxElems = size_t(1) << 28;
}

void reduce_replica_grads(Chunks& chunks, DataComm* embed, bool tied_embeddings) {
  for (auto& m : chunks) m->reduce_sequence_parallel_grads();
  if (!tied_embeddings || !embed || embed->size() <= 1) return;
  for (auto& m : chunks) {
    if (!(m->chunk().embed || m->chunk().head)) continue;
    const ParamInfo& p = m->registry().at("embed.tok");
    embed->allreduce_sum(m->grads().ref(p.offset), p.numel);
  }
}

void reduce_data_parallel_grads(Backend& be, Chunks& chunks, DataComm& dp, Buffer* wire_buf) {
  if (dp.size() == 1) return;
  // The reduction reads what the backward wrote: on a device, the
  // communication stream waits for the compute stream to get here.
  be.wait_event(Backend::kCommStream, be.record_event(Backend::kComputeStream));
  const bool narrow = wire_buf && *wire_buf;
  // Each piece travels as itself (fp32) or as its slice of the wire buffer,
  // which is laid out as the chunks' gradients one after another.
  struct Piece {
    Ref grad, travels;
    size_t n;
  };
  std::vector<Piece> pieces;
  size_t wire_off = 0;
  for (auto& m : chunks)
    for (size_t off = 0; off < m->grads().count(); off += kMaxElems) {
      const size_t n = std::min(kMaxElems, m->grads().count() - off);
      pieces.push_back({m->grads().ref(off), narrow ? wire_buf->ref(wire_off) : m->grads().ref(off), n});
      wire_off += n;
    }
  std::vector<DataComm::Handle> started;
  for (const Piece& p : pieces) {
    if (narrow) be.convert(p.travels, p.grad, p.n);
    started.push_back(dp.start_allreduce(p.travels, p.n, ReduceOp::Sum));
  }
  for (DataComm::Handle h : started) dp.wait(h);
  if (narrow)
    for (const Piece& p : pieces) be.convert(p.grad, p.travels, p.n);
}

double global_grad_sumsq(Chunks& chunks, ControlComm* pp) {
  double s = 0;
  for (auto& m : chunks) s += m->grad_sumsq();
  if (pp) pp->allreduce_sum(&s, 1);
  return s;
}

}  // namespace trainer
