#include "engine/grad_reduce.h"

#include <algorithm>

#include "model/adamw.h"

namespace trainer {

void reduce_replica_grads(Chunks& chunks, DataComm* embed, bool tied_embeddings) {
  for (auto& m : chunks) m->reduce_sequence_parallel_grads();
  if (!tied_embeddings || !embed || embed->size() <= 1) return;
  for (auto& m : chunks) {
    if (!(m->chunk().embed || m->chunk().head)) continue;
    const ParamInfo& p = m->registry().at("embed.tok");
    embed->allreduce_sum(m->grads().ref(p.offset), p.numel);
  }
}

std::vector<Zero1Region> zero1_regions(Transformer& m, DataComm& dp, DataComm* edp) {
  const size_t n = m.num_params(), lo = m.registry().experts_lo();
  if (!edp || lo == n) return {{0, n, &dp}};
  return {{0, lo, &dp}, {lo, n, edp}};
}

std::vector<OwnedRange> zero1_owned(const std::vector<Zero1Region>& regions) {
  std::vector<OwnedRange> out;
  size_t local = 0;
  for (const Zero1Region& g : regions) {
    const std::vector<OwnedRange> more = zero_ranges(g.hi - g.lo, g.comm->rank(), g.comm->size(), g.lo, local);
    for (const OwnedRange& o : more) local += o.hi - o.lo;
    out.insert(out.end(), more.begin(), more.end());
  }
  return out;
}

void reduce_scatter_grads(Backend& be, Chunks& chunks, const Zero1Regions& regions, Buffer* wire_buf,
                          Buffer& block_buf) {
  be.wait_event(Backend::kCommStream, be.record_event(Backend::kComputeStream));
  const bool narrow = wire_buf && *wire_buf;
  size_t wire_off = 0;
  for (size_t c = 0; c < chunks.size(); c++) {
    Transformer& m = *chunks[c];
    for (const Zero1Region& g : regions[c]) {
      DataComm& dp = *g.comm;
      if (dp.size() == 1) continue;
      const size_t D = (size_t)dp.size(), r = (size_t)dp.rank();
      const size_t n = g.hi - g.lo, block = n / D, body = block * D;
      const Ref grads = m.grads().ref(g.lo), travels = narrow ? wire_buf->ref(wire_off + g.lo) : grads;
      if (narrow) be.convert(travels, grads, n);
      std::vector<DataComm::Handle> started;
      if (block) started.push_back(dp.start_reduce_scatter(travels, block_buf.ref(), block));
      if (body < n) started.push_back(dp.start_allreduce(travels + body, n - body, ReduceOp::Sum));
      for (DataComm::Handle h : started) dp.wait(h);
      if (block) be.convert(grads + r * block, block_buf.ref(), block);  // a copy in fp32
      if (narrow && body < n) be.convert(grads + body, travels + body, n - body);
    }
    wire_off += m.num_params();
  }
}

std::vector<Backend::SumSpan> step_spans(Chunks& chunks) {
  std::vector<Backend::SumSpan> spans;
  for (auto& m : chunks) {
    const std::vector<Backend::SumSpan> more = m->step_sum_spans(0, m->num_params());
    spans.insert(spans.end(), more.begin(), more.end());
  }
  return spans;
}

std::vector<Backend::SumSpan> zero1_step_spans(Chunks& chunks, const Zero1Regions& regions) {
  std::vector<Backend::SumSpan> spans;
  const auto add = [&](const std::vector<Backend::SumSpan>& more) { spans.insert(spans.end(), more.begin(), more.end()); };
  for (size_t c = 0; c < chunks.size(); c++) {
    Transformer& m = *chunks[c];
    bool losses = false;  // (the head's losses once, with the first block)
    for (const OwnedRange& o : zero1_owned(regions[c])) {
      if (o.shared && !o.saver) continue;
      if (!losses) add(m.step_sum_spans(o.lo, o.hi)), losses = true;
      else add(m.grad_spans(o.lo, o.hi));
    }
    if (!losses) add(m.step_sum_spans(0, 0));
  }
  return spans;
}

StepSums read_step_sums(Backend& be, const std::vector<Backend::SumSpan>& spans, ControlComm* dp, ControlComm* tp,
                        ControlComm* pp, ControlComm* ep) {
  double sums[4] = {0, 0, 0, 0};  // sharded grads, replicated grads, losses, experts' grads (ep > 1)
  be.sumsq_groups(spans, sums, 4);
  if (dp) {  // (sharded: each element on one replica; the losses are not summed here)
    double grads[3] = {sums[0], sums[1], sums[3]};
    dp->allreduce_sum(grads, 3);
    sums[0] = grads[0], sums[1] = grads[1], sums[3] = grads[2];
  }
  if (tp) tp->allreduce_sum(&sums[0], 1);
  if (ep && !dp) ep->allreduce_sum(&sums[3], 1);
  StepSums out;
  out.grad_sumsq = sums[0] + sums[1] + sums[3];
  if (pp) pp->allreduce_sum(&out.grad_sumsq, 1);
  out.loss_sum = sums[2];
  return out;
}

void allgather_weights(Backend& be, Chunks& chunks, const Zero1Regions& regions, Buffer& block_buf) {
  be.wait_event(Backend::kCommStream, be.record_event(Backend::kComputeStream));
  for (size_t c = 0; c < chunks.size(); c++) {
    Transformer& m = *chunks[c];
    Buffer& w = m.compute_copy() ? *m.compute_copy() : m.params();
    for (const Zero1Region& g : regions[c]) {
      DataComm& dp = *g.comm;
      const size_t D = (size_t)dp.size(), r = (size_t)dp.rank(), block = (g.hi - g.lo) / D;
      if (D == 1 || !block) continue;
      be.copy(block_buf.ref(), w.ref(g.lo + r * block), block);  // MPI may not gather from inside its destination
      dp.wait(dp.start_allgather(block_buf.ref(), w.ref(g.lo), block));
    }
  }
}

}  // namespace trainer
