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
  std::vector<DataComm::Handle> started;
  size_t wire_off = 0;
  std::vector<std::pair<Ref, size_t>> back;  // (fp32 destination, wire offset) per piece
  for (auto& m : chunks) {
    Buffer& g = m->grads();
    for (size_t off = 0; off < g.count(); off += kMaxElems) {
      const size_t n = std::min(kMaxElems, g.count() - off);
      if (!narrow) {
        started.push_back(dp.start_allreduce(g.ref(off), n, ReduceOp::Sum));
        continue;
      }
      const Ref w = wire_buf->ref(wire_off);
      be.convert(w, g.ref(off), n);
      started.push_back(dp.start_allreduce(w, n, ReduceOp::Sum));
      back.push_back({g.ref(off), wire_off});
      wire_off += n;
    }
  }
  for (DataComm::Handle h : started) dp.wait(h);
  for (size_t i = 0; i < back.size(); i++) {
    const size_t n = (i + 1 < back.size() ? back[i + 1].second : wire_off) - back[i].second;
    be.convert(back[i].first, wire_buf->ref(back[i].second), n);
  }
}

double global_grad_sumsq(Chunks& chunks, ControlComm* pp) {
  double s = 0;
  for (auto& m : chunks) s += m->grad_sumsq();
  if (pp) pp->allreduce_sum(&s, 1);
  return s;
}

}  // namespace trainer
